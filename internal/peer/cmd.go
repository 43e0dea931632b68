// Package peer holds the peer commands of the CLI: peer generate, peer
// out-of-band, peer tokens and unpeer. What they share with the agent (the
// token, the Secrets, the protocol) is in internal/peering.
package peer

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
)

const generateLong = `Create a peering token on this cluster, the provider, and print the command
that peers a consumer cluster with it.

The command carries the provider's name and cluster ID, the URL of its auth
service, the token and the hash of the auth service's CA, which the consumer
pins. The token is stored, as a hash, in a ConfigMap in the install namespace.
It expires after --ttl (1h by default, 24h at most), can be used once unless
--reusable is set, and its Secret is removed an hour after it expires. Treat the printed command as a password: it is the only
place kubectl offload ever shows a token.

The token also carries what the consumer's pods may do here, which this
cluster's API server enforces in the consumer's namespaces: the Pod Security
level (--pod-security, baseline by default; privileged lets them become root
on this cluster's nodes) and whether they may pick nodes
(--allow-node-placement; by default they select nodes only by operating
system and architecture, and tolerate no taint but not-ready and
unreachable). It also says whether the consumer may ask for twin namespaces
named as its own namespaces (--allow-same-name-namespaces, for namespace
mapping strategy EnforceSameName; by default this cluster names them, and it
never gives away the names it reserves), and which of this cluster's nodes
run the consumer's pods: those with the labels of --node-selector, tolerating
the taints of --toleration. The consumer's pods always carry that selector and
those tolerations, node placement or not, and the resources offered to the
consumer are counted on those nodes only. No extended resource of this
cluster's nodes, such as a GPU, is lent unless --extended-resource names it:
the offer then lends the same share of it as of cpu, and the consumer's
namespaces here may request no more. Each consumer container is held to
what is lent, which is its limit when it sets none, unless
--allow-unlimited-containers lets containers without limits use this
cluster's idle capacity (Kubernetes reclaims it first under pressure).
The policy is kept in the
consumer's Tenant (kubectl get tenants), where you can change it later with
kubectl edit tenant NAME.

A tenant belongs to the cluster that first peered with it: a consumer that is
already peered here can peer again only with a token bound to its name
(--consumer NAME, for example after it lost its credentials, or after a
replayed credential revoked them all), which also applies that token's policy.
A bound token peers no other consumer.

Nothing is created unless kubectl offload is installed and its auth service
has created its CA; kubectl offload status --wait waits for that.`

const generateExample = `  # Print the command to run on the consumer
  kubectl offload peer generate

  # A token for several consumers, valid for 8 hours, as JSON
  kubectl offload peer generate --reusable --ttl 8h -o json

  # Advertise the auth service behind a load balancer of your own
  kubectl offload peer generate --auth-url https://peering.example.com:443

  # A consumer whose pods run under Pod Security restricted
  kubectl offload peer generate --pod-security restricted

  # A consumer whose namespaces keep their names here (EnforceSameName)
  kubectl offload peer generate --allow-same-name-namespaces

  # A consumer whose pods run only on the nodes labelled pool=tenants, which
  # are tainted dedicated=tenants:NoSchedule for everyone else
  kubectl offload peer generate --node-selector pool=tenants --toleration dedicated=tenants:NoSchedule

  # Lend a share of this cluster's GPUs too (none is lent unless named)
  kubectl offload peer generate --extended-resource nvidia.com/gpu

  # Lend 20Gi of StorageClass standard for the consumer's PersistentVolumeClaims
  kubectl offload peer generate --storage 20Gi --storage-class standard

  # Let consumer edge-1, already peered here, peer again (and no one else)
  kubectl offload peer generate --consumer edge-1`

const tokensLong = `List and revoke the peering tokens of this cluster.

Revoking a token stops it from peering new consumers; consumers that already
peered keep their own credentials (kubectl offload unpeer removes those).`

// NewCmdPeer returns the peer command and its subcommands.
func NewCmdPeer(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "peer",
		Short: "Peer this cluster with other clusters",
		Long:  "Peer this cluster with other clusters: generate a peering command on the provider, run it on the consumer with out-of-band, and manage the tokens.",
	}
	cmd.AddCommand(newCmdGenerate("generate", f, streams))
	cmd.AddCommand(newCmdTokens(f, streams))
	cmd.AddCommand(newCmdOutOfBand(f, streams))
	return cmd
}

const outOfBandLong = `Peer this cluster, the consumer, with a provider, using the command that
kubectl offload peer generate printed on the provider.

Every flag is checked before anything is written. The token is then stored in
a Secret in the install namespace and the ForeignCluster NAME is created; the
agent exchanges the token with the provider's auth service, which it trusts
only when its CA matches --ca-cert-hash, and deletes the token once used.
Running the command again with the same arguments changes nothing; with a new
token it retries at once.

With --wait (the default) the command reports each peering step until it
succeeds, fails with the provider's explanation, or --timeout passes.`

