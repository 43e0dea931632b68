package peer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/authurl"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// Token lifetimes. A token is a bearer credential that travels out of band,
// so it lives an hour by default and a day at most: long enough to hand it
// over, short enough that a leaked one soon stops working. Peering itself
// outlives the token, whose only use is the first exchange.
const (
	DefaultTokenTTL = time.Hour
	MaxTokenTTL     = 24 * time.Hour
)

var peerCommandType = metav1.TypeMeta{APIVersion: "offload.io/v1alpha1", Kind: "PeerCommand"}

// PeerCommand is the result of peer generate: what a consumer needs to peer
// with this cluster, and the command that does it. It is the only output of
// kubectl offload that contains a token.
type PeerCommand struct {
	metav1.TypeMeta `json:",inline"`
	// Name is the provider's cluster name.
	Name string `json:"name"`
	// AuthURL is where the consumer's agent reaches the auth service.
	AuthURL string `json:"authURL"`
	// ClusterID is the provider's cluster ID.
	ClusterID string `json:"clusterID"`
	// AuthToken is the peering token, id.secret.
	AuthToken string `json:"authToken"`
	// CACertHash pins the auth service's CA.
	CACertHash string `json:"caCertHash"`
	// ExpiresAt is when the token expires.
	ExpiresAt time.Time `json:"expiresAt"`
	// Reusable tells whether the token can be used more than once.
	Reusable bool `json:"reusable"`
	// Policy is what the consumers that peer with the token, and their
	// pods, may do on this cluster.
	Policy offloadv1alpha1.ConsumerPolicy `json:"policy"`
	// Consumer is the one consumer name the token peers, when bound.
	Consumer string `json:"consumer,omitempty"`
	// Command is the command to run on the consumer.
	Command string `json:"command"`
}

// GenerateOptions are the options of `kubectl offload peer generate`.
type GenerateOptions struct {
	genericiooptions.IOStreams

	// TTL is how long the token is valid.
	TTL time.Duration
	// Reusable lets the token peer more than one consumer until it expires.
	Reusable bool
	// PodSecurity is the Pod Security level enforced on the pods of the
	// consumers that peer with the token: restricted, baseline or privileged.
	PodSecurity string
	// AllowNodePlacement lets those pods pick this cluster's nodes.
	AllowNodePlacement bool
	// AllowSameNameNamespaces lets those consumers have twin namespaces
	// named as their own namespaces, except the names this cluster reserves.
	AllowSameNameNamespaces bool
	// AllowUnlimitedContainers lets those consumers' containers run
	// without limits, on the provider's idle capacity.
	AllowUnlimitedContainers bool
	// NodeSelector are KEY=VALUE labels: the nodes of this cluster that run
	// the consumers' pods.
	NodeSelector []string
	// Tolerations are KEY[=VALUE][:EFFECT]: the taints of this cluster's
	// nodes the consumers' pods tolerate.
	Tolerations []string
	// ExtendedResources are the extended resources of this cluster's
	// nodes, such as nvidia.com/gpu, that the consumer's pods may use.
	ExtendedResources []string
	// Storage is the persistent storage lent to the consumer's claims, a
	// quantity such as 10Gi; empty lends none.
	Storage string
	// StorageClass is this cluster's StorageClass of the consumer's
	// claims; empty means the cluster's default class.
	StorageClass string
	// StorageClaims is the most claims the consumer may hold; 0 means
	// offloadv1alpha1.DefaultStorageClaims.
	StorageClaims int
	// Consumer, when set, binds the token to that consumer name.
	Consumer string
	// AuthURL overrides the auth URL derived from the install.
	AuthURL string
	Output  output.Format

	namespace string
	kube      kubernetes.Interface
	helm      helmclient.Client
	now       func() time.Time
}

// NewGenerateOptions returns GenerateOptions with defaults.
func NewGenerateOptions(streams genericiooptions.IOStreams) *GenerateOptions {
	return &GenerateOptions{
		IOStreams: streams, TTL: DefaultTokenTTL, PodSecurity: string(offloadv1alpha1.PodSecurityBaseline),
		Output: output.Table, now: time.Now,
	}
}

