// Package reflection translates consumer objects into the objects the
// consumer's agent writes into a provider's twin namespace, and translates the
// provider's pod status back. It is pure: no clients, no clocks, no globals
// that change. The virtual-kubelet provider and the object reflectors call it.
//
// Every reflected object carries the origin labels of api/v1alpha1
// (LabelOriginClusterID, and LabelOriginPodUID on pods), so reflection is
// rebuilt from the provider's objects after a restart and orphans are found by
// comparing full lists of both sides (see Orphans).
package reflection

import (
	"errors"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// Keys of the virtual-kubelet conventions that virtual nodes also follow.
const (
	// virtualKubeletTypeLabel is the virtual-kubelet convention label
	// "type=virtual-kubelet" that virtual nodes also carry.
	virtualKubeletTypeLabel = "type"
	// virtualKubeletTolerationKey is the virtual-kubelet convention taint key.
	virtualKubeletTolerationKey = "virtual-kubelet.io/provider"
	// offloadPrefix starts every key the offload project owns.
	offloadPrefix = "offload.io/"
)

// AnnotationOriginPod records "namespace/name" of the consumer pod on the
// remote pod, for people and tools reading the provider.
const AnnotationOriginPod = "offload.io/origin-pod"

// AnnotationReflectedAnnotations lists, comma-separated and sorted, the
// annotation keys reflection copied onto a remote pod. UpdateRemote removes
// only those keys when the consumer drops them, so annotations that provider
// components add (a CNI's IP annotations, for example) are left alone instead
// of being fought over on every update.
const AnnotationReflectedAnnotations = "offload.io/reflected-annotations"

// DefaultServiceAccount is the provider ServiceAccount remote pods run as.
// Every namespace has it, and the consumer's ServiceAccounts do not exist on
// the provider.
const DefaultServiceAccount = "default"

// Origin says where reflected objects come from and go to.
type Origin struct {
	// ClusterID is the consumer's cluster ID; it becomes the
	// LabelOriginClusterID label of every reflected object.
	ClusterID string
	// TwinNamespace is the provider namespace that mirrors the consumer
	// namespace of the reflected objects.
	TwinNamespace string
	// ServiceAccountTokenSecret names the Secret in TwinNamespace that holds
	// a consumer token for the pod (see RemoteTokenSecret and
	// TokenSecretName). Empty means the token is not reflected: the remote
	// pod gets no service-account token at all.
	ServiceAccountTokenSecret string
	// VirtualNodeLabels are the labels of the virtual node the pod is bound
	// to. Node affinity terms are judged against them to tell which terms
	// placed the pod on the virtual node. When nil, a virtual node's standard
	// labels are assumed (offload.io/type=virtual-node, type=virtual-kubelet,
	// kubernetes.io/hostname=spec.nodeName) and expressions on other
	// offload.io/ keys are taken as satisfied.
	VirtualNodeLabels map[string]string
	// NodePlacement says whether the provider lets the consumer pick its
	// nodes (ConsumerPolicy.NodePlacement): when false, tolerations and node
	// selectors and affinities on labels other than PlacementLabels are
	// left out of remote pods, and hard topology spread constraints and
	// required pod (anti-)affinity become preferences.
	NodePlacement bool
	// NodeSelector and Tolerations are the provider's choice of the nodes
	// that run the consumer's pods (ConsumerPolicy.NodeSelector and
	// Tolerations): every remote pod selects those labels and tolerates
	// those taints, node placement or not.
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// Addresses translates the addresses of reflected EndpointSlices into
	// ones the provider reaches; nil when the peering has no networking.
	Addresses *Addresses
	// Claims are the claims of the pod's namespace that have storage on
	// the provider, by name, with the name of their remote claim in
	// TwinNamespace (StorageClass offload). A pod that mounts another
	// claim cannot be offloaded; ClaimProblems says why, by claim.
	Claims        map[string]string
	ClaimProblems map[string]string
	// HostIP is the virtual node's address, which the downward API's
	// status.hostIP gives offloaded containers; empty leaves it the
	// provider node's.
	HostIP string
}

// originLabels are the labels that mark an object as reflected by o.
func (o Origin) originLabels() map[string]string {
	return map[string]string{offloadv1alpha1.LabelOriginClusterID: o.ClusterID}
}

// ErrNotOffloadable is wrapped by the errors of pods that cannot run on a
// provider; the virtual-kubelet provider answers them with InvalidInput.
var ErrNotOffloadable = errors.New("pod cannot be offloaded")

// NotOffloadableError lists every reason a pod cannot run on a provider, so a
// user fixes them all at once.
type NotOffloadableError struct {
	// Reasons are short lowercase phrases such as `it uses hostNetwork`.
	Reasons []string
}

// Error says what is wrong and what to do about it.
func (e *NotOffloadableError) Error() string {
	return "pod cannot run on a provider cluster: " + strings.Join(e.Reasons, "; ") +
		": keep it on local nodes (podOffloadingStrategy Local, or a node affinity on " +
		offloadv1alpha1.LabelType + " NotIn " + offloadv1alpha1.TypeVirtualNode + ")"
}

// Unwrap makes errors.Is(err, ErrNotOffloadable) true.
func (e *NotOffloadableError) Unwrap() error { return ErrNotOffloadable }

// isOffloadKey reports whether key belongs to the offload project.
func isOffloadKey(key string) bool { return strings.HasPrefix(key, offloadPrefix) }

// copyMap returns a copy of m, nil when m is empty.
func copyMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// mergeLabels returns base with extra laid over it.
func mergeLabels(base, extra map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(extra))
	maps.Copy(out, base)
	maps.Copy(out, extra)
	return out
}

// equalMaps compares maps, treating nil and empty as equal.
func equalMaps[V comparable](a, b map[string]V) bool { return maps.Equal(a, b) }
