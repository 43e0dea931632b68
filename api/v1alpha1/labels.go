package v1alpha1

// Labels of offloaded namespaces and reflected objects.
const (
	// LabelOffloaded, set to "true" on a consumer namespace by the agent
	// while a NamespaceOffloading asks for it, selects the namespaces whose
	// pods the scheduling webhook sees.
	LabelOffloaded = "offload.io/offloaded"
	// LabelOriginClusterID is the consumer's cluster ID on every object the
	// consumer's agent reflects into a provider.
	LabelOriginClusterID = "offload.io/origin-cluster-id"
	// LabelOriginPodUID is the UID of the consumer pod a remote pod reflects.
	LabelOriginPodUID = "offload.io/origin-pod-uid"
	// LabelOriginClaimUID is the UID of the consumer claim a remote claim
	// backs (StorageProvisioner).
	LabelOriginClaimUID = "offload.io/origin-claim-uid"
	// LabelOriginNamespace is the consumer namespace a twin namespace mirrors.
	LabelOriginNamespace = "offload.io/origin-namespace"
	// LabelReflect, set to "true" on a ConfigMap or Secret of an offloaded
	// namespace, copies it to the providers even when no offloaded pod
	// references it. Without it, only what offloaded pods reference leaves
	// the consumer.
	LabelReflect = "offload.io/reflect"
)

// Annotations of DaemonSets on a consumer. A DaemonSet whose pods tolerate
// the virtual-node taint (those that tolerate every taint: CNI agents, log
// shippers, kube-proxy) would get a pod on every virtual node; while this
// cluster has virtual nodes, the agent keeps such DaemonSets off them with
// a required node affinity, unless they opt in.
const (
	// AnnotationVirtualNodes, set to VirtualNodesAllowed on a DaemonSet,
	// lets its pods run on virtual nodes, that is in the providers.
	AnnotationVirtualNodes = "offload.io/virtual-nodes"
	// VirtualNodesAllowed is the value of AnnotationVirtualNodes that opts in.
	VirtualNodesAllowed = "allowed"
	// AnnotationVirtualNodesExcluded, set to "true" by the agent, marks a
	// DaemonSet whose pod template the agent gave the node affinity
	// requirement that keeps it off virtual nodes, so that the agent takes
	// it out again, and only it, once there are no virtual nodes.
	AnnotationVirtualNodesExcluded = "offload.io/virtual-nodes-excluded"
)
