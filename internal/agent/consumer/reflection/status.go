package reflection

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// remoteConditions are the pod conditions the provider's scheduler and
// kubelet own, and that LocalStatus takes from the remote pod.
var remoteConditions = []corev1.PodConditionType{
	corev1.PodScheduled,
	corev1.PodReadyToStartContainers,
	corev1.PodInitialized,
	corev1.ContainersReady,
	corev1.PodReady,
	corev1.DisruptionTarget,
	corev1.PodResizePending,
	corev1.PodResizeInProgress,
}

// transientConditions are the remote-owned conditions a kubelet removes
// once what they say is over: a resize done. LocalStatus drops them when
// remote no longer has them.
var transientConditions = []corev1.PodConditionType{corev1.PodResizePending, corev1.PodResizeInProgress}

// LocalStatus is the status to publish on local, the consumer pod that
// remote reflects.
//
// From remote it takes the phase, reason and message, the conditions the
// provider's scheduler and kubelet own (PodScheduled, PodReadyToStartContainers,
// Initialized, ContainersReady, Ready, DisruptionTarget so a consumer Job's
// pod failure policy sees provider evictions, and PodResizePending and
// PodResizeInProgress, dropped once remote drops them), container, init
// container and ephemeral container statuses (states, restarts, image IDs,
// the resources allocated to them), the pod IPs and the start time.
// Pod IPs are copied as the provider reports them; remapping them is the
// network fabric's business.
//
// Everything else stays local's: other conditions (those of local's readiness
// gates, set by consumer controllers), QoS class
// (immutable once set), resource claim statuses and the nominated node.
// Ready is True only when remote is Ready and every readiness gate of local is
// True, as a kubelet would compute it.
//
// hostIP is the virtual node's address, published as the host IP: the
// remote host IP is a provider node's, which consumer tools cannot reach and
// which would disagree with the node the pod is bound to. An empty hostIP
// keeps local's.
//
// Generations: a remote observed generation that has caught up with remote's
// generation is reported as local's generation; an older one keeps local's
// previous value, as the remote and local generations count different updates.
func LocalStatus(remote, local *corev1.Pod, hostIP string) corev1.PodStatus {
	st := *local.Status.DeepCopy()
	rs := remote.Status.DeepCopy()
	cleanStatusText(rs)
	st.Phase = rs.Phase
	st.Reason = rs.Reason
	st.Message = rs.Message
	st.PodIP = rs.PodIP
	st.PodIPs = rs.PodIPs
	st.StartTime = rs.StartTime
	st.InitContainerStatuses = rs.InitContainerStatuses
	st.ContainerStatuses = rs.ContainerStatuses
	st.EphemeralContainerStatuses = rs.EphemeralContainerStatuses
	hideProviderDefaults(st.InitContainerStatuses, local.Spec.InitContainers)
	hideProviderDefaults(st.ContainerStatuses, local.Spec.Containers)
	if st.QOSClass == "" {
		st.QOSClass = rs.QOSClass
	}
	if hostIP != "" {
		st.HostIP = hostIP
		st.HostIPs = []corev1.HostIP{{IP: hostIP}}
	}
	gen := generationMapper(remote, local)
	st.ObservedGeneration = gen(rs.ObservedGeneration, local.Status.ObservedGeneration)
	st.Conditions = mergeConditions(local.Status.Conditions, rs.Conditions, gen)
	applyReadinessGates(&st, local)
	return st
}

// hideProviderDefaults takes out of statuses, in place, the requests and
// limits that the consumer's containers (of the same names in specs) do
// not set: the twin namespace's LimitRange gave them the provider's
// defaults (a request so that the quota counts them, the lent capacity as
// the limit), which a node of the consumer would not have. The status then
// shows what the consumer asked for, as the kubelet allocated and applied
// it; a resize shows in it once the provider's kubelet applied it.
func hideProviderDefaults(statuses []corev1.ContainerStatus, specs []corev1.Container) {
	for i := range statuses {
		st := &statuses[i]
		j := slices.IndexFunc(specs, func(c corev1.Container) bool { return c.Name == st.Name })
		if j < 0 {
			continue
		}
		want := specs[j].Resources
		st.AllocatedResources = onlyIn(st.AllocatedResources, want.Requests)
		if st.Resources != nil {
			st.Resources.Requests = onlyIn(st.Resources.Requests, want.Requests)
			st.Resources.Limits = onlyIn(st.Resources.Limits, want.Limits)
		}
	}
}

