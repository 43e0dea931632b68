package virtualnode

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/podreflection"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/metrics"
)

// PeerStats implements metrics.Collector.Peers: for every peer with a
// runtime, the offer its virtual node holds and, while its pod reflection
// runs, what the virtual node's pods request and how many remote pods it
// reflects.
func (r *Reconciler) PeerStats() []metrics.PeerStats {
	r.mu.Lock()
	runtimes := make([]*peerRuntime, 0, len(r.peers))
	for _, rt := range r.peers {
		runtimes = append(runtimes, rt)
	}
	r.mu.Unlock()
	out := make([]metrics.PeerStats, 0, len(runtimes))
	for _, rt := range runtimes {
		st := metrics.PeerStats{Peer: rt.peer.fc.Name}
		if offered := rt.peer.offered.Load(); offered != nil {
			st.Offered = *offered
		}
		if run := rt.running(); run != nil {
			st.Reflecting, st.Requested, st.Reflected = true, requested(run.pods), run.handler.ReflectedPods()
		}
		out = append(out, st)
	}
	return out
}

// requested sums the requests of the pods of lister that have not ended,
// as the scheduler counts them, and counts them.
func requested(lister corelisters.PodLister) corev1.ResourceList {
	pods, err := lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	out := corev1.ResourceList{}
	n := int64(0)
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		n++
		for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
			if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
				continue
			}
			sum := out[name]
			sum.Add(q)
			out[name] = sum
		}
	}
	out[corev1.ResourcePods] = *resource.NewQuantity(n, resource.DecimalSI)
	return out
}

// instrumented is the peer's pod reflection as the PodController sees it:
// the handler, with every step it takes recorded (observer): the remote
// pods created, updated and deleted (to_provider), and the propagation
// times. The consumer pods' statuses and deletions, which the
// PodController writes itself, are recorded by its pod client
// (podsClient).
type instrumented struct {
	*podreflection.Handler
	o *observer
}

func (i instrumented) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	err := i.Handler.CreatePod(ctx, pod)
	i.o.Done(metrics.ToProvider, metrics.OperationCreate, err)
	if err == nil {
		if d, ok := i.o.since(i.o.bound, pod.UID); ok {
			i.o.Created(d)
		}
	}
	return err
}

func (i instrumented) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	err := i.Handler.UpdatePod(ctx, pod)
	i.o.Done(metrics.ToProvider, metrics.OperationUpdate, err)
	return err
}

func (i instrumented) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	err := i.Handler.DeletePod(ctx, pod)
	i.o.Done(metrics.ToProvider, metrics.OperationDelete, err)
	return err
}

// NotifyPods records when each status change arrived, then passes it on.
func (i instrumented) NotifyPods(ctx context.Context, cb func(*corev1.Pod)) {
	i.Handler.NotifyPods(ctx, i.o.notifying(cb))
}

// observer records one peer's pod reflection (metrics.Reflection) and
// holds the start of each pod's propagations under way: when the agent saw
// the consumer pod bound to the virtual node, until its remote pod is
// created (bound), and when the newest status change of its remote pod
// arrived, until the consumer pod's status is written (notified). Entries
// go with the step that ends them or with the pod; there are never more
// than the virtual node's pods.
type observer struct {
	metrics.Reflection

	mu       sync.Mutex
	bound    map[types.UID]time.Time
	notified map[types.UID]time.Time
}

func newObserver(peer string) *observer {
	return &observer{Reflection: metrics.ForPeer(peer), bound: map[types.UID]time.Time{}, notified: map[types.UID]time.Time{}}
}

// notifying is cb, recording when each pod's status change arrived.
func (o *observer) notifying(cb func(*corev1.Pod)) func(*corev1.Pod) {
	return func(pod *corev1.Pod) {
		o.mu.Lock()
		o.notified[pod.UID] = time.Now()
		o.mu.Unlock()
		cb(pod)
	}
}

// since ends the propagation of uid that m holds and says how long it
// took; false when none was under way.
func (o *observer) since(m map[types.UID]time.Time, uid types.UID) (time.Duration, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, ok := m[uid]
	if !ok {
		return 0, false
	}
	delete(m, uid)
	return time.Since(t), true
}

// handler is the event handler of the virtual node's pod informer that
// starts and forgets the pods' propagations: a pod that arrives after the
// informer's first list was bound just now; the pods of the first list
// were bound before the agent started, and most were reflected then.
func (o *observer) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if pod, ok := obj.(*corev1.Pod); ok && !initial {
				o.mu.Lock()
				o.bound[pod.UID] = time.Now()
				o.mu.Unlock()
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				o.mu.Lock()
				delete(o.bound, pod.UID)
				delete(o.notified, pod.UID)
				o.mu.Unlock()
			}
		},
	}
}

// podsClient is the PodController's client of the consumer's pods, which
// records the consumer pods' statuses it writes and the pods it deletes
// (to_consumer), with each status's propagation time.
type podsClient struct {
	typedcorev1.PodsGetter
	o *observer
}

func (c podsClient) Pods(namespace string) typedcorev1.PodInterface {
	return podsOf{PodInterface: c.PodsGetter.Pods(namespace), o: c.o}
}

type podsOf struct {
	typedcorev1.PodInterface
	o *observer
}

func (p podsOf) UpdateStatus(ctx context.Context, pod *corev1.Pod, opts metav1.UpdateOptions) (*corev1.Pod, error) {
	out, err := p.PodInterface.UpdateStatus(ctx, pod, opts)
	if apierrors.IsNotFound(err) {
		// The pod is gone: nothing to write, nothing failed.
		return out, err
	}
	p.o.Done(metrics.ToConsumer, metrics.OperationStatus, err)
	if err == nil {
		if d, ok := p.o.since(p.o.notified, pod.UID); ok {
			p.o.StatusWritten(d)
		}
	}
	return out, err
}

func (p podsOf) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	err := p.PodInterface.Delete(ctx, name, opts)
	if !apierrors.IsNotFound(err) {
		p.o.Done(metrics.ToConsumer, metrics.OperationDelete, err)
	}
	return err
}
