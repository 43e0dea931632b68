package reflection

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// RemotePod builds the pod that runs local on the provider: same name, in
// o.TwinNamespace, labelled with the origin cluster ID and the local pod's UID.
//
// The spec is a deep copy of local's, minus what cannot apply on the provider:
//   - nodeName and schedulingGates;
//   - ephemeral containers, which the API server refuses on create:
//     AddEphemeralContainers adds them, translated as containers are,
//     through the pods/ephemeralcontainers subresource;
//   - node selectors, node affinity, pod affinity and topology spread
//     constraints about virtual nodes (see the affinity rules in affinity.go);
//   - tolerations of offload.io/ and virtual-kubelet taints, and of
//     node.kubernetes.io/unreachable and not-ready: those protect the pod
//     from virtual-node partitions (docs/architecture.md, Failure policy); on the provider
//     its DefaultTolerationSeconds admission gives the usual 300 s, so a dead
//     provider node still frees the pod for its consumer-side controller;
//   - unless the provider lets the consumer place its pods
//     (o.NodePlacement), every other toleration and every node selector and
//     node affinity expression on a label other than the operating system
//     and the architecture: where the pod runs on the provider is the
//     provider's to say, and its admission refuses them;
//   - schedulerName, priorityClassName, priority, preemptionPolicy and
//     overhead: the provider may have no such scheduler or PriorityClass,
//     and its admission recomputes the others (and rejects stale ones);
//   - readinessGates: the consumer's controllers set those conditions on the
//     local pod, and LocalStatus folds them into the local Ready condition;
//   - the service account: the pod runs as the provider's "default" account
//     with automountServiceAccountToken=false, so the provider never mounts a
//     provider token. The kube-api-access-* volume and its mounts are dropped,
//     or, when o.ServiceAccountTokenSecret is set, rewritten to read the
//     reflected consumer token, CA and namespace from that Secret.
//
// It keeps containers and init containers with their resources, env,
// probes, lifecycle and securityContext, restartPolicy, DNS settings, the pod
// securityContext (with NET_RAW dropped unless a container asks for it, see
// dropNetRaw), runtimeClassName (dropping it could run a sandboxed
// workload unsandboxed: the provider refuses it unless it trusts the
// consumer) and volumes of ConfigMaps, Secrets, emptyDir,
// downwardAPI and projections of those, under the same names: the object
// reflectors copy them into the twin namespace.
//
// Pods that need the provider's nodes themselves (hostNetwork, hostPID,
// hostIPC, hostPath volumes, hostPorts), or storage and devices that are not
// reflected (PersistentVolumeClaims that are not in o.Claims, resource
// claims, service-account tokens of other audiences), get a
// *NotOffloadableError that lists every reason. A claim in o.Claims
// becomes its remote claim in the twin namespace.
//
// RemotePod never modifies local, and its output depends only on its inputs.
func RemotePod(local *corev1.Pod, o Origin) (*corev1.Pod, error) {
	spec, err := remoteSpec(local, o)
	if err != nil {
		return nil, err
	}
	spec.EphemeralContainers = nil
	remote := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: remotePodMeta(local, o),
		Spec:       *spec,
	}
	return remote, nil
}

// remoteSpec is the spec of local's remote pod, ephemeral containers
// included, or why local cannot be offloaded.
func remoteSpec(local *corev1.Pod, o Origin) (*corev1.PodSpec, error) {
	if reasons := notOffloadable(local, o); len(reasons) > 0 {
		return nil, &NotOffloadableError{Reasons: reasons}
	}
	spec := local.Spec.DeepCopy()
	if err := translateSpec(spec, local, o); err != nil {
		return nil, err
	}
	return spec, nil
}

// remotePodMeta is the metadata of the remote pod of local. Owner references
// and finalizers are left behind: the owners' UIDs do not exist on the
// provider, whose garbage collector would delete the pod at once, and no
// provider controller would ever remove a consumer finalizer.
func remotePodMeta(local *corev1.Pod, o Origin) metav1.ObjectMeta {
	labels := mergeLabels(local.Labels, o.originLabels())
	labels[offloadv1alpha1.LabelOriginPodUID] = string(local.UID)
	return metav1.ObjectMeta{
		Name:        local.Name,
		Namespace:   o.TwinNamespace,
		Labels:      labels,
		Annotations: remotePodAnnotations(local),
	}
}

