package slim

import (
	corev1 "k8s.io/api/core/v1"
)

var strs table[string]

// String returns a string equal to s, the one other callers got for an
// equal string. A decoded pod's every string is an allocation of its own,
// though most of them (its namespace, node, images, condition types and
// reasons) are those of its workload's other pods. Only strings that few
// pods differ by are worth it: the table starts over past maxShared.
func String(s string) string {
	if s == "" {
		return s
	}
	return strs.share(s, s)
}

// PodStrings makes p's strings that its workload's other pods have too
// those other callers got (String): its namespace and generated name, its
// node and service account, and the addresses, phase, conditions and
// container statuses of its status, but for what tells one container from
// another (its ID, its start) and the messages, which can be long and each
// pod's own. Its containers are Containers' to share. It changes p, which
// nobody else may be reading.
func PodStrings(p *corev1.Pod) {
	p.Namespace, p.GenerateName = String(p.Namespace), String(p.GenerateName)
	p.Spec.NodeName, p.Spec.ServiceAccountName = String(p.Spec.NodeName), String(p.Spec.ServiceAccountName)
	st := &p.Status
	st.Phase, st.QOSClass, st.HostIP = corev1.PodPhase(String(string(st.Phase))), corev1.PodQOSClass(String(string(st.QOSClass))), String(st.HostIP)
	st.Reason, st.NominatedNodeName = String(st.Reason), String(st.NominatedNodeName)
	for i := range st.HostIPs {
		st.HostIPs[i].IP = String(st.HostIPs[i].IP)
	}
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.Type, c.Status = corev1.PodConditionType(String(string(c.Type))), corev1.ConditionStatus(String(string(c.Status)))
		c.Reason = String(c.Reason)
	}
	for _, cs := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for i := range cs {
			containerStatusStrings(&cs[i])
		}
	}
}

// containerStatusStrings is PodStrings for one container's status.
func containerStatusStrings(c *corev1.ContainerStatus) {
	c.Name, c.Image, c.ImageID = String(c.Name), String(c.Image), String(c.ImageID)
	for _, state := range []*corev1.ContainerState{&c.State, &c.LastTerminationState} {
		if w := state.Waiting; w != nil {
			w.Reason = String(w.Reason)
		}
		if t := state.Terminated; t != nil {
			t.Reason = String(t.Reason)
		}
	}
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		m.Name, m.MountPath = String(m.Name), String(m.MountPath)
	}
}
