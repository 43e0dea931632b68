// Package doctor is `kubectl offload doctor`: active checks that probe
// the endpoints peers are given, the peers themselves and what else runs in
// the cluster, and say how to fix what users otherwise find by hand. Its
// report has the shape of status's (a DoctorReport of sections of checks),
// built and printed with package status's Env, Report and Print; each
// section comes from one checker.
package doctor

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubectl-offload/kubectl-offload/internal/buildinfo"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
	"github.com/kubectl-offload/kubectl-offload/internal/status"
)

// reportType is the kind of the report of `kubectl offload doctor`,
// which has the shape of a StatusReport.
var reportType = metav1.TypeMeta{APIVersion: "offload.io/v1alpha1", Kind: "DoctorReport"}

// Env is what the checks of `kubectl offload doctor` work with: the
// Env of status, and what only active checks need.
type Env struct {
	*status.Env
	// Config is the client configuration of the cluster; its Host is the
	// kubeconfig's server.
	Config *rest.Config
	// ProbeTimeout bounds each network probe: a TCP connection and TLS
	// handshake, or one HTTP request.
	ProbeTimeout time.Duration
	// CLIVersion is the version of this kubectl-offload binary.
	CLIVersion string
}

// checker produces one section of the doctor's report.
type checker interface {
	// Name returns the stable machine name of the section.
	Name() string
	// Check inspects the cluster, actively where it must, and returns the
	// section. Problems are failed checks, not errors.
	Check(ctx context.Context, d *Env) status.Section
}

// defaultCheckers returns the checkers of `kubectl offload doctor`, in the
// order their sections are shown.
func defaultCheckers() []checker {
	return []checker{
		apiServerURLChecker{},
		authEndpointChecker{},
		gatewayEndpointChecker{},
		cidrChecker{},
		interferenceChecker{},
		clockSkewChecker{},
		versionsChecker{},
	}
}

// collect runs every checker against d and assembles the report.
func collect(ctx context.Context, d *Env, checkers []checker) status.Report {
	sections := make([]func() (string, status.Section), len(checkers))
	for i, c := range checkers {
		sections[i] = func() (string, status.Section) { return c.Name(), c.Check(ctx, d) }
	}
	return status.Assemble(reportType, d.Namespace, sections)
}

// Options are the options of `kubectl offload doctor`.
type Options struct {
	genericiooptions.IOStreams

	Output output.Format
	// Timeout bounds the whole run.
	Timeout time.Duration
	// ProbeTimeout bounds each network probe.
	ProbeTimeout time.Duration

	checkers   []checker
	cliVersion string
	kube       kubernetes.Interface
	newEnv     func() *Env
}

// NewOptions returns Options with defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{
		IOStreams:    streams,
		Output:       output.Table,
		Timeout:      time.Minute,
		ProbeTimeout: 5 * time.Second,
		checkers:     defaultCheckers(),
		cliVersion:   buildinfo.Version,
	}
}

// Complete builds the clients from the factory.
func (o *Options) Complete(f factory.Factory) error {
	cfg, err := f.RESTConfig()
	if err != nil {
		return err
	}
	kube, newEnv, err := status.EnvFrom(f)
	if err != nil {
		return err
	}
	o.kube = kube
	o.newEnv = func() *Env {
		return &Env{Env: newEnv(), Config: cfg, ProbeTimeout: o.ProbeTimeout, CLIVersion: o.cliVersion}
	}
	return nil
}

// Validate checks the options.
func (o *Options) Validate() error {
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
func (o *Options) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := status.Reachable(ctx, o.kube); err != nil {
		return err
	}
	r := collect(ctx, o.newEnv(), o.checkers)
	if err := status.Print(o.Out, o.Output, r); err != nil {
		return err
	}
	return r.Err()
}
