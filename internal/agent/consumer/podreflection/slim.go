package podreflection

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/slim"
)

// slimRemotePod is the transform of the twin namespaces' pod informers: a
// remote pod with only the fields the handler reads from the cache. The
// status and the metadata stay whole (the consumer's status and view are
// made of them); of the spec stay what a pod update, an ephemeral
// container or a resize can change and the consumer's view compares
// (container names, images and cpu and memory, the names of the ephemeral
// containers, the deadline, the tolerations), the node, and whether it
// mounts the pod's token Secret, which deleting the pod deletes with it
// (kept as one Secret volume, whatever the volume's kind). Volumes,
// environment, probes and other resources, most of a pod's size, go.
//
// The cache never writes a pod back: UpdatePod and CreatePod read the
// remote pod they update from the API server.
func slimRemotePod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		TypeMeta:   p.TypeMeta,
		ObjectMeta: reflection.SlimMeta(&p.ObjectMeta),
		Spec: corev1.PodSpec{
			NodeName: p.Spec.NodeName, ActiveDeadlineSeconds: p.Spec.ActiveDeadlineSeconds, Tolerations: slim.Tolerations(p.Spec.Tolerations),
			Containers: slimContainers(p.Spec.Containers), InitContainers: slimContainers(p.Spec.InitContainers),
		},
		Status: p.Status,
	}
	out.Annotations = p.Annotations
	for _, e := range p.Spec.EphemeralContainers {
		out.Spec.EphemeralContainers = append(out.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: e.Name}})
	}
	token := reflection.TokenSecretName(p.Name)
	for _, v := range p.Spec.Volumes {
		if mountsSecret(v, token) {
			// Only that it mounts the Secret, whatever the volume's kind.
			out.Spec.Volumes = []corev1.Volume{{Name: v.Name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: token}}}}
			break
		}
	}
	slim.PodStrings(out)
	return out, nil
}

// slimContainers keeps the names, images, and cpu and memory requests and
// limits of cs, the lists shared with other pods (slim.Resources).
func slimContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, Image: c.Image,
			Resources: corev1.ResourceRequirements{Requests: slim.Resources(cpuAndMemory(c.Resources.Requests)),
				Limits: slim.Resources(cpuAndMemory(c.Resources.Limits))}}
	}
	return slim.Containers(out)
}

// cpuAndMemory keeps the cpu and memory of l, nil when it has neither.
func cpuAndMemory(l corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := l[r]; ok {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[r] = q
		}
	}
	return out
}

// SlimConsumerPod is the transform of the informer of the consumer's pods
// bound to the virtual node: a pod with only what the pod controller and
// the handler read from that cache. The metadata (less managedFields) and
// the status stay whole: a status is written with them, and the API server
// takes a status update's labels and annotations. Of the spec stay
//   - what a pod update can change, which the consumer's view of the remote
//     pod is compared with: the containers' names, images, resources and
//     restart and resize policies, the ephemeral containers' names and
//     images, the deadline and the tolerations;
//   - what a status is made of: the readiness gates, the restart policy;
//   - what renewing a token reads: the service account, the
//     service-account token volumes, the claims;
//   - the scheduler's arithmetic: the node, the overhead, the pod's
//     resources.
//
// Environment, mounts, probes and the volumes' sources, most of a spec,
// go: the pod controller reads the whole pod from the API server to create
// or update its remote pod.
func SlimConsumerPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	s := &p.Spec
	spec := corev1.PodSpec{
		NodeName: s.NodeName, ServiceAccountName: s.ServiceAccountName, RestartPolicy: s.RestartPolicy,
		ActiveDeadlineSeconds: s.ActiveDeadlineSeconds, Tolerations: slim.Tolerations(s.Tolerations), ReadinessGates: s.ReadinessGates,
		Overhead: s.Overhead, Resources: s.Resources,
		Containers: consumerContainers(s.Containers), InitContainers: consumerContainers(s.InitContainers),
	}
	for _, e := range s.EphemeralContainers {
		spec.EphemeralContainers = append(spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: e.Name, Image: e.Image}})
	}
	for _, v := range s.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			spec.Volumes = append(spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim}})
		case v.Projected != nil:
			// Its service-account tokens only, which tell whether the
			// pod needs a token reflected.
			var tokens []corev1.VolumeProjection
			for _, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil {
					tokens = append(tokens, corev1.VolumeProjection{ServiceAccountToken: src.ServiceAccountToken})
				}
			}
			if tokens != nil {
				spec.Volumes = append(spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: tokens}}})
			}
		}
	}
	// In place: the informer hands the transform an object of its own.
	p.Spec = spec
	p.ManagedFields = nil
	// The pods of a ReplicaSet carry the same labels and owner.
	p.Labels, p.OwnerReferences = slim.Labels(p.Labels), slim.OwnerReferences(p.OwnerReferences)
	slim.PodStrings(p)
	return p, nil
}

// consumerContainers keeps the names, images, resources (shared with other
// pods, slim.Resources) and restart and resize policies of cs.
func consumerContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, Image: c.Image, Resources: slim.Requirements(c.Resources),
			RestartPolicy: c.RestartPolicy, ResizePolicy: c.ResizePolicy}
	}
	return slim.Containers(out)
}
