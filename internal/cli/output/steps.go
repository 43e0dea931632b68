package output

import (
	"fmt"
	"io"
	"time"

	"github.com/pterm/pterm"
)

// Steps prints the progress of a multi-step operation, one line per step:
// " ✓ step" when it succeeds and " ✗ step: reason" when it fails. On a
// terminal the running step shows a spinner.
type Steps struct {
	w   io.Writer
	tty bool
}

// NewSteps returns Steps writing to w, normally the error stream.
func NewSteps(w io.Writer) *Steps {
	return &Steps{w: w, tty: IsTerminal(w)}
}

// Run runs fn as the step called name and reports its outcome. It returns fn's error.
func (s *Steps) Run(name string, fn func() error) error {
	var spinner *pterm.SpinnerPrinter
	if s.tty {
		spinner, _ = pterm.DefaultSpinner.WithWriter(s.w).WithRemoveWhenDone(true).
			WithDelay(100 * time.Millisecond).Start(name)
	}
	err := fn()
	if spinner != nil {
		_ = spinner.Stop()
	}
	if err != nil {
		s.Fail(name, err)
		return err
	}
	s.Done(name)
	return nil
}

// Done reports a step that succeeded.
func (s *Steps) Done(name string) {
	mark := "✓"
	if s.tty {
		mark = pterm.Green(mark)
	}
	fmt.Fprintf(s.w, " %s %s\n", mark, name)
}

// Fail reports a step that failed, with its reason.
func (s *Steps) Fail(name string, err error) {
	mark := "✗"
	if s.tty {
		mark = pterm.Red(mark)
	}
	fmt.Fprintf(s.w, " %s %s: %v\n", mark, name, err)
}

// Warn prints a warning line.
func (s *Steps) Warn(format string, args ...any) {
	mark := "!"
	if s.tty {
		mark = pterm.Yellow(mark)
	}
	fmt.Fprintf(s.w, " %s %s\n", mark, fmt.Sprintf(format, args...))
}
