package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
	"github.com/kubectl-offload/kubectl-offload/internal/exit"
)

const statusLong = `Check the health of kubectl-offload in the current cluster.

The report has one section per concern: the install namespace and Helm
release, the control plane Deployments, the offload.io CRDs, the local
cluster identity, the network CIDRs, the endpoints peers use, the peers, the
network tunnel to each peer (endpoint, WireGuard device, how each side sees
the other's pods, MTU, last handshake, bytes, and the first broken hop:
exchange, gateway or tunnel), the virtual nodes (Ready, capacity, pods) and
the offloaded namespaces (the remote namespace and phase on each peer).
Each check is marked ✓ (ok), ! (warning) or ✗ (failed), and says what to do
next. kubectl offload status peer NAME shows one peer in detail.

kubectl offload status exits 1 when any check failed; warnings do not fail.
With --wait it checks again until everything is healthy or --timeout passes.`

const statusExample = `  # Show the health of kubectl-offload in the current cluster
  kubectl offload status

  # Wait up to 5 minutes for a fresh install to become healthy
  kubectl offload status --wait --timeout 5m

  # The report as JSON, for scripts
  kubectl offload status -o json

  # Show one peer in detail
  kubectl offload status peer provider`

const peerLong = `Show one peer of this cluster in detail: its identity and endpoints, the
state of each direction of the peering, its virtual node, when the
credentials expire and when it was last seen, its network tunnels, and one
check per condition of its ForeignCluster.

A condition that is True is ✓ (ok), False is ✗ (failed) and Unknown is !
(warning). OutgoingPeering and VirtualNodeReady are ok while outgoing
peering is disabled, NetworkReady while networking is disabled, and a
network still coming up is a warning. Each tunnel's check names the first
hop that fails: the exchange of keys and endpoints through the provider's
API server, this cluster's gateway pod, or the tunnel to the peer's gateway;
the fabric check fails when a node has no routes to the peers. kubectl offload status peer exits 1 when a check failed
or there is no peer NAME; kubectl offload status lists the peers.`

const peerExample = `  # Show the peer called provider
  kubectl offload status peer provider

  # The same as JSON, for scripts
  kubectl offload status peer provider -o json`

// Options are the options of `kubectl offload status`.
type Options struct {
	genericiooptions.IOStreams

	Output  output.Format
	Wait    bool
	Timeout time.Duration
	// Checkers produce the sections of the report.
	Checkers []Checker

	// interval is the pause between two rounds of checks with --wait.
	interval time.Duration
	kube     kubernetes.Interface
	newEnv   func() *Env
	// now is the clock of the report; nil means time.Now.
	now func() time.Time
}

// NewOptions returns Options with defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{
		IOStreams: streams,
		Output:    output.Table,
		Timeout:   2 * time.Minute,
		Checkers:  DefaultCheckers(),
		interval:  2 * time.Second,
	}
}

// NewCmdStatus returns the status command.
func NewCmdStatus(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	return newCmdStatus(f, NewOptions(streams))
}

// newCmdStatus returns the status command bound to o, whose values are the flag defaults.
func newCmdStatus(f factory.Factory, o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show the health of kubectl-offload in the current cluster",
		Long:    statusLong,
		Example: statusExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.Wait, "wait", o.Wait, "Check again until every check passes or --timeout passes.")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "How long the checks, and the waiting with --wait, may take.")
	output.AddFlag(cmd.Flags(), &o.Output, o.Output)
	po := NewPeerOptions(o.IOStreams)
	po.now = o.now
	cmd.AddCommand(newCmdPeer(f, po))
	return cmd
}

// newCmdPeer returns `status peer` bound to o, whose values are the flag defaults.
func newCmdPeer(f factory.Factory, o *PeerOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "peer NAME",
		Short:   "Show one peer in detail",
		Long:    peerLong,
		Example: peerExample,
		// Validate says what to do when NAME is missing.
		Args: cobra.MaximumNArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			c, err := f.Client()
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			return PeerNames(cmd.Context(), c, toComplete), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f, args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "How long reading the peer may take.")
	output.AddFlag(cmd.Flags(), &o.Output, o.Output)
	return cmd
}

