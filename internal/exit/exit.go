// Package exit carries a process exit code inside an error, so that only
// cli.Run decides how the process ends.
package exit

import "errors"

// Error is an error with the exit code the process should end with.
type Error struct {
	Code int
	Err  error
}

// Error returns the message of the wrapped error.
func (e *Error) Error() string {
	if e.Err == nil {
		return ""
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *Error) Unwrap() error { return e.Err }

// Code returns the exit code for err: 0 for nil, the code of an *Error
// anywhere in its chain, and 1 otherwise.
func Code(err error) int {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 1
}
