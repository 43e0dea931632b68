package status

import (
	"io"
	"strings"

	"github.com/pterm/pterm"
	"golang.org/x/term"

	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
)

// notSet stands in for an empty field value in the table.
const notSet = "not set"

// The width of the boxes: the terminal's, within bounds, and plainWidth
// when the output is not a terminal.
const (
	plainWidth = 100
	minWidth   = 60
	maxWidth   = 140
)

// tableWidth returns the width of the table written to w.
func tableWidth(w io.Writer, tty bool) int {
	f, ok := w.(interface{ Fd() uintptr })
	if !tty || !ok {
		return plainWidth
	}
	cols, _, err := term.GetSize(int(f.Fd()))
	if err != nil || cols <= 0 {
		return plainWidth
	}
	return min(max(cols, minWidth), maxWidth)
}

// theme holds the pterm styles of the table: coloured on a terminal, and
// empty, so that nothing but text is written, everywhere else.
type theme struct {
	box, title, header, text *pterm.Style
	marks                    map[Status]string
}

func newTheme(colour bool) theme {
	plain := pterm.NewStyle()
	t := theme{box: plain, title: plain, header: plain, text: plain, marks: map[Status]string{
		StatusOK: "✓", StatusWarning: "!", StatusFailed: "✗",
	}}
	if colour {
		t.box, t.title = &pterm.ThemeDefault.BoxStyle, &pterm.ThemeDefault.BoxTitleStyle
		t.header = &pterm.ThemeDefault.TableHeaderStyle
		t.marks = map[Status]string{
			StatusOK:      pterm.Green("✓"),
			StatusWarning: pterm.Yellow("!"),
			StatusFailed:  pterm.Red("✗"),
		}
	}
	return t
}

// writeTable renders r as one box per section, all as wide as the widest
// and at most width columns, with a ✓, ! or ✗ mark per check. colour adds
// ANSI colours; without it the output is plain text.
func writeTable(w io.Writer, r Report, colour bool, width int) error {
	t := newTheme(colour)
	// A box line is "│ " + text + " │".
	inner := width - 4
	bodies := make([][]string, len(r.Sections))
	width = 0
	for i, s := range r.Sections {
		body, err := t.body(s, inner)
		if err != nil {
			return err
		}
		bodies[i] = body
		// The title is framed as "─ Title ─" inside the top border.
		width = max(width, output.Width(s.Title)+4)
		for _, line := range body {
			width = max(width, output.Width(line))
		}
	}
	var b strings.Builder
	for i, s := range r.Sections {
		lines := bodies[i]
		// Padding the first line pads the box: pterm sizes it by its widest line.
		lines[0] += strings.Repeat(" ", width-output.Width(lines[0]))
		box := pterm.DefaultBox.WithTitle(s.Title).WithTitleTopLeft().
			WithBoxStyle(t.box).WithTitleStyle(t.title).WithTextStyle(t.text)
		b.WriteString(box.Sprint(strings.Join(lines, "\n")))
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// body returns the lines inside the box of section s: its fields, its
// table, and then its checks, wrapped at width.
func (t theme) body(s Section, width int) ([]string, error) {
	var lines []string
	if len(s.Fields) > 0 {
		data := make([][]string, len(s.Fields))
		for i, f := range s.Fields {
			v := f.Value
			if v == "" {
				v = notSet
			}
			data[i] = []string{f.Label + ":", v}
		}
		out, err := t.table(data, false)
		if err != nil {
			return nil, err
		}
		lines = append(lines, out...)
	}
	if s.Table != nil && len(s.Table.Rows) > 0 {
		out, err := t.table(append([][]string{s.Table.Columns}, s.Table.Rows...), true)
		if err != nil {
			return nil, err
		}
		lines = append(lines, out...)
	}
	if len(lines) > 0 && len(s.Checks) > 0 {
		lines = append(lines, "")
	}
	for _, c := range s.Checks {
		// The mark takes two columns; continuation lines are indented as much.
		for i, l := range wrap(c.Message, width-2) {
			prefix := "  "
			if i == 0 {
				prefix = t.marks[c.Status] + " "
			}
			lines = append(lines, prefix+l)
		}
	}
	if len(lines) == 0 {
		lines = []string{""}
	}
	return lines, nil
}

// table renders rows as aligned columns without borders, the first one a
// header when header is set.
func (t theme) table(rows [][]string, header bool) ([]string, error) {
	c := output.Columns{Rows: rows, Gap: 2, CellStyle: func(s string) string { return t.text.Sprint(s) }}
	if header && len(rows) > 0 {
		c.Header, c.Rows = rows[0], rows[1:]
		c.HeaderStyle = func(s string) string { return t.header.Sprint(s) }
	}
	return c.Lines(), nil
}

// wrap breaks s into lines of at most width columns at spaces. A word
// longer than width gets a line of its own.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case output.Width(line)+1+output.Width(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
}
