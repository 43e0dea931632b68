// Package output renders command results as tables, JSON or YAML, and shows
// the progress of multi-step operations.
package output

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// Format is a value of the -o/--output flag.
type Format string

// The output formats every reporting command accepts.
const (
	Table Format = "table"
	JSON  Format = "json"
	YAML  Format = "yaml"
)

// Formats lists the accepted -o values, for help text and completion.
var Formats = []string{string(Table), string(JSON), string(YAML)}

// AddFlag binds -o/--output to f with the given default.
func AddFlag(fs *pflag.FlagSet, f *Format, def Format) {
	*f = def
	fs.VarP((*formatValue)(f), "output", "o", fmt.Sprintf("Output format: one of %s.", strings.Join(Formats, "|")))
}

// Validate reports an unknown format.
func (f Format) Validate() error {
	switch f {
	case Table, JSON, YAML:
		return nil
	}
	return fmt.Errorf("unknown output format %q: use one of %s", f, strings.Join(Formats, "|"))
}

// Write renders v to out in format f. For Table it calls table, which renders
// the human form; JSON and YAML marshal v, which is a scripting contract.
func Write(out io.Writer, f Format, v any, table func(io.Writer) error) error {
	switch f {
	case JSON:
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding json: %w", err)
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	case YAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding yaml: %w", err)
		}
		_, err = out.Write(b)
		return err
	case Table, "":
		return table(out)
	}
	return f.Validate()
}

type formatValue Format

func (v *formatValue) String() string { return string(*v) }
func (v *formatValue) Type() string   { return "format" }
func (v *formatValue) Set(s string) error {
	f := Format(strings.ToLower(s))
	if err := f.Validate(); err != nil {
		return err
	}
	*v = formatValue(f)
	return nil
}
