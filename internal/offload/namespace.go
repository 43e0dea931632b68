package offload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
)

// DefaultTimeout is how long --wait waits by default.
const DefaultTimeout = 2 * time.Minute

// The accepted values of the strategy flags, in the order help shows them.
var (
	mappingStrategies = []offloadv1alpha1.NamespaceMappingStrategy{offloadv1alpha1.DefaultName, offloadv1alpha1.EnforceSameName}
	podStrategies     = []offloadv1alpha1.PodOffloadingStrategy{offloadv1alpha1.LocalAndRemote, offloadv1alpha1.Remote, offloadv1alpha1.Local}
)

// NamespaceOptions are the options of `kubectl offload namespace NS`.
type NamespaceOptions struct {
	genericiooptions.IOStreams

	// Namespace is NS, the namespace to offload.
	Namespace string
	// NamespaceMappingStrategy is DefaultName or EnforceSameName, in any case.
	NamespaceMappingStrategy string
	// PodOffloadingStrategy is LocalAndRemote, Remote or Local, in any case.
	PodOffloadingStrategy string
	// Selector is a label selector on the labels of virtual nodes.
	Selector string
	// Wait waits until the NamespaceOffloading is Ready.
	Wait bool
	// Timeout bounds the wait.
	Timeout time.Duration
	// DryRun prints the NamespaceOffloading instead of applying it.
	DryRun bool
	// Output is the format of the --dry-run object: yaml (the default) or json.
	Output output.Format

	args             []string
	installNamespace string
	client           client.Client
	pollInterval     time.Duration

	// Set by Validate.
	mapping      offloadv1alpha1.NamespaceMappingStrategy
	pods         offloadv1alpha1.PodOffloadingStrategy
	selector     labels.Selector
	nodeSelector *corev1.NodeSelector
}

// NewNamespaceOptions returns NamespaceOptions with defaults.
func NewNamespaceOptions(streams genericiooptions.IOStreams) *NamespaceOptions {
	return &NamespaceOptions{
		IOStreams:                streams,
		NamespaceMappingStrategy: string(offloadv1alpha1.DefaultName),
		PodOffloadingStrategy:    string(offloadv1alpha1.LocalAndRemote),
		Wait:                     true,
		Timeout:                  DefaultTimeout,
		Output:                   output.Table,
		pollInterval:             pollInterval,
	}
}

// Complete takes NS from args and builds the client.
func (o *NamespaceOptions) Complete(f factory.Factory, args []string) error {
	o.args = args
	if len(args) > 0 {
		o.Namespace = args[0]
	}
	o.installNamespace = f.Namespace()
	c, err := f.Client()
	if err != nil {
		return err
	}
	o.client = c
	return nil
}

// Validate checks the arguments and flags offline, and parses the strategies
// and the selector.
func (o *NamespaceOptions) Validate() error {
	if len(o.args) != 1 {
		return errors.New("exactly one namespace is expected: kubectl offload namespace NS")
	}
	if err := validateNamespaceName(o.Namespace); err != nil {
		return err
	}
	if err := refuseNamespace(o.Namespace, o.installNamespace); err != nil {
		return err
	}
	var err error
	if o.mapping, err = parseStrategy("--namespace-mapping-strategy", o.NamespaceMappingStrategy, mappingStrategies); err != nil {
		return err
	}
	if o.pods, err = parseStrategy("--pod-offloading-strategy", o.PodOffloadingStrategy, podStrategies); err != nil {
		return err
	}
	if o.selector, o.nodeSelector, err = ParseClusterSelector(o.Selector); err != nil {
		return err
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be more than 0, got %s", o.Timeout)
	}
	switch {
	case o.DryRun && o.Output != output.YAML && o.Output != output.JSON && o.Output != output.Table:
		return fmt.Errorf("--dry-run prints the NamespaceOffloading: use -o yaml or -o json")
	case !o.DryRun && o.Output != output.Table:
		return fmt.Errorf("-o %s is only valid with --dry-run", o.Output)
	}
	return nil
}

// Run checks the namespace, the install and the peers, then creates or
// updates the NamespaceOffloading and, with Wait, waits until it is Ready.
// Nothing is written unless every check passed.
func (o *NamespaceOptions) Run(ctx context.Context) error {
	steps := output.NewSteps(o.ErrOut)
	ns, err := getNamespace(ctx, o.client, o.Namespace)
	if err != nil {
		return err
	}
	if err := refuseLiveNamespace(ns); err != nil {
		return err
	}
	existing, err := getNamespaceOffloading(ctx, o.client, o.Namespace)
	if err != nil {
		return err
	}
	if existing != nil && existing.DeletionTimestamp != nil {
		return newError(ErrBeingUnoffloaded, "namespace %s is being unoffloaded: wait until kubectl offload unoffload namespace %s finishes, then run this again", o.Namespace, o.Namespace)
	}
	if err := o.checkPeers(ctx, steps); err != nil {
		return err
	}
	no, result, err := o.apply(ctx, existing)
	if err != nil {
		return err
	}
	if o.DryRun {
		return o.printManifest()
	}
	fmt.Fprintf(o.Out, "namespaceoffloading.offload.io/%s %s\n", no.Name, result)
	if !o.Wait {
		return nil
	}
	return o.wait(ctx, steps, no.Generation)
}

// desired returns the NamespaceOffloading the flags ask for.
func (o *NamespaceOptions) desired() *offloadv1alpha1.NamespaceOffloading {
	return &offloadv1alpha1.NamespaceOffloading{
		TypeMeta:   metav1.TypeMeta{APIVersion: offloadv1alpha1.GroupVersion.String(), Kind: "NamespaceOffloading"},
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.NamespaceOffloadingName, Namespace: o.Namespace},
		Spec: offloadv1alpha1.NamespaceOffloadingSpec{
			NamespaceMappingStrategy: o.mapping,
			PodOffloadingStrategy:    o.pods,
			ClusterSelector:          o.nodeSelector,
		},
	}
}