// Complete builds the clients from the factory.
func (o *GenerateOptions) Complete(f factory.Factory) error {
	o.namespace = f.Namespace()
	kube, err := f.KubeClient()
	if err != nil {
		return err
	}
	o.kube = kube
	if o.AuthURL == "" {
		cfg, err := f.HelmConfig(o.namespace)
		if err != nil {
			return err
		}
		o.helm = helmclient.New(cfg, o.namespace)
	}
	return nil
}

// Validate checks the options without contacting the cluster.
func (o *GenerateOptions) Validate() error {
	if o.TTL <= 0 || o.TTL > MaxTokenTTL {
		return fmt.Errorf("--ttl must be more than 0 and at most %s, got %s", MaxTokenTTL, o.TTL)
	}
	if _, ok := offloadv1alpha1.ParsePodSecurityLevel(o.PodSecurity); !ok {
		return fmt.Errorf("--pod-security %q is not a Pod Security level: use %s", o.PodSecurity, peering.PodSecurityLevelList())
	}
	if _, err := offloadv1alpha1.ParseNodeSelector(o.NodeSelector); err != nil {
		return fmt.Errorf("invalid --node-selector: %w", err)
	}
	if _, err := o.tolerations(); err != nil {
		return err
	}
	if _, err := peering.ParseExtendedResources(o.ExtendedResources); err != nil {
		return fmt.Errorf("invalid --extended-resource: %w", err)
	}
	if o.Storage == "" && (o.StorageClass != "" || o.StorageClaims != 0) {
		return errors.New("--storage-class and --storage-claims need --storage, the capacity to lend, such as --storage 10Gi")
	}
	if o.Storage != "" {
		// The class is checked against the cluster in Run; any valid name here.
		if _, err := peering.NewStoragePolicy(cmp.Or(o.StorageClass, "default"), o.Storage, o.StorageClaims); err != nil {
			return fmt.Errorf("invalid --storage, --storage-class or --storage-claims: %w", err)
		}
	}
	if o.Consumer != "" {
		if err := peering.ValidateConsumerName(o.Consumer); err != nil {
			return fmt.Errorf("invalid --consumer: the consumer's cluster name %w", err)
		}
	}
	if o.AuthURL != "" {
		if err := validateAuthURL(o.AuthURL); err != nil {
			return fmt.Errorf("invalid --auth-url: %w", err)
		}
	}
	return o.Output.Validate()
}

// Run reads everything the command needs before it stores the token,
// so that a cluster that is not ready gets no token, then prints the command.
func (o *GenerateOptions) Run(ctx context.Context) error {
	args, err := o.providerArgs(ctx)
	if err != nil {
		return err
	}
	tok, err := peering.GenerateToken()
	if err != nil {
		return fmt.Errorf("generating a peering token: %w", err)
	}
	args.AuthToken = tok.String()
	if err := ValidatePeerArgs(args); err != nil {
		return fmt.Errorf("the peer command would be invalid: %w", err)
	}
	expires := o.now().Add(o.TTL).UTC().Truncate(time.Second)
	policy := o.policy()
	if policy.Storage, err = o.storage(ctx); err != nil {
		return err
	}
	stored := peering.NewTokenConfigMap(o.namespace, tok, peering.TokenOptions{Expires: expires, Reusable: o.Reusable, Policy: policy, Consumer: o.Consumer})
	if _, err := o.kube.CoreV1().ConfigMaps(o.namespace).Create(ctx, stored, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("storing the peering token in ConfigMap %s: %w", stored.Name, err)
	}
	pc := PeerCommand{
		TypeMeta: peerCommandType, Name: args.Name, AuthURL: args.AuthURL, ClusterID: args.ClusterID,
		AuthToken: args.AuthToken, CACertHash: args.CACertHash, ExpiresAt: expires, Reusable: o.Reusable,
		Policy: policy, Consumer: o.Consumer, Command: args.Command(),
	}
	if policy.Level() == offloadv1alpha1.PodSecurityPrivileged {
		output.NewSteps(o.ErrOut).Warn("--pod-security privileged: the pods of the consumers that peer with token %s can become root on this cluster's nodes; "+
			"revoke it with kubectl offload peer tokens revoke %s unless you trust them like an administrator of this cluster", tok.ID, tok.ID)
	}
	return output.Write(o.Out, o.Output, pc, func(w io.Writer) error {
		usage := "It can be used once"
		if o.Reusable {
			usage = "It can be used by any number of consumers"
		}
		if o.Consumer != "" {
			usage += ", by consumer " + o.Consumer + " only, which may peer again with it"
		}
		fmt.Fprintf(o.ErrOut, "Run this command on the consumer cluster to peer it with %s. The token %s expires at %s (in %s). %s; revoke it with kubectl offload peer tokens revoke %s. %s\n",
			pc.Name, tok.ID, expires.Format(time.RFC3339), o.TTL, usage, tok.ID, policyNote(policy))
		_, err := fmt.Fprintln(w, pc.Command)
		return err
	})
}

