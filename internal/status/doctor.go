package status

import (
	"context"
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubectl-offload/kubectl-offload/internal/buildinfo"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
)

// doctorReportType is the kind of the report of `kubectl offload doctor`,
// which has the shape of a StatusReport.
var doctorReportType = metav1.TypeMeta{APIVersion: "offload.io/v1alpha1", Kind: "DoctorReport"}

// DoctorEnv is what the checks of `kubectl offload doctor` work with: the
// Env of status, and what only active checks need.
type DoctorEnv struct {
	*Env
	// Config is the client configuration of the cluster; its Host is the
	// kubeconfig's server.
	Config *rest.Config
	// ProbeTimeout bounds each network probe: a TCP connection and TLS
	// handshake, or one HTTP request.
	ProbeTimeout time.Duration
	// CLIVersion is the version of this kubectl-offload binary.
	CLIVersion string
}

// doctorChecker produces one section of the doctor's report.
type doctorChecker interface {
	// Name returns the stable machine name of the section.
	Name() string
	// Check inspects the cluster, actively where it must, and returns the
	// section. Problems are failed checks, not errors.
	Check(ctx context.Context, d *DoctorEnv) Section
}

// doctorCheckers returns the checkers of `kubectl offload doctor`, in the
// order their sections are shown.
func doctorCheckers() []doctorChecker {
	return []doctorChecker{
		apiServerURLChecker{},
		authEndpointChecker{},
		gatewayEndpointChecker{},
		cidrChecker{},
		interferenceChecker{},
		clockSkewChecker{},
		versionsChecker{},
	}
}

// collectDoctor runs every checker against d and assembles the report.
func collectDoctor(ctx context.Context, d *DoctorEnv, checkers []doctorChecker) Report {
	sections := make([]func() (string, Section), len(checkers))
	for i, c := range checkers {
		sections[i] = func() (string, Section) { return c.Name(), c.Check(ctx, d) }
	}
	return assemble(doctorReportType, d.Namespace, sections)
}

// DoctorOptions are the options of `kubectl offload doctor`.
type DoctorOptions struct {
	genericiooptions.IOStreams

	Output output.Format
	// Timeout bounds the whole run.
	Timeout time.Duration
	// ProbeTimeout bounds each network probe.
	ProbeTimeout time.Duration

	checkers   []doctorChecker
	cliVersion string
	kube       kubernetes.Interface
	newEnv     func() *DoctorEnv
}

// NewDoctorOptions returns DoctorOptions with defaults.
func NewDoctorOptions(streams genericiooptions.IOStreams) *DoctorOptions {
	return &DoctorOptions{
		IOStreams:    streams,
		Output:       output.Table,
		Timeout:      time.Minute,
		ProbeTimeout: 5 * time.Second,
		checkers:     doctorCheckers(),
		cliVersion:   buildinfo.Version,
	}
}

// Complete builds the clients from the factory.
func (o *DoctorOptions) Complete(f factory.Factory) error {
	cfg, err := f.RESTConfig()
	if err != nil {
		return err
	}
	kube, newEnv, err := envFrom(f)
	if err != nil {
		return err
	}
	o.kube = kube
	o.newEnv = func() *DoctorEnv {
		return &DoctorEnv{Env: newEnv(), Config: cfg, ProbeTimeout: o.ProbeTimeout, CLIVersion: o.cliVersion}
	}
	return nil
}

// Validate checks the options.
func (o *DoctorOptions) Validate() error {
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", o.Timeout)
	}
	if o.ProbeTimeout <= 0 {
		return fmt.Errorf("--probe-timeout must be positive, got %s", o.ProbeTimeout)
	}
	return o.Output.Validate()
}

// Run runs every check once and prints the report. It returns an exit
// error with code 1 when a check failed; warnings do not fail.
func (o *DoctorOptions) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := reachable(ctx, o.kube); err != nil {
		return err
	}
	r := collectDoctor(ctx, o.newEnv(), o.checkers)
	if err := output.Write(o.Out, o.Output, r, func(w io.Writer) error {
		tty := output.IsTerminal(w)
		return writeTable(w, r, tty, tableWidth(w, tty))
	}); err != nil {
		return err
	}
	return r.Err()
}