const outOfBandExample = `  # Run the command peer generate printed on the provider
  kubectl offload peer out-of-band provider --auth-url https://203.0.113.7:31443 \
    --cluster-id 123e4567-e89b-12d3-a456-426614174000 --auth-token abc123.0123456789abcdef \
    --ca-cert-hash sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef

  # Keep the token out of shell history and process lists: read it from a file, or - for stdin
  kubectl offload peer out-of-band provider --auth-url https://203.0.113.7:31443 \
    --cluster-id 123e4567-e89b-12d3-a456-426614174000 --auth-token-file token.txt \
    --ca-cert-hash sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef

  # Return as soon as the ForeignCluster is created
  kubectl offload peer out-of-band provider --wait=false ...

  # Clusters that already share a flat network (Cilium ClusterMesh, one routed LAN): no tunnel
  kubectl offload peer out-of-band provider --networking=false ...`

func newCmdOutOfBand(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOutOfBandOptions(streams)
	cmd := &cobra.Command{
		Use:     "out-of-band NAME --auth-url URL --cluster-id ID --auth-token TOKEN --ca-cert-hash HASH",
		Short:   "Peer this cluster with a provider using the command peer generate printed there",
		Long:    outOfBandLong,
		Example: outOfBandExample,
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
	cmd.Flags().StringVar(&o.Args.AuthURL, AuthURLFlag, o.Args.AuthURL, "The https URL of the provider's auth service.")
	cmd.Flags().StringVar(&o.Args.ClusterID, ClusterIDFlag, o.Args.ClusterID, "The provider's cluster ID.")
	cmd.Flags().StringVar(&o.Args.AuthToken, AuthTokenFlag, o.Args.AuthToken, "The peering token, id.secret, from kubectl offload peer generate.")
	cmd.Flags().StringVar(&o.AuthTokenFile, AuthTokenFileFlag, o.AuthTokenFile, "A file that holds the peering token, or - for the standard input, to keep it out of shell history and process lists.")
	cmd.Flags().StringVar(&o.Args.CACertHash, CACertHashFlag, o.Args.CACertHash, "The pin of the provider's auth CA, sha256:HEX.")
	cmd.Flags().BoolVar(&o.Wait, "wait", o.Wait, "Wait until the peering steps succeed or one fails.")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "How long --wait waits.")
	cmd.Flags().BoolVar(&o.Networking, "networking", o.Networking, "Set up the network fabric toward the provider when the install has it on; false where the clusters already share a flat network.")
	return cmd
}

// NewCmdGenerateParent returns `kubectl offload generate`, whose peer-command
// subcommand is an alias of `kubectl offload peer generate`.
func NewCmdGenerateParent(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Generate commands to run on other clusters",
	}
	cmd.AddCommand(newCmdGenerate("peer-command", f, streams))
	return cmd
}

