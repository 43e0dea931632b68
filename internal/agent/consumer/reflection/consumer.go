package reflection

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// ReasonRemotePodDeleted is the status reason of consumer pods whose remote
// pod was deleted.
const ReasonRemotePodDeleted = "RemotePodDeleted"

// ConsumerStatus is the status of consumer pod local that remote implies
// (LocalStatus), with a pod whose remote pod was deleted on the provider,
// though the consumer did not delete it, reported Failed with reason
// RemotePodDeleted: the provider's kubelet may end such a pod Succeeded
// (its containers exit 0 on SIGTERM), which would tell the consumer the
// workload completed. Its controller then replaces it.
//
// With the network fabric, the pod's addresses are the provider's
// translated into the consumer's view (addrs), so the consumer reaches the
// pod by the IP it shows, and the consumer's own EndpointSlices, built
// from it, include remote pods. While the translation is not known or the
// tunnel is down (addrs.Withhold), the pod shows no address at all: the
// provider's own would be another pod's address on the consumer, where the
// consumer's Services would send its traffic.
func ConsumerStatus(remote, local *corev1.Pod, hostIP string, addrs *Addresses) corev1.PodStatus {
	st := LocalStatus(remote, local, hostIP)
	switch {
	case addrs != nil && addrs.Withhold:
		st.PodIP, st.PodIPs = "", nil
	case addrs != nil && st.PodIP != "":
		// Addresses outside the provider's pod CIDRs are dropped; the
		// first one left is the pod's IP.
		in := st.PodIPs
		if len(in) == 0 {
			in = []corev1.PodIP{{IP: st.PodIP}}
		}
		var ips []corev1.PodIP
		for _, ip := range in {
			if v := addrs.ConsumerIP(ip.IP); v != "" {
				ips = append(ips, corev1.PodIP{IP: v})
			}
		}
		st.PodIP, st.PodIPs = "", ips
		if len(ips) > 0 {
			st.PodIP = ips[0].IP
		}
	}
	if remote.DeletionTimestamp != nil && local.DeletionTimestamp == nil &&
		(st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed) {
		st.Phase = corev1.PodFailed
		st.Reason = ReasonRemotePodDeleted
		st.Message = "the pod's remote pod on the provider was deleted"
	}
	return st
}

