package podreflection

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// What a kubelet does to a running pod besides updates, carried to the
// remote pod through the provider's subresources: ephemeral containers
// (kubectl debug) and in-place resizes. The provider's API server may
// refuse either (its Pod Security level, its quota, its validation); a
// kubelet reports such a refusal on the pod and keeps the pod running, and
// so does the handler: a waiting ephemeral container status with reason
// ReasonProviderRefused, or condition PodResizePending with reason
// Infeasible, each with the provider's message, and a Warning event.
// Returning the error would make the PodController mark the running pod
// Pending, or Failed for good when it never restarts.

// ReasonProviderRefused is the waiting reason of an ephemeral container
// the provider refused, and of the events that report a refusal.
const ReasonProviderRefused = "ProviderRefused"

// refusals are what the provider refused of one consumer pod.
type refusals struct {
	// ephemeral holds why, by ephemeral container name.
	ephemeral map[string]string
	// resize is why the resize to the resources of the consumer pod's
	// generation resizeGeneration was refused; empty when none was.
	resize           string
	resizeGeneration int64
}

// addEphemeralContainers adds to remote, through the provider's
// pods/ephemeralcontainers subresource, the ephemeral containers of local
// it lacks. It returns the remote pod as it now is, and whether it added
// any.
func (h *Handler) addEphemeralContainers(ctx context.Context, remote, local *corev1.Pod, o reflection.Origin) (*corev1.Pod, bool, error) {
	want, added, err := reflection.AddEphemeralContainers(remote, local, o)
	if err != nil {
		return remote, false, asInvalidInput(err)
	}
	if len(added) == 0 {
		return remote, false, nil
	}
	got, err := h.opts.Provider.CoreV1().Pods(remote.Namespace).UpdateEphemeralContainers(ctx, remote.Name, want, metav1.UpdateOptions{})
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
		why := peering.CleanText(err.Error())
		h.refuse(local.UID, func(r *refusals) {
			for _, name := range added {
				r.ephemeral[name] = why
			}
		})
		h.warn(local, "the provider behind virtual node %s refused ephemeral container %s: %s", h.opts.VirtualNodeName, added, why)
		return remote, false, nil
	}
	if err != nil {
		return remote, false, fmt.Errorf("adding ephemeral containers %v to the remote pod of %s: %w", added, klog.KObj(local), err)
	}
	h.opts.Logger.Info("Added ephemeral containers to reflected pod", "pod", klog.KObj(local), "containers", added)
	return got, true, nil
}

// resize resizes remote, through the provider's pods/resize subresource,
// to the cpu and memory local's containers ask for. It returns the remote
// pod as it now is, and whether it resized it.
func (h *Handler) resize(ctx context.Context, remote, local *corev1.Pod) (*corev1.Pod, bool, error) {
	want, changed := reflection.ResizeRemote(remote, local)
	if !changed {
		h.refuse(local.UID, func(r *refusals) { r.resize = "" })
		return remote, false, nil
	}
	got, err := h.opts.Provider.CoreV1().Pods(remote.Namespace).UpdateResize(ctx, remote.Name, want, metav1.UpdateOptions{})
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
		why := peering.CleanText(err.Error())
		h.refuse(local.UID, func(r *refusals) { r.resize, r.resizeGeneration = why, local.Generation })
		h.warn(local, "the provider behind virtual node %s refused to resize the pod: %s", h.opts.VirtualNodeName, why)
		return remote, false, nil
	}
	if err != nil {
		return remote, false, fmt.Errorf("resizing the remote pod of %s: %w", klog.KObj(local), err)
	}
	h.refuse(local.UID, func(r *refusals) { r.resize = "" })
	h.opts.Logger.Info("Resized reflected pod", "pod", klog.KObj(local))
	return got, true, nil
}

// refuse changes the refusals of the consumer pod of uid with f.
func (h *Handler) refuse(uid types.UID, f func(*refusals)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.refusals[uid]
	if r == nil {
		r = &refusals{ephemeral: map[string]string{}}
	}
	f(r)
	if len(r.ephemeral) == 0 && r.resize == "" {
		delete(h.refusals, uid)
		return
	}
	if h.refusals == nil {
		h.refusals = map[types.UID]*refusals{}
	}
	h.refusals[uid] = r
}

// forgetRefusals drops what was refused of the consumer pod of uid.
func (h *Handler) forgetRefusals(uid types.UID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.refusals, uid)
}

// withRefusals adds to view, the consumer's view of local's remote pod,
// what the provider refused of local: a waiting status for each refused
// ephemeral container (and, when spec is set, the container itself, so
// that the PodController does not ask again until the pod changes), and
// condition PodResizePending with reason Infeasible while local asks for
// the resize that was refused.
func (h *Handler) withRefusals(view, local *corev1.Pod, spec bool) {
	if local == nil {
		return
	}
	h.mu.Lock()
	r := h.refusals[local.UID]
	var ephemeral map[string]string
	var resize string
	if r != nil {
		ephemeral = maps.Clone(r.ephemeral)
		if r.resizeGeneration == local.Generation {
			resize = r.resize
		}
	}
	h.mu.Unlock()
	for _, e := range local.Spec.EphemeralContainers {
		why, refused := ephemeral[e.Name]
		if !refused || slices.ContainsFunc(view.Status.EphemeralContainerStatuses, func(s corev1.ContainerStatus) bool { return s.Name == e.Name }) {
			continue
		}
		view.Status.EphemeralContainerStatuses = append(view.Status.EphemeralContainerStatuses, corev1.ContainerStatus{
			Name: e.Name, Image: e.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ReasonProviderRefused, Message: why}},
		})
		if spec && !slices.ContainsFunc(view.Spec.EphemeralContainers, func(have corev1.EphemeralContainer) bool { return have.Name == e.Name }) {
			view.Spec.EphemeralContainers = append(view.Spec.EphemeralContainers, *e.DeepCopy())
		}
	}
	if resize == "" {
		return
	}
	cond := corev1.PodCondition{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonInfeasible,
		Message: resize, ObservedGeneration: local.Generation, LastTransitionTime: metav1.Now()}
	for i, c := range view.Status.Conditions {
		if c.Type == corev1.PodResizePending {
			if c.Reason == cond.Reason && c.Message == cond.Message {
				cond.LastTransitionTime = c.LastTransitionTime
			}
			view.Status.Conditions[i] = cond
			return
		}
	}
	view.Status.Conditions = append(view.Status.Conditions, cond)
}

// warn records a Warning event with reason ReasonProviderRefused on pod.
func (h *Handler) warn(pod *corev1.Pod, format string, args ...any) {
	if h.opts.Events != nil {
		h.opts.Events.Eventf(pod, corev1.EventTypeWarning, ReasonProviderRefused, format, args...)
	}
}