// apply creates the NamespaceOffloading, or updates the spec of existing,
// and says which it did. With DryRun the write is a server-side dry run,
// so the API server still validates the object but stores nothing.
func (o *NamespaceOptions) apply(ctx context.Context, existing *offloadv1alpha1.NamespaceOffloading) (*offloadv1alpha1.NamespaceOffloading, string, error) {
	want := o.desired()
	if existing == nil {
		var opts []client.CreateOption
		if o.DryRun {
			opts = append(opts, client.DryRunAll)
		}
		err := o.client.Create(ctx, want, opts...)
		switch {
		case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
			// A client without discovery sees a missing CRD here.
			return nil, "", newError(ErrNotInstalled, "kubectl-offload is not installed on this cluster (no NamespaceOffloading CRD): run kubectl offload install first")
		case err != nil:
			return nil, "", fmt.Errorf("creating NamespaceOffloading %s/%s: %w", want.Namespace, want.Name, err)
		}
		return want, "created", nil
	}
	if equality.Semantic.DeepEqual(existing.Spec, want.Spec) {
		return existing, "unchanged", nil
	}
	updated := existing.DeepCopy()
	updated.Spec = want.Spec
	var opts []client.UpdateOption
	if o.DryRun {
		opts = append(opts, client.DryRunAll)
	}
	if err := o.client.Update(ctx, updated, opts...); err != nil {
		if apierrors.IsConflict(err) {
			return nil, "", fmt.Errorf("NamespaceOffloading %s/%s changed while it was being updated: run the command again", want.Namespace, want.Name)
		}
		return nil, "", fmt.Errorf("updating NamespaceOffloading %s/%s: %w", want.Namespace, want.Name, err)
	}
	return updated, "configured", nil
}

// manifest is the NamespaceOffloading that --dry-run prints: only what the
// command sets, so that it can be applied with kubectl apply -f.
type manifest struct {
	APIVersion string                                  `json:"apiVersion"`
	Kind       string                                  `json:"kind"`
	Metadata   manifestMeta                            `json:"metadata"`
	Spec       offloadv1alpha1.NamespaceOffloadingSpec `json:"spec"`
}

type manifestMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// printManifest prints the NamespaceOffloading the flags ask for, as YAML
// unless -o json.
func (o *NamespaceOptions) printManifest() error {
	no := o.desired()
	m := manifest{
		APIVersion: no.APIVersion, Kind: no.Kind,
		Metadata: manifestMeta{Name: no.Name, Namespace: no.Namespace},
		Spec:     no.Spec,
	}
	format := o.Output
	if format == output.Table {
		format = output.YAML
	}
	return output.Write(o.Out, format, m, func(io.Writer) error { return nil })
}

// checkPeers makes sure at least one virtual node matches the selector,
// except for the Local strategy, whose pods never leave this cluster.
func (o *NamespaceOptions) checkPeers(ctx context.Context, steps *output.Steps) error {
	var nodes corev1.NodeList
	if err := o.client.List(ctx, &nodes, client.MatchingLabels{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode}); err != nil {
		return fmt.Errorf("listing the virtual nodes: %w", err)
	}
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	var matched []string
	for _, n := range nodes.Items {
		if o.selector.Matches(labels.Set(n.Labels)) {
			matched = append(matched, n.Name)
		}
	}
	switch {
	case len(matched) > 0:
		steps.Done("Selected the virtual nodes " + strings.Join(matched, ", "))
		return nil
	case o.pods == offloadv1alpha1.Local && len(nodes.Items) == 0:
		steps.Warn("this cluster has no peer yet: with --pod-offloading-strategy Local the pods of %s stay here", o.Namespace)
		return nil
	case o.pods == offloadv1alpha1.Local:
		steps.Warn("no virtual node matches --selector %q: with --pod-offloading-strategy Local the pods of %s stay here", o.Selector, o.Namespace)
		return nil
	case len(nodes.Items) == 0:
		return newError(ErrNoPeer, "no peers: this cluster has no virtual node; peer it with a provider first (kubectl offload peer out-of-band), or keep the pods here with --pod-offloading-strategy Local")
	}
	described := make([]string, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		described = append(described, describeNode(&n))
	}
	return newError(ErrNoPeer, "no peer matches --selector %q; the virtual nodes are: %s", o.Selector, strings.Join(described, "; "))
}

// describeNode returns a virtual node's name and the labels a selector
// would use: its own, not the Kubernetes ones nor the virtual-node type.
func describeNode(n *corev1.Node) string {
	var ls []string
	for k, v := range n.Labels {
		if k == offloadv1alpha1.LabelType || strings.Contains(k, "kubernetes.io/") {
			continue
		}
		ls = append(ls, k+"="+v)
	}
	if len(ls) == 0 {
		return n.Name
	}
	sort.Strings(ls)
	return fmt.Sprintf("%s (%s)", n.Name, strings.Join(ls, ", "))
}

// parseStrategy returns the value of values that s names, in any case.
func parseStrategy[T ~string](flag, s string, values []T) (T, error) {
	names := make([]string, len(values))
	for i, v := range values {
		if strings.EqualFold(s, string(v)) {
			return v, nil
		}
		names[i] = string(v)
	}
	return "", fmt.Errorf("invalid %s %q: use one of %s", flag, s, strings.Join(names, "|"))
}

// validateNamespaceName checks that ns can name a namespace.
func validateNamespaceName(ns string) error {
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Errorf("invalid namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	return nil
}
