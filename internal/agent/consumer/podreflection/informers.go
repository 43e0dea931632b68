package podreflection

import (
	"context"
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// twinInformer watches the consumer's pods in one twin namespace.
type twinInformer struct {
	twin     string // the provider namespace
	consumer string // the consumer namespace it mirrors
	informer cache.SharedIndexInformer
	lister   corev1listers.PodLister
}

// informer returns the running informer of twin namespace twin, which
// mirrors consumer namespace ns, starting it when needed. It does not wait
// for the informer to sync.
func (h *Handler) informer(twin, ns string) (*twinInformer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.started {
		return nil, errors.New("podreflection: the handler is not started; call Start first")
	}
	if ti, ok := h.twins[twin]; ok {
		return ti, nil
	}
	selector := labels.SelectorFromSet(labels.Set{offloadv1alpha1.LabelOriginClusterID: h.opts.ConsumerClusterID}).String()
	factory := informers.NewSharedInformerFactoryWithOptions(h.opts.Provider, 0,
		informers.WithNamespace(twin),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }),
		informers.WithTransform(slimRemotePod))
	pods := factory.Core().V1().Pods()
	ti := &twinInformer{twin: twin, consumer: ns, informer: pods.Informer(), lister: pods.Lister()}
	if _, err := ti.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { h.remoteChanged(ti, obj) },
		UpdateFunc: func(_, obj any) { h.remoteChanged(ti, obj) },
		DeleteFunc: func(obj any) { h.remoteDeleted(ti, obj) },
	}); err != nil {
		return nil, fmt.Errorf("watching the pods of twin namespace %q: %w", twin, err)
	}
	factory.Start(h.ctx.Done())
	if err := h.watchEvents(ti); err != nil {
		return nil, err
	}
	h.twins[twin] = ti
	h.opts.Logger.V(1).Info("Watching the pods of a twin namespace", "twinNamespace", twin, "namespace", ns)
	return ti, nil
}

// syncAll starts the informers of every twin namespace of the provider and
// waits until all have synced. It returns them sorted by twin namespace.
func (h *Handler) syncAll(ctx context.Context) ([]*twinInformer, error) {
	twins, err := h.opts.TwinNamespaces(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the twin namespaces on provider %s: %w", h.opts.ProviderClusterID, err)
	}
	for twin, ns := range twins {
		if _, err := h.informer(twin, ns); err != nil {
			return nil, err
		}
	}
	all := h.twinInformers()
	sort.Slice(all, func(i, j int) bool { return all[i].twin < all[j].twin })
	for _, ti := range all {
		if err := waitSynced(ctx, ti); err != nil {
			return nil, err
		}
	}
	return all, nil
}

// waitSynced waits until ti has listed its twin namespace once.
func waitSynced(ctx context.Context, ti *twinInformer) error {
	if ti.informer.HasSynced() {
		return nil
	}
	if !cache.WaitForCacheSync(ctx.Done(), ti.informer.HasSynced) {
		return fmt.Errorf("listing the pods of twin namespace %q: %w", ti.twin, errors.Join(ctx.Err(), errors.New("the informer did not sync")))
	}
	return nil
}

// remoteChanged tells the PodController about the new status of a remote pod.
func (h *Handler) remoteChanged(ti *twinInformer, obj any) {
	remote, ok := obj.(*corev1.Pod)
	if !ok || !h.localPodsSynced() {
		// The replay that follows the sync sends it (NotifyPods): the
		// informer's store has it.
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	p := h.statusPod(ctx, ti, remote)
	if p == nil {
		return
	}
	if h.opts.LocalPods != nil {
		// Remote events that change nothing the consumer sees (a binding, a
		// provider annotation) would each cost a status write; so would a
		// remote pod that no kubelet reported on yet, for a consumer pod
		// that shows no kubelet's report either: a kubelet writes a pod's
		// status once it runs it, not when it is bound.
		if cur, err := h.opts.LocalPods.Pods(p.Namespace).Get(p.Name); err == nil && cur.UID == p.UID &&
			(apiequality.Semantic.DeepEqual(cur.Status, p.Status) || (unreported(remote.Status) && unreported(cur.Status))) {
			return
		}
	}
	h.send(p)
}

// unreported reports whether st is the status of a pod that no kubelet has
// reported on: Pending, without container statuses, a reason or a host IP,
// and with no condition but a successful PodScheduled. A pod the provider
// cannot schedule has PodScheduled False, so its reason reaches the
// consumer.
func unreported(st corev1.PodStatus) bool {
	if (st.Phase != corev1.PodPending && st.Phase != "") || st.Reason != "" || st.Message != "" || st.HostIP != "" ||
		len(st.ContainerStatuses)+len(st.InitContainerStatuses)+len(st.EphemeralContainerStatuses) > 0 {
		return false
	}
	for _, c := range st.Conditions {
		if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionTrue {
			return false
		}
	}
	return true
}

// remoteDeleted tells the PodController that a remote pod is gone, with a
// terminal status: its consumer pod will never run again.
func (h *Handler) remoteDeleted(ti *twinInformer, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	remote, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	p := h.statusPod(ctx, ti, remote)
	if p == nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return
	}
	reflection.Terminate(&p.Status, p.DeletionTimestamp != nil, metav1.Now())
	h.send(p)
}

