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
	// ConditionOfferRead, on a VirtualNode, says the provider's
	// ResourceOffer was read (the ForeignCluster's OutgoingPeering).
	ConditionOfferRead = "OfferRead"
	// ConditionCredentialsAccepted, on a VirtualNode, is False once the
	// provider answered the node 401 Unauthorized; the credentials
	// controller, which watches the VirtualNodes of its ForeignClusters,
	// then asks the provider whether the credentials were revoked.
	ConditionCredentialsAccepted = "CredentialsAccepted"
	// ConditionReady is the summary condition of Tenant, ResourceOffer,
	// NamespaceOffloading, RemoteNamespace and VirtualNode.
	ConditionReady = "Ready"
)

// ReasonUnauthorized is the reason of VirtualNodeReady=False when the
// provider answers the virtual node with 401 Unauthorized, and of
// Authenticated=False once the consumer's agent confirmed that the provider
// no longer accepts its credentials.
const ReasonUnauthorized = "Unauthorized"

// ReasonNetworkingDisabled is the reason of NetworkReady=False when the
// peering runs without the network fabric (spec.networking.disabled): the
// clusters share a network already, so nothing is broken.
const ReasonNetworkingDisabled = "NetworkingDisabled"

// The reasons of a Tunnel's Ready condition, which its gateway sets; the
// consumer's NetworkReady and kubectl offload status read them.
const (
	// ReasonTunnelConnected: the peer's gateway answers through the tunnel.
	ReasonTunnelConnected = "Connected"
	// ReasonTunnelDisconnected: the peer's gateway does not answer the
	// liveness probe through the tunnel.
	ReasonTunnelDisconnected = "Disconnected"
	// ReasonTunnelWaiting: the gateway waits for the peer's key, endpoint
	// and pod CIDRs.
	ReasonTunnelWaiting = "Waiting"
	// ReasonTunnelConfigurationFailed: the gateway cannot set up its
	// device, addresses, routes or rules.
	ReasonTunnelConfigurationFailed = "ConfigurationFailed"
)

// ConditionUnpeered is set on a ForeignCluster being deleted: False while the
// consumer's agent cannot get the provider to remove its tenant, with the
// reason in the message.
const ConditionUnpeered = "Unpeered"

// ConditionCredentialReplayed, on a Tenant, is True once a retired
// credential of the consumer was presented to the auth service: someone
// kept a copy. Every credential of the consumer is revoked then; peering
// again with a new token clears it.
const ConditionCredentialReplayed = "CredentialReplayed"

// Reasons of ConditionCredentialReplayed.
const (
	ReasonRetiredCredentialUsed = "RetiredCredentialUsed"
	ReasonPeeredAgain           = "PeeredAgain"
)

// A consumer's credentials are ServiceAccount tokens bound to a Secret of
// type CredentialSecretType in its tenant namespace, one per credential,
// named CredentialSecretPrefix plus a random suffix and labelled
// LabelCredential with the consumer's cluster ID: deleting the Secret
// revokes the token at once.
const (
	CredentialSecretType   = "offload.io/credential"
	CredentialSecretPrefix = "offload-credential-"
	LabelCredential        = "offload.io/credential"
)

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
	// FinalizerTenant makes the provider's agent revoke a consumer's
	// credentials and remove its tenant namespace, and everything the
	// consumer asked for in it, before the Tenant goes.
	FinalizerTenant = "offload.io/tenant"
	// FinalizerRemoteNamespace makes the provider's agent delete the twin
	// namespace before its RemoteNamespace goes.
	FinalizerRemoteNamespace = "offload.io/remote-namespace"
	// FinalizerNamespaceOffloading makes the consumer's agent release the
	// twin namespaces on every provider before a NamespaceOffloading goes.
	FinalizerNamespaceOffloading = "offload.io/namespace-offloading"
	// LabelIncomingOnly marks a ForeignCluster the provider's agent created
	// to record a consumer; it is deleted with the consumer's Tenant.
	LabelIncomingOnly = "offload.io/incoming-only"
)