// Complete builds the clients from the factory.
func (o *Options) Complete(f factory.Factory) error {
	kube, newEnv, err := EnvFrom(f)
	if err != nil {
		return err
	}
	o.kube = kube
	o.newEnv = func() *Env {
		env := newEnv()
		env.clock = o.now
		return env
	}
	return nil
}

// EnvFrom builds from the factory the clients of status and doctor: the
// cluster's clientset, and a function that makes a new Env for a round of
// checks.
func EnvFrom(f factory.Factory) (kubernetes.Interface, func() *Env, error) {
	ns := f.Namespace()
	kube, err := f.KubeClient()
	if err != nil {
		return nil, nil, err
	}
	c, err := f.Client()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := f.HelmConfig(ns)
	if err != nil {
		return nil, nil, err
	}
	helm := helmclient.New(cfg, ns)
	return kube, func() *Env { return NewEnv(kube, c, helm, ns) }, nil
}

// Validate checks the options.
func (o *Options) Validate() error {
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", o.Timeout)
	}
	return o.Output.Validate()
}

// Run checks the installation, once or, with --wait, until it is healthy,
// and prints the report. It returns an exit error with code 1 when a check failed.
func (o *Options) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if !o.Wait {
		r, err := o.check(ctx)
		if r == nil {
			return err
		}
		if perr := Print(o.Out, o.Output, *r); perr != nil {
			return perr
		}
		return err
	}

	steps := output.NewSteps(o.ErrOut)
	fmt.Fprintf(o.ErrOut, "Waiting up to %s for kubectl-offload to become healthy\n", o.Timeout)
	var last *Report
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, o.interval, true, func(ctx context.Context) (bool, error) {
		r, err := o.check(ctx)
		if ctx.Err() != nil {
			// The deadline cut this round short; the previous one stands.
			return false, nil
		}
		if err != nil && (lastErr == nil || err.Error() != lastErr.Error()) {
			steps.Warn("not healthy yet: %v", err)
		}
		if r != nil {
			last = r
		}
		lastErr = err
		return err == nil, nil
	})
	if last != nil {
		if perr := Print(o.Out, o.Output, *last); perr != nil {
			return perr
		}
	}
	switch {
	case err == nil:
		steps.Done("kubectl-offload is healthy")
		return nil
	case errors.Is(ctx.Err(), context.Canceled):
		return ctx.Err()
	case lastErr == nil:
		lastErr = err
	}
	return &exit.Error{Code: 1, Err: fmt.Errorf("not healthy after %s: %w", o.Timeout, lastErr)}
}

// check runs one round of checks. It returns the report, if the cluster
// could be reached, and the report's error.
func (o *Options) check(ctx context.Context) (*Report, error) {
	if err := Reachable(ctx, o.kube); err != nil {
		return nil, err
	}
	r := Collect(ctx, o.newEnv(), o.Checkers)
	return &r, r.Err()
}

// Reachable returns an error when the API server cannot be reached at all,
// so that the report does not repeat a connection error in every check.
func Reachable(ctx context.Context, kube kubernetes.Interface) error {
	_, err := kube.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
	var status apierrors.APIStatus
	if err == nil || errors.As(err, &status) {
		return nil
	}
	return fmt.Errorf("cannot reach the cluster: %w (check --kubeconfig and --context)", err)
}

// Print writes r to out in format: a table, coloured and as wide as the
// terminal when out is one, or JSON or YAML.
func Print(out io.Writer, format output.Format, r Report) error {
	return output.Write(out, format, r, func(w io.Writer) error {
		tty := output.IsTerminal(w)
		return writeTable(w, r, tty, tableWidth(w, tty))
	})
}