// policy returns the consumer policy of the options, once validated.
func (o *GenerateOptions) policy() offloadv1alpha1.ConsumerPolicy {
	level, _ := offloadv1alpha1.ParsePodSecurityLevel(o.PodSecurity)
	selector, _ := offloadv1alpha1.ParseNodeSelector(o.NodeSelector)
	tolerations, _ := o.tolerations()
	extended, _ := peering.ParseExtendedResources(o.ExtendedResources)
	return offloadv1alpha1.ConsumerPolicy{PodSecurity: level, NodePlacement: o.AllowNodePlacement, SameNameNamespaces: o.AllowSameNameNamespaces,
		UnlimitedContainers: o.AllowUnlimitedContainers, NodeSelector: selector, Tolerations: tolerations, ExtendedResources: extended}
}

// storage returns the storage the options lend, nil for none, on the
// StorageClass they name or, when they name none, the cluster's default
// class; the class must exist.
func (o *GenerateOptions) storage(ctx context.Context) (*offloadv1alpha1.StoragePolicy, error) {
	if o.Storage == "" {
		return nil, nil
	}
	class := o.StorageClass
	if class == "" {
		list, err := o.kube.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing StorageClasses to find the default one for --storage: %w", err)
		}
		// As the API server's DefaultStorageClass admission does: the
		// newest of the classes marked default.
		var newest *storagev1.StorageClass
		for i, sc := range list.Items {
			if sc.Annotations[defaultStorageClassAnnotation] == "true" && (newest == nil || newest.CreationTimestamp.Before(&sc.CreationTimestamp)) {
				newest = &list.Items[i]
			}
		}
		if newest != nil {
			class = newest.Name
		}
		if class == "" {
			return nil, errors.New("--storage lends storage of this cluster's default StorageClass, and it has none: name the class to lend with --storage-class (kubectl get storageclasses lists them)")
		}
	} else if _, err := o.kube.StorageV1().StorageClasses().Get(ctx, class, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("--storage-class %s: this cluster has no such StorageClass (kubectl get storageclasses lists them)", class)
		}
		return nil, fmt.Errorf("reading StorageClass %s: %w", class, err)
	}
	return peering.NewStoragePolicy(class, o.Storage, o.StorageClaims)
}

// defaultStorageClassAnnotation marks a cluster's default StorageClass.
const defaultStorageClassAnnotation = "storageclass.kubernetes.io/is-default-class"

// tolerations parses --toleration.
func (o *GenerateOptions) tolerations() ([]corev1.Toleration, error) {
	if len(o.Tolerations) > maxTolerations {
		return nil, fmt.Errorf("--toleration is given %d times, at most %d are allowed", len(o.Tolerations), maxTolerations)
	}
	var out []corev1.Toleration
	for _, s := range o.Tolerations {
		t, err := offloadv1alpha1.ParseToleration(s)
		if err != nil {
			return nil, fmt.Errorf("invalid --toleration: %w", err)
		}
		out = append(out, t)
	}
	return out, nil
}

// maxTolerations is the Tenant CRD's limit on a policy's tolerations.
const maxTolerations = 16

