package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PeeringRole is the role of this cluster towards a peer.
// +kubebuilder:validation:Enum=None;Consumer;Provider;ConsumerAndProvider
type PeeringRole string

// The peering roles.
const (
	RoleNone                PeeringRole = "None"
	RoleConsumer            PeeringRole = "Consumer"
	RoleProvider            PeeringRole = "Provider"
	RoleConsumerAndProvider PeeringRole = "ConsumerAndProvider"
)

// PeeringPhase summarises one direction of a peering, or the network or auth state.
// +kubebuilder:validation:Enum=None;Pending;Established;Failed;Disconnected
type PeeringPhase string

// The peering phases.
const (
	PhaseNone         PeeringPhase = "None"
	PhasePending      PeeringPhase = "Pending"
	PhaseEstablished  PeeringPhase = "Established"
	PhaseFailed       PeeringPhase = "Failed"
	PhaseDisconnected PeeringPhase = "Disconnected"
)

// OutgoingPeering configures whether this cluster consumes the peer's resources.
type OutgoingPeering struct {
	// Enabled asks for a virtual node backed by the peer.
	Enabled bool `json:"enabled"`
}

// Networking configures the network fabric toward a peer.
type Networking struct {
	// Disabled peers without the fabric, for clusters that already share a
	// flat network (Cilium ClusterMesh, Submariner, one routed LAN): no
	// gateway runs and no address is translated.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
}

// ForeignClusterSpec identifies a peer and how to reach it.
type ForeignClusterSpec struct {
	// ClusterID is the peer's cluster identity (a UUID).
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`
	ClusterID string `json:"clusterID"`
	// ClusterName is the peer's DNS-1123 cluster name.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ClusterName string `json:"clusterName"`
	// AuthURL is the HTTPS URL of the peer's auth service.
	// +optional
	AuthURL string `json:"authURL,omitempty"`
	// CACertHash pins the peer's auth CA: sha256:<hex of its SubjectPublicKeyInfo>.
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	// +optional
	CACertHash string `json:"caCertHash,omitempty"`
	// APIServerURL is the peer's API server as the peer advertises it. The
	// agent does not write it: status.apiServerURL is what the credentials
	// say.
	// +optional
	APIServerURL string `json:"apiServerURL,omitempty"`
	// OutgoingPeering says whether this cluster consumes the peer's resources.
	// +optional
	OutgoingPeering OutgoingPeering `json:"outgoingPeering,omitempty"`
	// Networking configures the network fabric toward the peer.
	// +optional
	Networking Networking `json:"networking,omitempty"`
}

// ForeignClusterStatus is the observed state of a peering: on the consumer,
// the summary of the ForeignCluster's children (PeeringCredentials,
// VirtualNode, Tunnel) and, on the provider, of the peer's Tenant. Only the
// summary controller writes it.
type ForeignClusterStatus struct {
	// Role is this cluster's role towards the peer.
	// +optional
	Role PeeringRole `json:"role,omitempty"`
	// Outgoing summarises the peering in which this cluster consumes.
	// +optional
	Outgoing PeeringPhase `json:"outgoing,omitempty"`
	// Incoming summarises the peering in which the peer consumes.
	// +optional
	Incoming PeeringPhase `json:"incoming,omitempty"`
	// Network summarises the network tunnel.
	// +optional
	Network PeeringPhase `json:"network,omitempty"`
	// Auth summarises the credentials exchange.
	// +optional
	Auth PeeringPhase `json:"auth,omitempty"`
	// Conditions are Authenticated, OutgoingPeering, IncomingPeering, VirtualNodeReady and NetworkReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastSeen is when the peer last answered.
	// +optional
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`
	// CredentialExpiry is when the credentials this cluster holds for the
	// peer expire; the agent rotates them before then.
	// +optional
	CredentialExpiry *metav1.Time `json:"credentialExpiry,omitempty"`
	// ProviderPolicy is what the peer, as a provider, lets this cluster's
	// pods do there, as its ResourceOffer says.
	// +optional
	ProviderPolicy *ConsumerPolicy `json:"providerPolicy,omitempty"`
	// ObservedTokenID is the ID of the peering token the status answers
	// (the offload.io/peer-token-id annotation the CLI sets).
	// +optional
	ObservedTokenID string `json:"observedTokenID,omitempty"`
	// APIServerURL is the peer's API server as the credentials it issued
	// name it.
	// +optional
	APIServerURL string `json:"apiServerURL,omitempty"`
}

// ForeignCluster is a peer cluster, on both sides of a peering.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=fc;fcs,categories=offload
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.status.role`
// +kubebuilder:printcolumn:name="Outgoing",type=string,JSONPath=`.status.outgoing`
// +kubebuilder:printcolumn:name="Incoming",type=string,JSONPath=`.status.incoming`
// +kubebuilder:printcolumn:name="Network",type=string,JSONPath=`.status.network`
// +kubebuilder:printcolumn:name="Auth",type=string,JSONPath=`.status.auth`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ForeignCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ForeignClusterSpec `json:"spec,omitempty"`

	// Written by server-side apply: a writer that drops all of its fields
	// leaves a null status (kubernetes/kubernetes#117447).

	// +nullable
	Status ForeignClusterStatus `json:"status,omitempty"`
}

// ForeignClusterList is a list of ForeignClusters.
// +kubebuilder:object:root=true
type ForeignClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ForeignCluster `json:"items"`
}

func init() {
	register(&ForeignCluster{}, &ForeignClusterList{})
}
