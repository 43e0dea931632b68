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
