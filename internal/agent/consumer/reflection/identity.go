package reflection

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// IsReflection reports whether obj was reflected by the consumer clusterID.
func IsReflection(obj metav1.Object, clusterID string) bool {
	return clusterID != "" && obj.GetLabels()[offloadv1alpha1.LabelOriginClusterID] == clusterID
}

// IsRemoteOf returns the UID of the consumer pod that remote reflects, and
// whether remote is a reflection of a pod of consumer clusterID at all.
// A pod with the cluster label but no pod UID label is not claimed.
func IsRemoteOf(remote *corev1.Pod, clusterID string) (types.UID, bool) {
	if !IsReflection(remote, clusterID) {
		return "", false
	}
	uid := remote.Labels[offloadv1alpha1.LabelOriginPodUID]
	if uid == "" {
		return "", false
	}
	return types.UID(uid), true
}

// Orphans returns the remote pods of consumer clusterID whose consumer pod
// is not among localUIDs, sorted by namespace and name. Pods of other
// consumers, pods that cannot be attributed and pods already terminating are
// never returned. localUIDs must come from a full list of the consumer's pods
// taken after remotes was listed (docs/architecture.md, Failure policy), or a pod created
// in between would look orphaned. The pods returned are remotes' own, not
// copies: an informer's, read only.
func Orphans(remotes []*corev1.Pod, localUIDs sets.Set[types.UID], clusterID string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, r := range remotes {
		uid, ok := IsRemoteOf(r, clusterID)
		if !ok || r.DeletionTimestamp != nil || localUIDs.Has(uid) {
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// SlimMeta is what the agent's slim caches keep of an object's metadata:
// its identity, version, timestamps and labels. A cache transform adds
// what its readers need besides.
func SlimMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion, Generation: m.Generation,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
		DeletionGracePeriodSeconds: m.DeletionGracePeriodSeconds, Labels: m.Labels,
	}
}
