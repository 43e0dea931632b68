package offload

import (
	"context"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
)

const namespaceLong = `Offload namespace NS: let its pods run in peer clusters, the providers, as
well as in this one.

The command writes the NamespaceOffloading "offloading" in NS; the agent then
creates a twin namespace on every selected provider, where the pods of NS
scheduled on that provider's virtual node run. Running the command again
with the same flags changes nothing; with other flags it updates the
NamespaceOffloading. The flags are the whole specification: a flag left out
takes its default.

--namespace-mapping-strategy names the twin namespaces: DefaultName gives
NS-<this cluster's name>-<hash>, unique on the provider; EnforceSameName
gives NS itself, and fails on a provider where NS is already taken.

--pod-offloading-strategy chooses where the pods may run: LocalAndRemote on
any node, Remote only on the virtual nodes of the selected providers, Local
only in this cluster. Local is the only strategy that needs no peer.

--selector selects providers by the labels of their virtual nodes (see
kubectl get nodes -l offload.io/type=virtual-node --show-labels), with the
syntax of kubectl get -l. It is stored as a node selector with one term, whose
expressions all must match: = and in become In, != and notin become NotIn,
KEY and !KEY become Exists and DoesNotExist, > and < become Gt and Lt. Without
it every provider is selected.

Before anything is written, NS must exist, kubectl-offload must be installed
and, except with Local, at least one virtual node must match --selector.
--dry-run runs the same checks and prints the NamespaceOffloading instead.

With --wait (the default) the command shows each twin namespace as it becomes
Ready, stops at the first one that fails with the agent's explanation, and
gives up after --timeout.`

const namespaceExample = `  # Offload namespace demo to every provider
  kubectl offload namespace demo

  # Only to the provider with cluster ID 123e4567-…, and run the pods there only
  kubectl offload namespace demo --pod-offloading-strategy Remote \
    --selector offload.io/remote-cluster-id=123e4567-e89b-12d3-a456-426614174000

  # Keep the namespace's name on the providers in region eu
  kubectl offload namespace demo --namespace-mapping-strategy EnforceSameName --selector 'region in (eu)'

  # Show the NamespaceOffloading without writing it
  kubectl offload namespace demo --dry-run -o yaml`

// NewCmdNamespace returns `kubectl offload namespace NS`.
func NewCmdNamespace(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewNamespaceOptions(streams)
	cmd := &cobra.Command{
		Use:               "namespace NS",
		Aliases:           []string{"ns"},
		Short:             "Offload a namespace so that its pods can run in peer clusters",
		Long:              namespaceLong,
		Example:           namespaceExample,
		ValidArgsFunction: completeNamespaces(f),
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
	fs := cmd.Flags()
	fs.StringVar(&o.NamespaceMappingStrategy, "namespace-mapping-strategy", o.NamespaceMappingStrategy, "How twin namespaces are named: DefaultName or EnforceSameName.")
	fs.StringVar(&o.PodOffloadingStrategy, "pod-offloading-strategy", o.PodOffloadingStrategy, "Where the pods may run: LocalAndRemote, Remote or Local.")
	fs.StringVarP(&o.Selector, "selector", "l", o.Selector, "Label selector on virtual-node labels choosing the providers, e.g. region=eu (default: every provider).")
	fs.BoolVar(&o.Wait, "wait", o.Wait, "Wait until every twin namespace is Ready or one fails.")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "How long --wait waits.")
	fs.BoolVar(&o.DryRun, "dry-run", o.DryRun, "Print the NamespaceOffloading instead of applying it; nothing is changed.")
	output.AddFlag(fs, &o.Output, o.Output)
	// -o only formats the --dry-run object, which is YAML unless -o json.
	outputFlag := fs.Lookup("output")
	outputFlag.Usage, outputFlag.DefValue = "Format of the --dry-run object: yaml or json.", string(output.YAML)
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{string(output.YAML), string(output.JSON)}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("namespace-mapping-strategy", fixed(mappingStrategies))
	_ = cmd.RegisterFlagCompletionFunc("pod-offloading-strategy", fixed(podStrategies))
	return cmd
}

const unoffloadNamespaceLong = `Stop offloading namespace NS.

The command deletes the NamespaceOffloading of NS. The agent then deletes the
pods of NS that run in providers and the twin namespaces, and only then lets
the NamespaceOffloading go. The pods that run in this cluster are left alone.

With --wait (the default) the command shows each twin namespace as it is
removed and returns once the NamespaceOffloading is gone, or gives up after
--timeout; the agent keeps going either way.`

const unoffloadNamespaceExample = `  # Stop offloading namespace demo and wait for the cleanup
  kubectl offload unoffload namespace demo

  # In a script that may run twice
  kubectl offload unoffload namespace demo --ignore-not-found --wait=false`

// NewCmdUnoffload returns `kubectl offload unoffload` and its namespace subcommand.
func NewCmdUnoffload(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "unoffload",
		Short: "Stop offloading",
		Long:  "Stop offloading: remove what kubectl offload namespace set up.",
	}
	cmd.AddCommand(newCmdUnoffloadNamespace(f, streams))
	return cmd
}

func newCmdUnoffloadNamespace(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewUnoffloadOptions(streams)
	cmd := &cobra.Command{
		Use:               "namespace NS",
		Aliases:           []string{"ns"},
		Short:             "Stop offloading a namespace and remove its twin namespaces in peer clusters",
		Long:              unoffloadNamespaceLong,
		Example:           unoffloadNamespaceExample,
		ValidArgsFunction: completeNamespaces(f),
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
	fs := cmd.Flags()
	fs.BoolVar(&o.IgnoreNotFound, "ignore-not-found", o.IgnoreNotFound, "Treat a namespace that is not offloaded, or does not exist, as done.")
	fs.BoolVar(&o.Wait, "wait", o.Wait, "Wait until the remote pods and twin namespaces are removed.")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "How long --wait waits.")
	return cmd
}

// fixed completes a flag with values.
func fixed[T ~string](values []T) cobra.CompletionFunc {
	s := make([]string, len(values))
	for i, v := range values {
		s[i] = string(v)
	}
	return cobra.FixedCompletions(s, cobra.ShellCompDirectiveNoFileComp)
}

// completeNamespaces completes NS with the cluster's namespaces.
func completeNamespaces(f factory.Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := f.Client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		var list corev1.NamespaceList
		if err := c.List(ctx, &list); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, toComplete) {
				out = append(out, ns.Name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
