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
	// LabelOriginNamespace is the consumer namespace a twin namespace mirrors.
	LabelOriginNamespace = "offload.io/origin-namespace"
	// LabelReflect, set to "true" on a ConfigMap or Secret of an offloaded
	// namespace, copies it to the providers even when no offloaded pod
	// references it. Without it, only what offloaded pods reference leaves
	// the consumer.
	LabelReflect = "offload.io/reflect"
)
