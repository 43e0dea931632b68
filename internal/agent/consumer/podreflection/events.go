package podreflection

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// Events of remote pods come back to their consumer pods, so that kubectl
// describe pod and kubectl get events on the consumer tell why an
// offloaded pod does not run: an image the provider cannot pull, a failed
// probe, an OOM kill, a pod its scheduler cannot place. The recorder they
// go through (Options.Events) correlates and rate-limits them per pod, as
// client-go's recorders do for every kubelet: a crash-looping pod cannot
// flood the consumer's API server.

// watchEvents starts an informer of the pod events of twin namespace ti,
// unless the handler has no recorder.
func (h *Handler) watchEvents(ti *twinInformer) error {
	if h.opts.Events == nil {
		return nil
	}
	factory := informers.NewSharedInformerFactoryWithOptions(h.opts.Provider, 0,
		informers.WithNamespace(ti.twin),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("involvedObject.kind", "Pod").String()
		}),
		informers.WithTransform(crcache.TransformStripManagedFields()))
	events := factory.Core().V1().Events().Informer()
	handle := func(obj any) {
		if ev, ok := obj.(*corev1.Event); ok {
			h.remoteEvent(ti, ev)
		}
	}
	if _, err := events.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	}); err != nil {
		return fmt.Errorf("watching the pod events of twin namespace %q: %w", ti.twin, err)
	}
	factory.Start(h.ctx.Done())
	return nil
}

// reasonScheduled is the reason of the scheduler's event for a binding.
const reasonScheduled = "Scheduled"

// lastSeen is when ev last happened, whichever API wrote it.
func lastSeen(ev *corev1.Event) time.Time {
	t := ev.LastTimestamp.Time
	if ev.Series != nil && ev.Series.LastObservedTime.After(t) {
		t = ev.Series.LastObservedTime.Time
	}
	if ev.EventTime.After(t) {
		t = ev.EventTime.Time
	}
	return t
}

// remoteEvent records ev, an event of a remote pod in twin namespace ti,
// on the consumer pod that remote pod reflects. Events from before the
// handler started are not recorded again: a restarted agent does not
// replay a pod's history.
//
// The provider scheduler's Normal Scheduled event is not recorded: the
// consumer's scheduler already recorded the pod's binding to the virtual
// node, and which provider node runs it is the provider's business. It
// would cost the consumer's API server one write per pod.
func (h *Handler) remoteEvent(ti *twinInformer, ev *corev1.Event) {
	if !lastSeen(ev).After(h.eventsSince) || (ev.Type == corev1.EventTypeNormal && ev.Reason == reasonScheduled) {
		return
	}
	remote, err := ti.lister.Pods(ti.twin).Get(ev.InvolvedObject.Name)
	if err != nil || remote.UID != ev.InvolvedObject.UID {
		return // an event of a pod that is not ours, or of a pod gone
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	local := h.localPod(ctx, ti, remote)
	if local == nil {
		return
	}
	eventType := ev.Type
	if eventType != corev1.EventTypeWarning {
		eventType = corev1.EventTypeNormal
	}
	// The provider wrote the event: its text is cleaned before it is
	// recorded here, where kubectl describe prints it.
	h.opts.Events.Event(local, eventType, peering.CleanReason(ev.Reason, "Remote"), peering.CleanText(ev.Message))
}