// policyNote says in three sentences what a consumer and its pods may do
// under p.
func policyNote(p offloadv1alpha1.ConsumerPolicy) string {
	placement := "only by operating system and architecture (--allow-node-placement lifts that)"
	if p.NodePlacement {
		placement = "freely: by nodeName, any node label, any toleration (--allow-node-placement)"
	}
	naming := "are always named by this cluster (--allow-same-name-namespaces lets them keep the consumer's names)"
	if p.SameNameNamespaces {
		naming = "may have the names of the consumer's own namespaces, except the names this cluster reserves (--allow-same-name-namespaces)"
	}
	nodes := "any node of this cluster whose taints they tolerate"
	if len(p.NodeSelector) > 0 {
		nodes = "the nodes labelled " + offloadv1alpha1.NodeSelectorString(p.NodeSelector)
	}
	if len(p.Tolerations) > 0 {
		nodes += ", tolerating " + offloadv1alpha1.TolerationsString(p.Tolerations)
	}
	devices := "no extended resource of this cluster's nodes, such as GPUs (--extended-resource lends them)"
	if len(p.ExtendedResources) > 0 {
		devices = "a share of " + peering.ExtendedResourcesString(p.ExtendedResources) + " (--extended-resource), and of no other extended resource"
	}
	storage := "no persistent storage (--storage lends it)"
	if p.Storage != nil {
		storage = peering.StorageString(p.Storage) + " for their claims (--storage, --storage-class, --storage-claims)"
	}
	limits := "each container no more than is lent, which is its limit when it sets none (--allow-unlimited-containers lifts that)"
	if p.UnlimitedContainers {
		limits = "idle capacity beyond what is lent: a container that sets no limit gets none (--allow-unlimited-containers)"
	}
	return fmt.Sprintf("Consumer pods run here on %s (--node-selector, --toleration) under Pod Security %s (--pod-security) and pick nodes %s. They may use %s, %s, and %s. Consumer namespaces offloaded here %s.",
		nodes, p.Level(), placement, devices, storage, limits, naming)
}

// providerArgs reads this cluster's identity, auth CA and auth URL.
func (o *GenerateOptions) providerArgs(ctx context.Context) (PeerCommandArgs, error) {
	var a PeerCommandArgs
	cm, err := o.kube.CoreV1().ConfigMaps(o.namespace).Get(ctx, offloadv1alpha1.IdentityConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return a, fmt.Errorf("kubectl-offload is not installed in namespace %s (no ConfigMap %s): run kubectl offload install, or pass -n with its namespace", o.namespace, offloadv1alpha1.IdentityConfigMap)
	}
	if err != nil {
		return a, fmt.Errorf("reading the cluster identity: %w", err)
	}
	id, err := peering.ParseIdentity(cm)
	if err != nil {
		return a, err
	}
	a.ClusterID, a.Name = id.ID, id.Name
	if a.Name == "" {
		return a, fmt.Errorf("ConfigMap %s has no clusterID or clusterName: run kubectl offload upgrade --cluster-name NAME", offloadv1alpha1.IdentityConfigMap)
	}
	ca, err := o.kube.CoreV1().Secrets(o.namespace).Get(ctx, offloadv1alpha1.AuthCASecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return a, fmt.Errorf("the auth service has not created its CA yet (no Secret %s): wait until kubectl offload status --wait reports the auth service ready, then run this again", offloadv1alpha1.AuthCASecret)
	}
	if err != nil {
		return a, fmt.Errorf("reading the auth CA: %w", err)
	}
	if a.CACertHash, err = peering.CACertHash(ca.Data[offloadv1alpha1.AuthCACertKey]); err != nil {
		return a, fmt.Errorf("reading the auth CA in Secret %s: %w", offloadv1alpha1.AuthCASecret, err)
	}
	if a.AuthURL = o.AuthURL; a.AuthURL == "" {
		if a.AuthURL, err = o.releaseAuthURL(ctx); err != nil {
			return a, err
		}
	}
	return a, nil
}

// releaseAuthURL derives the auth URL from the installed release.
func (o *GenerateOptions) releaseAuthURL(ctx context.Context) (string, error) {
	rel, err := o.helm.Release(offloadv1alpha1.ReleaseName)
	if err != nil {
		return "", err
	}
	if rel == nil {
		return "", fmt.Errorf("no Helm release %s in namespace %s: run kubectl offload install", offloadv1alpha1.ReleaseName, o.namespace)
	}
	u, _, err := authurl.Resolve(ctx, o.kube, o.namespace, authurl.Configured(rel.Values))
	if err != nil {
		return "", fmt.Errorf("finding the auth URL (or pass --auth-url): %w", err)
	}
	if err := validateAuthURL(u); err != nil {
		return "", fmt.Errorf("the auth URL of the install is not usable (pass --auth-url): %w", err)
	}
	return u, nil
}
