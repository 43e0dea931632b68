// Package offload holds the CLI side of namespace offloading:
// `kubectl offload namespace NS` writes the NamespaceOffloading that asks the
// consumer's agent to extend NS to peers, and waits for its twin namespaces;
// `kubectl offload unoffload namespace NS` removes it. The agent does the
// work; nothing here has to be kept alive by the CLI.
package offload

import (
	"errors"
	"fmt"
)

// The kinds of error the commands return, for errors.Is. The messages of
// the errors wrapping them say what to do next.
var (
	// ErrNamespaceNotFound is returned when NS does not exist.
	ErrNamespaceNotFound = errors.New("namespace not found")
	// ErrNamespaceRefused is returned for a namespace that cannot be offloaded.
	ErrNamespaceRefused = errors.New("namespace cannot be offloaded")
	// ErrNotInstalled is returned when the NamespaceOffloading CRD is missing.
	ErrNotInstalled = errors.New("kubectl-offload is not installed")
	// ErrNoPeer is returned when no virtual node matches --selector.
	ErrNoPeer = errors.New("no peer matches")
	// ErrNotOffloaded is returned by unoffload for a namespace without a NamespaceOffloading.
	ErrNotOffloaded = errors.New("namespace is not offloaded")
	// ErrBeingUnoffloaded is returned when NS's NamespaceOffloading is being deleted.
	ErrBeingUnoffloaded = errors.New("namespace is being unoffloaded")
	// ErrTimeout is returned when --wait gives up after --timeout.
	ErrTimeout = errors.New("timed out")
)

// kindError is an error with its own message whose kind is one of the
// Err values above.
type kindError struct {
	kind error
	msg  string
}

func newError(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// RemoteNamespaceFailedError is a twin namespace the agent could not set
// up, for instance because EnforceSameName found the name taken. Message
// is the agent's explanation.
type RemoteNamespaceFailedError struct {
	ClusterName     string
	RemoteNamespace string
	Message         string
}

// Error says which twin namespace failed and why.
func (e *RemoteNamespaceFailedError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = "no reason given"
	}
	return fmt.Sprintf("twin namespace %s on %s failed: %s", e.RemoteNamespace, e.ClusterName, msg)
}
