// Command compat turns the `go test -json` output of TestCompatibility
// runs, one file per version pair named CONSUMER_PROVIDER.json, into the
// result table of docs/compatibility.md (hack/compat.sh, make compat).
//
//	compat -summary FILE      prints one pair's checks
//	compat -doc PATH FILE...  rewrites the table in PATH; exits 1 when a check failed
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

const (
	test  = "TestCompatibility"
	begin = "<!-- compat-table:begin -->"
	end   = "<!-- compat-table:end -->"
)

// run is one pair's result: each check's outcome (pass, fail, skip) in
// the order the test ran them, and the test's own outcome.
type run struct {
	consumer, provider string
	checks             []string
	outcome            map[string]string
	test               string
	seconds            float64
}

func main() {
	summary := flag.String("summary", "", "print the checks of this one result file")
	doc := flag.String("doc", "", "rewrite the result table of this Markdown file from the result files given as arguments")
	flag.Parse()
	if err := do(*summary, *doc, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		os.Exit(1)
	}
}

func do(summary, doc string, files []string) error {
	if summary != "" {
		r, err := read(summary)
		if err != nil {
			return err
		}
		for _, c := range r.checks {
			fmt.Printf("  %s %s\n", mark(r.outcome[c]), c)
		}
		fmt.Printf("  %s TestCompatibility (%s)\n", mark(r.test), time.Duration(r.seconds*float64(time.Second)).Round(time.Second))
		return nil
	}
	if doc == "" || len(files) == 0 {
		return errors.New("usage: compat -summary FILE, or compat -doc PATH FILE (one or more)")
	}
	var runs []run
	for _, f := range files {
		r, err := read(f)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	table := render(runs, time.Now().UTC(), commit())
	b, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	i, j := strings.Index(string(b), begin), strings.Index(string(b), end)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s ... %s markers", doc, begin, end)
	}
	out := string(b[:i+len(begin)]) + "\n" + table + string(b[j:])
	if err := os.WriteFile(doc, []byte(out), 0o644); err != nil {
		return err
	}
	for _, r := range runs {
		if r.test != "pass" {
			return fmt.Errorf("consumer %s with provider %s: TestCompatibility %s; see %s", r.consumer, r.provider, r.test, doc)
		}
	}
	return nil
}

// read parses one result file; its name says the pair.
func read(path string) (run, error) {
	pair := strings.TrimSuffix(filepath.Base(path), ".json")
	c, p, ok := strings.Cut(pair, "_")
	if !ok {
		return run{}, fmt.Errorf("%s: want a file named CONSUMER_PROVIDER.json", path)
	}
	r := run{consumer: c, provider: p, outcome: map[string]string{}, test: "not run"}
	f, err := os.Open(path)
	if err != nil {
		return run{}, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 16<<20)
	for s.Scan() {
		var e struct {
			Action, Test string
			Elapsed      float64
		}
		if json.Unmarshal(s.Bytes(), &e) != nil {
			continue // a build error or another line that is not an event
		}
		switch {
		case e.Test == test && isOutcome(e.Action):
			r.test, r.seconds = e.Action, e.Elapsed
		case strings.HasPrefix(e.Test, test+"/"):
			name := strings.ReplaceAll(strings.TrimPrefix(e.Test, test+"/"), "_", " ")
			if !slices.Contains(r.checks, name) {
				r.checks = append(r.checks, name)
			}
			if isOutcome(e.Action) {
				r.outcome[name] = e.Action
			}
		}
	}
	return r, s.Err()
}

func isOutcome(action string) bool { return action == "pass" || action == "fail" || action == "skip" }

func mark(outcome string) string {
	switch outcome {
	case "pass":
		return "✓"
	case "fail":
		return "✗"
	case "skip":
		return "–"
	}
	return "?"
}

// render makes the Markdown table: a row per pair, a column per check.
func render(runs []run, now time.Time, commit string) string {
	var checks []string
	for _, r := range runs {
		for _, c := range r.checks {
			if !slices.Contains(checks, c) {
				checks = append(checks, c)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Last run: %s, commit %s, `make compat`. ✓ passed, ✗ failed, – skipped after a failed check, ? not run.\n\n", now.Format("2006-01-02"), commit)
	b.WriteString("| consumer | provider | " + strings.Join(checks, " | ") + " | time |\n")
	b.WriteString("|---|---|" + strings.Repeat("---|", len(checks)) + "---|\n")
	for _, r := range runs {
		row := []string{r.consumer, r.provider}
		for _, c := range checks {
			row = append(row, mark(r.outcome[c]))
		}
		row = append(row, time.Duration(r.seconds*float64(time.Second)).Round(time.Second).String())
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}

// commit is the checked-out commit, marked dirty when the tree has changes.
func commit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
