package status

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-offload/kubectl-offload/internal/exit"
)

var reportType = metav1.TypeMeta{APIVersion: "offload.io/v1alpha1", Kind: "StatusReport"}

// Report is what `kubectl offload status` prints. Its JSON form is a
// scripting contract: fields, sections and checks are only ever added, and
// the names of sections and checks never change.
type Report struct {
	metav1.TypeMeta `json:",inline"`
	// Namespace is the install namespace that was checked.
	Namespace string `json:"namespace"`
	// Healthy is true when no check failed; warnings leave it true.
	Healthy bool `json:"healthy"`
	// Sections are the results of the checkers, in the order they ran.
	Sections []Section `json:"sections"`
}

// Status is the outcome of a check, and of a section: the worst of its checks.
type Status string

// The outcomes of a check.
const (
	// StatusOK means the check passed.
	StatusOK Status = "ok"
	// StatusWarning means something deserves attention but works.
	StatusWarning Status = "warning"
	// StatusFailed means something is broken; the command exits 1.
	StatusFailed Status = "failed"
)

// severity orders the statuses from best to worst.
func (s Status) severity() int {
	switch s {
	case StatusOK:
		return 0
	case StatusWarning:
		return 1
	}
	return 2
}

// Section is the result of one Checker.
type Section struct {
	// Name is the stable machine name of the section, such as controlPlane.
	Name string `json:"name"`
	// Title is the human heading of the section, such as "Control plane".
	Title string `json:"title"`
	// Status is the worst status of the section's checks.
	Status Status `json:"status"`
	// Fields are key/value facts, shown as "Label: value" lines.
	Fields []Field `json:"fields,omitempty"`
	// Table is a small table of facts, such as one row per Deployment.
	Table *Table `json:"table,omitempty"`
	// VirtualNodes are the virtual nodes, in the virtualNodes section.
	VirtualNodes []VirtualNode `json:"virtualNodes,omitempty"`
	// OffloadedNamespaces are the offloaded namespaces, one per peer, in
	// the offloadedNamespaces section.
	OffloadedNamespaces []OffloadedNamespace `json:"offloadedNamespaces,omitempty"`
	// Tunnels are the ends of the network tunnels to the peers, in the
	// tunnels section and the peer section of `status peer`.
	Tunnels []Tunnel `json:"tunnels,omitempty"`
	// Checks are the verdicts of the section.
	Checks []Check `json:"checks"`
}

// Field is one key/value fact of a section.
type Field struct {
	// Name is the stable machine name of the field, such as clusterID.
	Name string `json:"name"`
	// Label is the human name of the field, such as "Cluster ID".
	Label string `json:"label"`
	// Value is the value; empty when it is not set.
	Value string `json:"value"`
}

// Table is a small table of facts with a header row.
type Table struct {
	// Columns are the column headings.
	Columns []string `json:"columns"`
	// Rows hold one cell per column.
	Rows [][]string `json:"rows"`
}

// Check is one verdict: what was checked, the outcome and a message that
// says what to do next when it is not ok.
type Check struct {
	// Name is the stable machine name of the check, such as deployment/offload-auth.
	Name string `json:"name"`
	// Status is the outcome.
	Status Status `json:"status"`
	// Message explains the outcome.
	Message string `json:"message"`
}

// OK is a passed check called name, its message formatted as fmt.Sprintf does.
func OK(name, format string, args ...any) Check {
	return Check{Name: name, Status: StatusOK, Message: fmt.Sprintf(format, args...)}
}

// Warn is a check called name that deserves attention but works.
func Warn(name, format string, args ...any) Check {
	return Check{Name: name, Status: StatusWarning, Message: fmt.Sprintf(format, args...)}
}

// Fail is a failed check called name: its message says what to do.
func Fail(name, format string, args ...any) Check {
	return Check{Name: name, Status: StatusFailed, Message: fmt.Sprintf(format, args...)}
}

// worst returns the worst status of checks, or StatusOK when there are none.
func worst(checks []Check) Status {
	s := StatusOK
	for _, c := range checks {
		if c.Status.severity() > s.severity() {
			s = c.Status
		}
	}
	return s
}

// Err returns nil when the report is healthy, and otherwise an exit error
// with code 1 that counts the failed checks and names their sections, such
// as "2 checks failed: control plane, crds".
func (r Report) Err() error {
	n, sections := 0, []string{}
	for _, s := range r.Sections {
		failed := 0
		for _, c := range s.Checks {
			if c.Status == StatusFailed {
				failed++
			}
		}
		if failed > 0 {
			n += failed
			sections = append(sections, strings.ToLower(s.Title))
		}
	}
	if n == 0 {
		return nil
	}
	noun := "checks"
	if n == 1 {
		noun = "check"
	}
	return &exit.Error{Code: 1, Err: fmt.Errorf("%d %s failed: %s", n, noun, strings.Join(sections, ", "))}
}
