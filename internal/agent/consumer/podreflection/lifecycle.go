package podreflection

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/daemonset"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// transientBackoff spaces the attempts of CreatePod after transient
// errors: six attempts over about three seconds.
var transientBackoff = wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 6}

// transient reports whether err, from the provider, may pass on its own:
// a conflict on the twin namespace's quota under concurrent pod creations,
// throttling, a timeout, an API server that is restarting.
func transient(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)
}

// CreatePod reflects the ConfigMaps and Secrets pod references into its
// twin namespace, then creates the remote pod. It is idempotent: a remote
// pod that already reflects pod is brought up to date. A remote pod of the
// same name that reflects an earlier consumer pod of that name is deleted,
// and while it terminates CreatePod fails, so the PodController retries; a
// pod there that the consumer did not create is never touched.
//
// Transient errors are retried here, a few times over seconds: the
// PodController marks a pod with restartPolicy Never Failed for good on
// any error of CreatePod.
func (h *Handler) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	return retry.OnError(transientBackoff, transient, func() error { return h.createPod(ctx, pod) })
}

// createPod is one attempt of CreatePod.
func (h *Handler) createPod(ctx context.Context, pod *corev1.Pod) error {
	if err := h.heldBack(ctx, pod); err != nil {
		return err
	}
	ti, err := h.resolve(pod.Namespace)
	if err != nil {
		return err
	}
	o := h.podOrigin(ti.twin, pod)
	remote, err := reflection.RemotePod(pod, o)
	if err != nil {
		return asInvalidInput(err)
	}
	if err := h.reflectObjects(ctx, pod, o); err != nil {
		return err
	}
	if err := h.reflectToken(ctx, pod, o, true); err != nil {
		return err
	}
	pods := h.opts.Provider.CoreV1().Pods(ti.twin)
	created, err := pods.Create(ctx, remote, metav1.CreateOptions{})
	if err == nil {
		h.opts.Logger.Info("Reflected pod", "pod", klog.KObj(pod), "twinNamespace", ti.twin)
		// A pod debugged before it reached the provider (or before its
		// remote pod was lost) gets its ephemeral containers now.
		_, _, err := h.addEphemeralContainers(ctx, created, pod, o)
		return err
	}
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
		return h.refused(pod, err)
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the remote pod of %s in %q: %w", klog.KObj(pod), ti.twin, err)
	}
	existing, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the remote pod of %s in %q: %w", klog.KObj(pod), ti.twin, err)
	}
	uid, ours := reflection.IsRemoteOf(existing, h.opts.ConsumerClusterID)
	switch {
	case ours && uid == pod.UID:
		_, err := h.update(ctx, existing, pod, o)
		return err
	case ours:
		// The consumer pod of that UID is gone: a pod of one name has one
		// UID at a time, and pod has another.
		if err := h.deleteRemote(ctx, existing, nil); err != nil {
			return err
		}
		if _, err := pods.Create(ctx, remote, metav1.CreateOptions{}); err == nil {
			h.opts.Logger.Info("Reflected pod, replacing a stale remote pod", "pod", klog.KObj(pod), "twinNamespace", ti.twin)
			return nil
		}
		return fmt.Errorf("the remote pod of %s in %q reflects an earlier pod of that name (UID %s); it is being deleted, and the pod is created once it is gone",
			klog.KObj(pod), ti.twin, uid)
	default:
		return errdefs.AsInvalidInput(fmt.Errorf("pod %q in twin namespace %q was not created by offload for this cluster: delete or rename it on the provider", pod.Name, ti.twin))
	}
}

// heldBack refuses a pod of a DaemonSet that the agent keeps off virtual
// nodes: the DaemonSet controller may bind one here before the agent's
// change to the DaemonSet, and deletes it after. The DaemonSet and the
// node are read uncached: DaemonSet pods on a virtual node are rare.
func (h *Handler) heldBack(ctx context.Context, pod *corev1.Pod) error {
	name, ok := daemonset.OwnerOf(pod)
	if !ok {
		return nil
	}
	ds, err := h.opts.Consumer.AppsV1().DaemonSets(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading DaemonSet %s/%s, which owns the pod, before sending it: %w", pod.Namespace, name, err)
	}
	node, err := h.opts.Consumer.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading virtual node %s, which the pod is bound to, before sending it: %w", pod.Spec.NodeName, err)
	}
	return daemonset.HeldBack(ds, node)
}

// UpdatePod pushes the changes of pod that a pod update can carry to its
// remote pod; a missing remote pod is created. When the update changes
// nothing on the remote pod (a change reflection leaves out, such as a
// scheduling toleration), no remote event will follow, so UpdatePod sends
// the status again itself: the consumer pod's observedGeneration then
// catches up with the generation the update gave it, as a kubelet's would.
func (h *Handler) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	ti, err := h.resolve(pod.Namespace)
	if err != nil {
		return err
	}
	remote, err := h.opts.Provider.CoreV1().Pods(ti.twin).Get(ctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return h.CreatePod(ctx, pod)
	}
	if err != nil {
		return fmt.Errorf("reading the remote pod of %s in %q: %w", klog.KObj(pod), ti.twin, err)
	}
	if uid, ours := reflection.IsRemoteOf(remote, h.opts.ConsumerClusterID); !ours || uid != pod.UID {
		return h.CreatePod(ctx, pod)
	}
	changed, err := h.update(ctx, remote, pod, h.podOrigin(ti.twin, pod))
	if err != nil || changed {
		return err
	}
	h.remoteChanged(ti, remote)
	return nil
}

