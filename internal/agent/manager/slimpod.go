package manager

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/slim"
)

// SlimPod is the cache transform of Pods: a pod with only the fields the
// agent's controllers read from the manager's cache. The resource offer
// reads a pod's node, phase, origin label and requests (the scheduler's
// arithmetic: containers, init containers and their restart policy,
// overhead, pod-level resources); the network controllers read its labels,
// node, host network, addresses and deletion. Annotations, volumes,
// environment, probes, conditions and container statuses, most of a pod's
// size, go: on a consumer, every offloaded pod is one of these.
//
// The cache never writes a pod back, so nothing is lost on the API server;
// a controller that needs another field of a pod reads it with the
// manager's API reader, or adds it here.
func SlimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		TypeMeta:   p.TypeMeta,
		ObjectMeta: reflection.SlimMeta(&p.ObjectMeta),
		Spec: corev1.PodSpec{
			NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork,
			Containers: slimContainers(p.Spec.Containers), InitContainers: slimContainers(p.Spec.InitContainers),
			Overhead: p.Spec.Overhead, Resources: p.Spec.Resources,
		},
		Status: corev1.PodStatus{
			Phase: p.Status.Phase, HostIP: p.Status.HostIP, HostIPs: p.Status.HostIPs, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs,
		},
	}
	// The pods of a ReplicaSet carry the same labels and owner.
	out.Labels, out.OwnerReferences = slim.Labels(out.Labels), slim.OwnerReferences(p.OwnerReferences)
	slim.PodStrings(out)
	return out, nil
}

// slimContainers keeps the names, resources (shared with other pods,
// slim.Resources) and restart policies of cs.
func slimContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, Resources: slim.Requirements(c.Resources), RestartPolicy: c.RestartPolicy}
	}
	return slim.Containers(out)
}