// newCmdGenerate returns the generate command under the name use.
func newCmdGenerate(use string, f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewGenerateOptions(streams)
	cmd := &cobra.Command{
		Use:     use,
		Short:   "Create a peering token and print the command that peers a consumer with this cluster",
		Long:    generateLong,
		Example: generateExample,
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
	cmd.Flags().DurationVar(&o.TTL, "ttl", o.TTL, "How long the token is valid, at most 24h.")
	cmd.Flags().BoolVar(&o.Reusable, "reusable", o.Reusable, "Let the token peer any number of consumers until it expires.")
	cmd.Flags().StringVar(&o.AuthURL, "auth-url", o.AuthURL, "The https URL consumers reach the auth service at, instead of the one derived from the install.")
	cmd.Flags().StringVar(&o.PodSecurity, "pod-security", o.PodSecurity, "The Pod Security level this cluster enforces on the consumer's pods: restricted, baseline or privileged.")
	cmd.Flags().BoolVar(&o.AllowNodePlacement, "allow-node-placement", o.AllowNodePlacement, "Let the consumer's pods choose this cluster's nodes: set a nodeName, select any node label, tolerate any taint.")
	cmd.Flags().StringSliceVar(&o.NodeSelector, "node-selector", o.NodeSelector, "A KEY=VALUE label the nodes that run the consumer's pods must have; repeat it or separate pairs with commas.")
	cmd.Flags().StringArrayVar(&o.Tolerations, "toleration", o.Tolerations, "A taint of this cluster's nodes the consumer's pods tolerate, as KEY[=VALUE][:EFFECT] (no VALUE: any value; no EFFECT: every effect); repeatable.")
	cmd.Flags().StringSliceVar(&o.ExtendedResources, "extended-resource", o.ExtendedResources, "An extended resource of this cluster's nodes, such as nvidia.com/gpu, that the consumer's pods may use: the offer lends the same share of it as of cpu. Repeat it or separate names with commas; resources not named are not lent.")
	cmd.Flags().StringVar(&o.Storage, "storage", o.Storage, "Lend this much persistent storage, such as 10Gi, to the consumer's PersistentVolumeClaims, in all its namespaces together; none is lent unless set.")
	cmd.Flags().StringVar(&o.StorageClass, "storage-class", o.StorageClass, "The StorageClass of this cluster the consumer's claims use (with --storage); default: this cluster's default class.")
	cmd.Flags().IntVar(&o.StorageClaims, "storage-claims", o.StorageClaims, fmt.Sprintf("The most PersistentVolumeClaims the consumer may hold (with --storage); 0 means %d.", offloadv1alpha1.DefaultStorageClaims))
	cmd.Flags().StringVar(&o.Consumer, "consumer", o.Consumer, "Bind the token to the consumer cluster of this name: no other consumer may peer with it, and that consumer may peer again while it is peered here (kubectl get tenants).")
	cmd.Flags().BoolVar(&o.AllowUnlimitedContainers, "allow-unlimited-containers", o.AllowUnlimitedContainers, "Let the consumer's containers run without limits on this cluster's idle capacity: one that sets no limit gets none, instead of what is lent.")
	cmd.Flags().BoolVar(&o.AllowSameNameNamespaces, "allow-same-name-namespaces", o.AllowSameNameNamespaces, "Let the consumer's twin namespaces have the names of its own namespaces, except the names this cluster reserves.")
	output.AddFlag(cmd.Flags(), &o.Output, o.Output)
	return cmd
}

func newCmdTokens(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "List and revoke peering tokens",
		Long:  tokensLong,
	}
	cmd.AddCommand(newCmdTokensList(f, streams), newCmdTokensRevoke(f, streams))
	return cmd
}

func newCmdTokensList(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewTokensListOptions(streams)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the peering tokens, without their secrets",
		Example: "  # The tokens of this cluster, with their status\n  kubectl offload peer tokens list",
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
	output.AddFlag(cmd.Flags(), &o.Output, o.Output)
	return cmd
}

func newCmdTokensRevoke(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewTokensRevokeOptions(streams)
	cmd := &cobra.Command{
		Use:     "revoke ID...",
		Short:   "Delete peering tokens so that they can no longer be used",
		Example: "  # Revoke the token with ID abc123\n  kubectl offload peer tokens revoke abc123",
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
	cmd.Flags().BoolVar(&o.IgnoreNotFound, "ignore-not-found", o.IgnoreNotFound, "Treat a token that does not exist as already revoked.")
	return cmd
}

const unpeerLong = `End one direction of the peering with NAME.

A peering has two directions, and unpeer ends exactly one of them:

- outgoing (the default): this cluster consumes NAME's resources through the
  virtual node offload-NAME. The agent asks NAME to remove this cluster's
  tenant, which revokes the credentials it holds at once, then deletes the
  virtual node, its Lease and the peer's Secrets, and the ForeignCluster goes.
  When NAME cannot be reached the command stops and says why; the agent keeps
  retrying. --force removes the peering on this side only and prints what it
  could not clean up on NAME.

- incoming (--incoming): NAME consumes this cluster's resources. Its Tenant is
  deleted; the agent revokes its credentials at once and removes its tenant
  namespace, with the twin namespaces and the pods NAME offloaded here.

When NAME is peered both ways, the other direction keeps working. Without
--incoming, a NAME that only consumes this cluster is refused with the
command that ends that peering.`

const unpeerExample = `  # On the consumer: stop consuming the provider named provider
  kubectl offload unpeer provider

  # The provider is gone for good: clean up this side only
  kubectl offload unpeer provider --force

  # On the provider: revoke the consumer named consumer and remove its workloads
  kubectl offload unpeer consumer --incoming`

// NewCmdUnpeer returns the unpeer command.
func NewCmdUnpeer(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	return newCmdUnpeer(f, NewUnpeerOptions(streams))
}

func newCmdUnpeer(f factory.Factory, o *UnpeerOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "unpeer NAME",
		Short:   "End one direction of a peering: stop consuming a provider, or with --incoming revoke a consumer",
		Long:    unpeerLong,
		Example: unpeerExample,
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
	cmd.Flags().BoolVar(&o.Incoming, "incoming", o.Incoming, "End the incoming peering: NAME stops consuming this cluster's resources, and its workloads here are removed.")
	cmd.Flags().BoolVar(&o.Force, "force", o.Force, "Remove the peering on this side even when the provider cannot be reached or the agent is not running.")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "How long to wait for each side's cleanup.")
	return cmd
}