// ConsumerView is remote as the consumer sees it: consumer pod local (or,
// when local is nil, a pod built from remote with the consumer's namespace,
// the origin pod UID and nodeName) with the mutable fields remote has
// (container images, labels, reflected annotations, activeDeadlineSeconds,
// the tolerations reflection with origin o sends, the ephemeral
// containers, the resources while a resize has not reached remote) and the status remote
// implies (ConsumerStatus). The virtual-kubelet
// PodController compares it with the consumer pod to decide whether to
// update the remote pod, so it differs exactly when the remote pod lags, or
// the consumer pod's status lags an update that never reaches the remote pod.
func ConsumerView(remote, local *corev1.Pod, o Origin, namespace, nodeName, hostIP string, addrs *Addresses) *corev1.Pod {
	var out *corev1.Pod
	if local != nil {
		out = local.DeepCopy()
	} else {
		out = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: remote.Name, Namespace: namespace,
				UID: types.UID(remote.Labels[offloadv1alpha1.LabelOriginPodUID]), CreationTimestamp: remote.CreationTimestamp},
			Spec: *remote.Spec.DeepCopy(),
		}
		out.Spec.NodeName = nodeName
		local = &corev1.Pod{}
	}
	out.Labels = consumerLabels(remote.Labels)
	out.Annotations = consumerAnnotations(remote.Annotations)
	updateImages(out.Spec.InitContainers, remote.Spec.InitContainers)
	updateImages(out.Spec.Containers, remote.Spec.Containers)
	// The ephemeral containers the remote pod has, and, until a resize
	// reached the remote pod, its resources: either difference makes the
	// PodController call UpdatePod, which adds or resizes them.
	out.Spec.EphemeralContainers = slices.DeleteFunc(out.Spec.EphemeralContainers, func(e corev1.EphemeralContainer) bool {
		return !hasEphemeralContainer(remote, e.Name)
	})
	if resizeLags(remote, local) {
		updateResources(out.Spec.InitContainers, remote.Spec.InitContainers)
		updateResources(out.Spec.Containers, remote.Spec.Containers)
	}
	// The remote pod's deadline, none included: a deadline set on the
	// consumer pod only must show as a difference, or it never reaches the
	// remote pod.
	out.Spec.ActiveDeadlineSeconds = nil
	if remote.Spec.ActiveDeadlineSeconds != nil {
		d := *remote.Spec.ActiveDeadlineSeconds
		out.Spec.ActiveDeadlineSeconds = &d
	}
	// Without the tolerations reflection sends (o) that the remote pod
	// lacks: one added on the consumer shows as a difference until it
	// reached the remote pod. Those reflection leaves out do only while
	// the consumer pod's status has not observed its generation: adding
	// one bumps the generation but never reaches the remote pod, so no
	// remote event follows, and the difference is what makes the
	// PodController call UpdatePod, which publishes the status again.
	unobserved := generationUnobserved(remote, local)
	lagging := func(t corev1.Toleration) bool {
		return (unobserved || len(remoteTolerations([]corev1.Toleration{t}, o)) > 0) &&
			!slices.ContainsFunc(remote.Spec.Tolerations, func(have corev1.Toleration) bool { return apiequality.Semantic.DeepEqual(have, t) })
	}
	if slices.ContainsFunc(out.Spec.Tolerations, lagging) {
		out.Spec.Tolerations = slices.DeleteFunc(out.Spec.Tolerations, lagging)
	}
	out.Status = ConsumerStatus(remote, local, hostIP, addrs)
	return out
}

// generationUnobserved tells whether the consumer pod local has a
// generation its status has not observed, while the remote pod's status
// has observed remote's: the status LocalStatus gives would catch up. A
// provider that reports no observed generation never counts.
func generationUnobserved(remote, local *corev1.Pod) bool {
	observed := local.Status.ObservedGeneration
	return observed != 0 && observed < local.Generation &&
		remote.Status.ObservedGeneration != 0 && remote.Status.ObservedGeneration >= remote.Generation
}

// consumerLabels are remote's labels without the origin labels.
func consumerLabels(remote map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range remote {
		if k != offloadv1alpha1.LabelOriginClusterID && k != offloadv1alpha1.LabelOriginPodUID {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// consumerAnnotations are the annotations reflection copied onto remote.
func consumerAnnotations(remote map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range reflectedKeys(remote) {
		if v, ok := remote[k]; ok {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Terminate turns st into the terminal status of a pod whose remote pod is
// gone: every container that has not terminated is terminated, and the
// phase is Succeeded when all exited 0, and otherwise Failed; always
// Failed when the consumer did not delete the pod (consumerDeleted false),
// as in ConsumerStatus. now is when it ended.
func Terminate(st *corev1.PodStatus, consumerDeleted bool, now metav1.Time) {
	succeeded := len(st.ContainerStatuses) > 0
	for i := range st.ContainerStatuses {
		cs := &st.ContainerStatuses[i]
		if cs.State.Terminated == nil {
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: ReasonRemotePodDeleted, Message: "the remote pod was deleted", FinishedAt: now,
			}}
		}
		cs.Ready = false
		cs.Started = new(false)
		succeeded = succeeded && cs.State.Terminated.ExitCode == 0
	}
	st.Phase = corev1.PodFailed
	if succeeded && consumerDeleted {
		st.Phase = corev1.PodSucceeded
	}
	st.Reason = ReasonRemotePodDeleted
	st.Message = "the pod's remote pod on the provider was deleted"
	for i := range st.Conditions {
		if c := &st.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			if c.Status != corev1.ConditionFalse {
				c.Status, c.Reason, c.LastTransitionTime = corev1.ConditionFalse, ReasonRemotePodDeleted, now
			}
		}
	}
}
