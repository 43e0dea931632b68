package v1alpha1

// Condition types shared by the resources of this API.
const (
	// ConditionAuthenticated says the consumer exchanged its token for credentials.
	ConditionAuthenticated = "Authenticated"
	// ConditionOutgoingPeering says this cluster consumes the peer's resources.
	ConditionOutgoingPeering = "OutgoingPeering"
	// ConditionIncomingPeering says the peer consumes this cluster's resources.
	ConditionIncomingPeering = "IncomingPeering"
	// ConditionVirtualNodeReady says the virtual node for the peer is Ready.
	ConditionVirtualNodeReady = "VirtualNodeReady"
	// ConditionNetworkReady says the network tunnel to the peer is up.
	ConditionNetworkReady = "NetworkReady"
	// ConditionReady is the summary condition of Tenant, ResourceOffer,
	// NamespaceOffloading and RemoteNamespace.
	ConditionReady = "Ready"
)

// ConditionUnpeered is set on a ForeignCluster being deleted: False while the
// consumer's agent cannot get the provider to remove its tenant, with the
// reason in the message.
const ConditionUnpeered = "Unpeered"

// Finalizers and annotations of ForeignClusters.
const (
	// FinalizerUnpeer makes the consumer's agent ask the provider to remove
	// its tenant, and delete the peer's Secrets, before the ForeignCluster goes.
	FinalizerUnpeer = "offload.io/unpeer"
	// FinalizerVirtualNode makes the consumer's agent delete the virtual
	// node and its Lease before the ForeignCluster goes.
	FinalizerVirtualNode = "offload.io/virtual-node"
	// AnnotationForceUnpeer, set to "true", makes the agent skip the call to
	// the provider when the ForeignCluster is deleted (kubectl offload unpeer --force).
	AnnotationForceUnpeer = "offload.io/force-unpeer"
	// LabelIncomingOnly marks a ForeignCluster the provider's agent created
	// to record a consumer; it is deleted with the consumer's Tenant.
	LabelIncomingOnly = "offload.io/incoming-only"
)