// localPodsSynced reports whether LocalPods has synced, or true when the
// handler cannot know (no LocalPodsSynced).
func (h *Handler) localPodsSynced() bool {
	return h.opts.LocalPodsSynced == nil || h.opts.LocalPodsSynced()
}

// send calls the PodController's callback, if it registered one.
func (h *Handler) send(p *corev1.Pod) {
	h.mu.Lock()
	cb := h.notify
	h.mu.Unlock()
	if cb != nil {
		cb(p)
	}
}

// NotifyPods registers cb, which the handler calls with the consumer pod
// and its new status whenever a remote pod changes. The pods the informers
// already know are replayed as soon as LocalPods has synced (at once
// without LocalPodsSynced), so statuses observed before the PodController
// started are not lost.
func (h *Handler) NotifyPods(_ context.Context, cb func(*corev1.Pod)) {
	h.mu.Lock()
	h.notify = cb
	h.mu.Unlock()
	go h.replay()
}

// localPod returns the consumer pod that remote reflects, or nil when there
// is none (any more).
func (h *Handler) localPod(ctx context.Context, ti *twinInformer, remote *corev1.Pod) *corev1.Pod {
	uid, ok := reflection.IsRemoteOf(remote, h.opts.ConsumerClusterID)
	if !ok {
		return nil
	}
	var local *corev1.Pod
	if h.opts.LocalPods != nil {
		local, _ = h.opts.LocalPods.Pods(ti.consumer).Get(remote.Name)
		if local == nil && h.opts.LocalPodsSynced != nil && h.opts.LocalPodsSynced() {
			return nil // listed, and gone since
		}
	}
	if local == nil {
		var err error
		if local, err = h.opts.Consumer.CoreV1().Pods(ti.consumer).Get(ctx, remote.Name, metav1.GetOptions{}); err != nil {
			return nil
		}
	}
	if local.UID != uid {
		return nil
	}
	return local
}

// statusPod is the consumer pod remote reflects with the status remote
// implies, or nil when there is no such consumer pod. Its metadata is the
// consumer pod's: the PodController writes it with UpdateStatus, which
// also writes labels and annotations. It has no spec.
func (h *Handler) statusPod(ctx context.Context, ti *twinInformer, remote *corev1.Pod) *corev1.Pod {
	local := h.localPod(ctx, ti, remote)
	if local == nil {
		return nil
	}
	// No spec: the PodController keeps a copy of the last pod notified for
	// each pod, and writes it with UpdateStatus, for which the API server
	// keeps the stored spec whatever the request says. The metadata is
	// shared with the informer's copy, which nobody writes to: the
	// PodController copies what it is notified.
	p := &corev1.Pod{TypeMeta: local.TypeMeta, ObjectMeta: local.ObjectMeta,
		Status: reflection.ConsumerStatus(remote, local, h.opts.NodeIP, h.addresses())}
	h.withRefusals(p, local, false)
	return p
}

// consumerView is remote as the consumer sees it, for GetPod
// (reflection.ConsumerView), or nil when remote is not the consumer's.
func (h *Handler) consumerView(ctx context.Context, ti *twinInformer, remote *corev1.Pod) *corev1.Pod {
	if _, ok := reflection.IsRemoteOf(remote, h.opts.ConsumerClusterID); !ok {
		return nil
	}
	local := h.localPod(ctx, ti, remote)
	// ConsumerView reads the origin's tolerations only: not the pod's
	// token Secret or claims (podOrigin), whose lookups would cost every
	// view of every pod.
	view := reflection.ConsumerView(remote, local, h.origin(ti.twin), ti.consumer, h.opts.VirtualNodeName, h.opts.NodeIP, h.addresses())
	h.withRefusals(view, local, true)
	return view
}
