package podcontroller

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// DefaultWholeBytes is the budget of a WholePods made with a zero budget:
// pods of about 1 KiB encoded (a Deployment's pod with one container) fit
// by the thousand, a few MiB of the agent's memory at most.
const DefaultWholeBytes = 2 << 20

// WholePods keeps, until its remote pod is created, the whole version of
// each new pod that the informer receives, so that the pod controller
// need not read it back from the API server (Config.Whole): the informer
// keeps slim pods. A new pod is one the Provider has not started: bound,
// not being deleted, with neither a host IP nor a container status.
//
// It is bounded by the pods' encoded size: a pod that does not fit is not
// kept, and the controller reads it from the API server. A pod leaves it
// when the controller syncs that version, when a later version of it is
// not new any more or differs only in its status (which no sync follows),
// and when it is gone; so it holds at most the pods waiting for their
// remote pods' creation.
type WholePods struct {
	mu     sync.Mutex
	budget int
	used   int
	pods   map[string]wholePod
}

// wholePod is a kept pod and its encoded size.
type wholePod struct {
	pod  *corev1.Pod
	size int
}

// NewWholePods returns an empty WholePods of budget bytes of encoded pods,
// DefaultWholeBytes if budget is zero.
func NewWholePods(budget int) *WholePods {
	if budget == 0 {
		budget = DefaultWholeBytes
	}
	return &WholePods{budget: budget, pods: map[string]wholePod{}}
}

// Keep is to be called by the informer's transform with each object it
// receives, before it slims it: it keeps a copy of a new pod, and forgets
// the pod's earlier version otherwise.
func (w *WholePods) Keep(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || w == nil {
		return
	}
	key := cache.MetaObjectToName(p).String()
	if !isNew(p) {
		w.forget(key, "")
		return
	}
	// Without managedFields, which the Provider does not read and which
	// are often a third of a pod: not copied only to be dropped.
	managed := p.ManagedFields
	p.ManagedFields = nil
	kept := p.DeepCopy()
	p.ManagedFields = managed
	size := kept.Size()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.forgetLocked(key, "")
	if w.used+size > w.budget {
		return
	}
	w.pods[key] = wholePod{pod: kept, size: size}
	w.used += size
}

// isNew reports whether p is bound and not started remotely: what the pod
// controller creates a remote pod for.
func isNew(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.DeletionTimestamp == nil && p.Status.HostIP == "" &&
		len(p.Status.ContainerStatuses) == 0 && len(p.Status.InitContainerStatuses) == 0 &&
		(p.Status.Phase == "" || p.Status.Phase == corev1.PodPending)
}

// take returns, and forgets, the kept pod of key if it is the version
// uid/resourceVersion: nil otherwise.
func (w *WholePods) take(key string, uid types.UID, resourceVersion string) *corev1.Pod {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	k, ok := w.pods[key]
	if !ok || k.pod.UID != uid || k.pod.ResourceVersion != resourceVersion {
		return nil
	}
	w.forgetLocked(key, "")
	return k.pod
}

// forget forgets the kept pod of key: any version if resourceVersion is
// empty, that version only otherwise.
func (w *WholePods) forget(key, resourceVersion string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.forgetLocked(key, resourceVersion)
}

func (w *WholePods) forgetLocked(key, resourceVersion string) {
	k, ok := w.pods[key]
	if !ok || (resourceVersion != "" && k.pod.ResourceVersion != resourceVersion) {
		return
	}
	delete(w.pods, key)
	w.used -= k.size
}

// Len returns how many pods are kept, and their encoded size in bytes.
func (w *WholePods) Len() (pods, bytes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pods), w.used
}