// update writes the changes of local onto remote, if there are any, and
// reports whether there were: those a pod update carries, then the
// ephemeral containers and the resize a kubelet would carry out
// (kubelet.go).
func (h *Handler) update(ctx context.Context, remote, local *corev1.Pod, o reflection.Origin) (bool, error) {
	updated, changed, err := reflection.UpdateRemote(remote, local, o)
	if err != nil {
		return false, asInvalidInput(err)
	}
	if changed {
		if remote, err = h.opts.Provider.CoreV1().Pods(o.TwinNamespace).Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
			return false, fmt.Errorf("updating the remote pod of %s in %q: %w", klog.KObj(local), o.TwinNamespace, err)
		}
		h.opts.Logger.Info("Updated reflected pod", "pod", klog.KObj(local), "twinNamespace", o.TwinNamespace)
	}
	remote, added, err := h.addEphemeralContainers(ctx, remote, local, o)
	if err != nil {
		return changed, err
	}
	_, resized, err := h.resize(ctx, remote, local)
	return changed || added || resized, err
}

// DeletePod deletes the remote pod of pod with pod's grace period. A remote
// pod that is already gone, or that reflects another consumer pod, counts
// as deleted. When the remote pod disappears, the handler notifies a
// terminal status; the PodController deletes the consumer pod once the
// grace period is over.
func (h *Handler) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	h.forgetRefusals(pod.UID)
	twin, ok := h.opts.TwinNamespace(pod.Namespace)
	if !ok || twin == "" {
		// No twin namespace, so no remote pod: the namespace's
		// garbage collection takes whatever remains on the provider.
		return nil
	}
	remote, err := h.opts.Provider.CoreV1().Pods(twin).Get(ctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the remote pod of %s in %q: %w", klog.KObj(pod), twin, err)
	}
	if uid, ours := reflection.IsRemoteOf(remote, h.opts.ConsumerClusterID); !ours || uid != pod.UID {
		return nil
	}
	return h.deleteRemote(ctx, remote, pod.DeletionGracePeriodSeconds)
}

// deleteRemote deletes remote, and only remote: a pod of the same name
// created since is left alone.
func (h *Handler) deleteRemote(ctx context.Context, remote *corev1.Pod, grace *int64) error {
	opts := metav1.DeleteOptions{GracePeriodSeconds: grace, Preconditions: metav1.NewUIDPreconditions(string(remote.UID))}
	err := h.opts.Provider.CoreV1().Pods(remote.Namespace).Delete(ctx, remote.Name, opts)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting remote pod %s: %w", klog.KObj(remote), err)
	}
	h.opts.Logger.Info("Deleted reflected pod", "remotePod", klog.KObj(remote))
	if uid, ok := reflection.IsRemoteOf(remote, h.opts.ConsumerClusterID); ok && hasTokenVolume(remote) {
		h.deleteToken(ctx, remote.Namespace, remote.Name, uid)
	}
	return nil
}

// GetPod returns the consumer's view of the remote pod of namespace/name
// from the informer cache, or a NotFound error.
func (h *Handler) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	ti, err := h.resolve(namespace)
	if errors.Is(err, ErrNotOffloaded) {
		return nil, errdefs.AsNotFound(err)
	}
	if err != nil {
		return nil, err
	}
	if err := waitSynced(ctx, ti); err != nil {
		return nil, err
	}
	remote, err := ti.lister.Pods(ti.twin).Get(name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errdefs.NotFoundf("pod %s/%s has no remote pod", namespace, name)
		}
		return nil, err
	}
	p := h.consumerView(ctx, ti, remote)
	if p == nil {
		return nil, errdefs.NotFoundf("pod %s/%s has no remote pod", namespace, name)
	}
	return p, nil
}

// GetPodStatus returns the status GetPod's pod has.
func (h *Handler) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	p, err := h.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &p.Status, nil
}

// asInvalidInput marks the errors of pods that cannot be offloaded so the
// PodController does not retry them.
func asInvalidInput(err error) error {
	if errors.Is(err, reflection.ErrNotOffloadable) {
		return errdefs.AsInvalidInput(err)
	}
	return err
}

// refused explains a remote pod the provider's API server refused: its Pod
// Security level, its admission policy, its quota or its validation. The
// PodController puts the message on the pod (reason ProviderFailed) and in
// a ProviderCreateFailed event, and tries again with backoff, so a pod
// refused for want of quota starts once there is room.
func (h *Handler) refused(pod *corev1.Pod, err error) error {
	return fmt.Errorf("the provider behind virtual node %s refused pod %s: %w; change the pod, or ask the provider for room or for another policy (kubectl offload status peer shows its policy)",
		h.opts.VirtualNodeName, klog.KObj(pod), err)
}