// onlyIn returns have without the resources that want does not name, nil
// when none is left.
func onlyIn(have, want corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for name, q := range have {
		if _, ok := want[name]; !ok {
			continue
		}
		if out == nil {
			out = corev1.ResourceList{}
		}
		out[name] = q
	}
	return out
}

// cleanStatusText cleans, in place, the text of a remote pod's status: the
// provider wrote it, and kubectl describe and get print it on the consumer.
func cleanStatusText(st *corev1.PodStatus) {
	st.Reason, st.Message = peering.CleanText(st.Reason), peering.CleanText(st.Message)
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.Reason, c.Message = peering.CleanText(c.Reason), peering.CleanText(c.Message)
	}
	for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for i := range list {
			for _, s := range []*corev1.ContainerState{&list[i].State, &list[i].LastTerminationState} {
				if w := s.Waiting; w != nil {
					w.Reason, w.Message = peering.CleanText(w.Reason), peering.CleanText(w.Message)
				}
				if x := s.Terminated; x != nil {
					x.Reason, x.Message = peering.CleanText(x.Reason), peering.CleanText(x.Message)
				}
			}
		}
	}
}

// generationMapper maps a remote observed generation to a local one, with
// fallback used when the remote one is stale.
func generationMapper(remote, local *corev1.Pod) func(observed, fallback int64) int64 {
	return func(observed, fallback int64) int64 {
		switch {
		case observed == 0:
			return 0
		case observed >= remote.Generation:
			return local.Generation
		default:
			return fallback
		}
	}
}

// mergeConditions keeps local's conditions in order, replacing the
// remote-owned ones with remote's and appending the remote-owned ones local
// lacks, in remote's order.
func mergeConditions(local, remote []corev1.PodCondition, gen func(int64, int64) int64) []corev1.PodCondition {
	fromRemote := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range remote {
		if isRemoteCondition(c.Type) {
			fromRemote[c.Type] = c
		}
	}
	var out []corev1.PodCondition
	used := map[corev1.PodConditionType]bool{}
	for _, c := range local {
		if _, ok := fromRemote[c.Type]; !ok && slices.Contains(transientConditions, c.Type) {
			continue
		}
		if rc, ok := fromRemote[c.Type]; ok {
			rc.ObservedGeneration = gen(rc.ObservedGeneration, c.ObservedGeneration)
			out = append(out, rc)
			used[c.Type] = true
			continue
		}
		out = append(out, c)
	}
	for _, c := range remote {
		if _, ok := fromRemote[c.Type]; ok && !used[c.Type] {
			c.ObservedGeneration = gen(c.ObservedGeneration, 0)
			out = append(out, c)
			used[c.Type] = true
		}
	}
	return out
}

func isRemoteCondition(t corev1.PodConditionType) bool {
	for _, r := range remoteConditions {
		if r == t {
			return true
		}
	}
	return false
}

// applyReadinessGates turns a True Ready condition False while a readiness
// gate of local is not True. The transition time is local's when the status
// does not change, and otherwise the latest of the conditions that decided it,
// so the result stays a function of its inputs.
func applyReadinessGates(st *corev1.PodStatus, local *corev1.Pod) {
	ready := findCondition(st.Conditions, corev1.PodReady)
	if ready == nil || ready.Status != corev1.ConditionTrue || len(local.Spec.ReadinessGates) == 0 {
		return
	}
	message, gate := unreadyGate(st.Conditions, local.Spec.ReadinessGates)
	if message == "" {
		return
	}
	ready.Status = corev1.ConditionFalse
	ready.Reason = "ReadinessGatesNotReady"
	ready.Message = message
	ready.LastTransitionTime = latest(ready, gate)
	if prev := findCondition(local.Status.Conditions, corev1.PodReady); prev != nil && prev.Status == corev1.ConditionFalse {
		ready.LastTransitionTime = prev.LastTransitionTime
	}
}

func findCondition(cs []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// unreadyGate returns why the first gate that is not True holds Ready back,
// and its condition when it exists.
func unreadyGate(cs []corev1.PodCondition, gates []corev1.PodReadinessGate) (string, *corev1.PodCondition) {
	for _, g := range gates {
		c := findCondition(cs, g.ConditionType)
		if c == nil {
			return fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", g.ConditionType), nil
		}
		if c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", g.ConditionType, c.Status), c
		}
	}
	return "", nil
}

// latest is the transition time of ready or gate, whichever is later.
func latest(ready, gate *corev1.PodCondition) metav1.Time {
	if gate != nil && ready.LastTransitionTime.Before(&gate.LastTransitionTime) {
		return gate.LastTransitionTime
	}
	return ready.LastTransitionTime
}