// remotePodAnnotations copies local's annotations, and records the origin
// pod and the copied keys.
func remotePodAnnotations(local *corev1.Pod) map[string]string {
	out := make(map[string]string, len(local.Annotations)+2)
	keys := make([]string, 0, len(local.Annotations))
	for k, v := range local.Annotations {
		if k == AnnotationOriginPod || k == AnnotationReflectedAnnotations {
			continue
		}
		out[k] = v
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out[AnnotationOriginPod] = local.Namespace + "/" + local.Name
	if len(keys) > 0 {
		out[AnnotationReflectedAnnotations] = strings.Join(keys, ",")
	}
	return out
}

// notOffloadable lists why pod cannot run on the provider of o.
func notOffloadable(pod *corev1.Pod, o Origin) []string {
	var reasons []string
	if pod.Spec.HostNetwork {
		reasons = append(reasons, "it uses hostNetwork")
	}
	if pod.Spec.HostPID {
		reasons = append(reasons, "it uses hostPID")
	}
	if pod.Spec.HostIPC {
		reasons = append(reasons, "it uses hostIPC")
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.HostPath != nil:
			reasons = append(reasons, fmt.Sprintf("volume %q is a hostPath", v.Name))
		case v.PersistentVolumeClaim != nil:
			if _, ok := o.Claims[v.PersistentVolumeClaim.ClaimName]; !ok {
				why := o.ClaimProblems[v.PersistentVolumeClaim.ClaimName]
				if why == "" {
					why = fmt.Sprintf("claim %s is not storage of this provider (StorageClass %s)", v.PersistentVolumeClaim.ClaimName, offloadv1alpha1.StorageClassName)
				}
				reasons = append(reasons, fmt.Sprintf("volume %q: %s", v.Name, why))
			}
		case v.Projected != nil && !isServiceAccountVolume(v):
			for _, s := range v.Projected.Sources {
				if s.ServiceAccountToken != nil {
					reasons = append(reasons, fmt.Sprintf("volume %q projects a service-account token with its own audience or path", v.Name))
					break
				}
			}
		}
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		reasons = append(reasons, "it uses resource claims, and claims are not reflected")
	}
	forEachContainer(&pod.Spec, func(c *corev1.Container) {
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				reasons = append(reasons, fmt.Sprintf("container %q uses hostPort %d", c.Name, p.HostPort))
			}
		}
	})
	return reasons
}

// translateSpec rewrites spec, a copy of local's, for the provider.
func translateSpec(spec *corev1.PodSpec, local *corev1.Pod, o Origin) error {
	spec.NodeName = ""
	spec.SchedulingGates = nil
	spec.SchedulerName = ""
	spec.PriorityClassName = ""
	spec.Priority = nil
	spec.PreemptionPolicy = nil
	spec.Overhead = nil
	spec.ReadinessGates = nil
	spec.ServiceAccountName = DefaultServiceAccount
	spec.DeprecatedServiceAccount = DefaultServiceAccount
	spec.AutomountServiceAccountToken = ptr.To(false)
	spec.Tolerations = remoteTolerations(spec.Tolerations, o)
	spec.NodeSelector = remoteNodeSelector(spec.NodeSelector, o)
	if len(spec.NodeSelector) == 0 {
		spec.NodeSelector = nil
	}
	if err := translateAffinity(spec, local, o); err != nil {
		return err
	}
	spec.TopologySpreadConstraints = remoteTopologySpread(spec.TopologySpreadConstraints, o)
	addProviderPlacement(spec, o)
	translateServiceAccountVolumes(spec, o.ServiceAccountTokenSecret)
	for i := range spec.Volumes {
		if c := spec.Volumes[i].PersistentVolumeClaim; c != nil {
			c.ClaimName = o.Claims[c.ClaimName]
		}
	}
	translateDownwardEnv(spec, local, o)
	forEachContainer(spec, dropNetRaw)
	forEachContainer(spec, func(c *corev1.Container) { translateHandlerHosts(c, o.Addresses) })
	return nil
}

// translateHandlerHosts rewrites the hosts of c's probes and lifecycle
// hooks that are pod addresses as the consumer sees them (an offloaded
// pod's view, a consumer pod) to the addresses the provider's kubelet
// reaches them at (addrs.ProviderIP). Without a host, a probe or hook
// targets the pod's own address, which is right on any node; other hosts
// stay as they are.
func translateHandlerHosts(c *corev1.Container, addrs *Addresses) {
	if addrs == nil {
		return
	}
	var handlers []*corev1.ProbeHandler
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p != nil {
			handlers = append(handlers, &p.ProbeHandler)
		}
	}
	var hooks []*corev1.LifecycleHandler
	if l := c.Lifecycle; l != nil {
		hooks = append(hooks, l.PostStart, l.PreStop)
	}
	translate := func(host *string) {
		if *host == "" {
			return
		}
		if to, ok := addrs.ProviderIP(*host); ok && to != "" {
			*host = to
		}
	}
	for _, h := range handlers {
		if h.HTTPGet != nil {
			translate(&h.HTTPGet.Host)
		}
		if h.TCPSocket != nil {
			translate(&h.TCPSocket.Host)
		}
	}
	for _, h := range hooks {
		if h == nil {
			continue
		}
		if h.HTTPGet != nil {
			translate(&h.HTTPGet.Host)
		}
		if h.TCPSocket != nil {
			translate(&h.TCPSocket.Host)
		}
	}
}

// dropNetRaw drops the NET_RAW capability of c, which a provider's
// admission policy requires of its consumers' containers (raw sockets on
// the provider's network would forge packets), unless c asks for it: then
// the provider decides, and says why when it refuses.
func dropNetRaw(c *corev1.Container) {
	has := func(caps []corev1.Capability) bool {
		return slices.ContainsFunc(caps, func(x corev1.Capability) bool { return x == "NET_RAW" || x == "ALL" })
	}
	if c.SecurityContext != nil && c.SecurityContext.Capabilities != nil &&
		(has(c.SecurityContext.Capabilities.Add) || has(c.SecurityContext.Capabilities.Drop)) {
		return
	}
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	if c.SecurityContext.Capabilities == nil {
		c.SecurityContext.Capabilities = &corev1.Capabilities{}
	}
	c.SecurityContext.Capabilities.Drop = append(c.SecurityContext.Capabilities.Drop, "NET_RAW")
}

// forEachContainer calls f on every init, app and ephemeral container of
// spec.
func forEachContainer(spec *corev1.PodSpec, f func(*corev1.Container)) {
	for i := range spec.InitContainers {
		f(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		f(&spec.Containers[i])
	}
	for i := range spec.EphemeralContainers {
		f((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
}
