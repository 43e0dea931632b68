package reflection

import (
	corev1 "k8s.io/api/core/v1"
)

// What an offloaded workload sees of itself through the downward API.
//
// The kubelet that resolves the downward API is the provider's, for the
// remote pod: left alone, an offloaded container would read the twin
// namespace, the remote pod's UID, the provider node's name and address,
// and the "default" ServiceAccount the remote pod runs as. A workload on a
// real node sees its own pod, so environment variables that take these
// fields are given the consumer pod's values instead, as literal values:
//
//   - metadata.namespace: the consumer namespace;
//   - metadata.uid: the consumer pod's UID;
//   - spec.nodeName: the virtual node;
//   - spec.serviceAccountName: the consumer pod's ServiceAccount;
//   - status.hostIP and status.hostIPs: the virtual node's address
//     (Origin.HostIP), when known.
//
// What cannot be given this way stays the provider's (README, "What
// happens, and what to expect"): status.podIP and status.podIPs are the remote pod's
// real addresses (the consumer shows them in its view of the provider's
// pods, which is known only once the remote pod runs), and downward API
// volumes are resolved by the provider's kubelet (metadata.name, labels
// and annotations read the same on both sides; the namespace of a
// service-account volume is the consumer's, see translateServiceAccountVolumes).

// consumerFields are the downward API fields whose consumer value
// translateDownwardEnv writes, by field path.
func consumerFields(local *corev1.Pod, o Origin) map[string]string {
	sa := local.Spec.ServiceAccountName
	if sa == "" {
		sa = DefaultServiceAccount
	}
	fields := map[string]string{
		"metadata.namespace":      local.Namespace,
		"metadata.uid":            string(local.UID),
		"spec.nodeName":           local.Spec.NodeName,
		"spec.serviceAccountName": sa,
	}
	if o.HostIP != "" {
		fields["status.hostIP"] = o.HostIP
		fields["status.hostIPs"] = o.HostIP
	}
	return fields
}

// translateDownwardEnv replaces, in every container of spec, the
// environment variables that read a field of consumerFields with its
// consumer value.
func translateDownwardEnv(spec *corev1.PodSpec, local *corev1.Pod, o Origin) {
	fields := consumerFields(local, o)
	forEachContainer(spec, func(c *corev1.Container) {
		for i := range c.Env {
			e := &c.Env[i]
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
				continue
			}
			if v, ok := fields[e.ValueFrom.FieldRef.FieldPath]; ok && v != "" {
				e.Value, e.ValueFrom = v, nil
			}
		}
	})
}
