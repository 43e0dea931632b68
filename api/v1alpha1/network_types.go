package v1alpha1

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NetworkPeeringName is the name of the one NetworkPeering in a tenant
// namespace.
const NetworkPeeringName = "network"

// CIDRMapping is how one of a peer's real pod CIDRs is seen from a
// cluster: as a block of the same size from that cluster's remap pools.
type CIDRMapping struct {
	// Real is the peer's pod CIDR.
	Real string `json:"real"`
	// View is the same addresses as this cluster sees them.
	View string `json:"view"`
}

// NetworkPeeringSpec is what the consumer tells the provider about its side
// of the tunnel.
type NetworkPeeringSpec struct {
	// ClusterID is the consumer's cluster identity.
	ClusterID string `json:"clusterID"`
	// PublicKey is the consumer gateway's WireGuard public key (base64).
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{43}=$`
	PublicKey string `json:"publicKey"`
	// PodCIDRs are the consumer's real pod CIDRs.
	// +kubebuilder:validation:MinItems=1
	PodCIDRs []string `json:"podCIDRs"`
	// MTU is the tunnel MTU the consumer's path allows; 0 until its gateway
	// measured it.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MTU int32 `json:"mtu,omitempty"`
	// ProviderViews are how the consumer sees the provider's pod CIDRs: the
	// addresses it shows for its offloaded pods. The provider may mirror
	// them, so that its pods reach each other at those addresses too;
	// it checks them first, as hostile input.
	// +kubebuilder:validation:MaxItems=8
	// +optional
	ProviderViews []CIDRMapping `json:"providerViews,omitempty"`
}

// NetworkPeeringStatus is the provider's side of the tunnel.
type NetworkPeeringStatus struct {
	// PublicKey is the provider gateway's WireGuard public key.
	// +optional
	PublicKey string `json:"publicKey,omitempty"`
	// Endpoint is host:port where the consumer's gateway dials the provider's.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// PodCIDRs are the provider's real pod CIDRs.
	// +optional
	PodCIDRs []string `json:"podCIDRs,omitempty"`
	// ConsumerViews are how the provider sees the consumer's pod CIDRs:
	// addresses the consumer puts into objects it reflects to the provider
	// are translated into these.
	// +optional
	ConsumerViews []CIDRMapping `json:"consumerViews,omitempty"`
	// MTU is the MTU both gateways use: the smaller of the two proposals.
	// +optional
	MTU int32 `json:"mtu,omitempty"`
	// Conditions has Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NetworkPeering lives in the consumer's tenant namespace on the provider:
// the exchange of keys, endpoints, pod CIDRs and MTU over the peering's
// authenticated channel. The consumer writes the spec, the provider the
// status. Neither side can write the other's ForeignCluster.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=offload
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="MTU",type=integer,JSONPath=`.status.mtu`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NetworkPeering struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NetworkPeeringSpec   `json:"spec,omitempty"`
	Status NetworkPeeringStatus `json:"status,omitempty"`
}

// NetworkPeeringList is a list of NetworkPeerings.
// +kubebuilder:object:root=true
type NetworkPeeringList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NetworkPeering `json:"items"`
}

// TunnelRole is which end of a tunnel a cluster is.
// +kubebuilder:validation:Enum=Server;Client
type TunnelRole string

// The tunnel roles.
const (
	// TunnelServer is the provider's end: it listens.
	TunnelServer TunnelRole = "Server"
	// TunnelClient is the consumer's end: it dials, so it works behind NAT.
	TunnelClient TunnelRole = "Client"
)

// TunnelSpec is one gateway's configuration.
type TunnelSpec struct {
	// ClusterID is the peer's cluster identity.
	ClusterID string `json:"clusterID"`
	// ClusterName is the peer's cluster name.
	ClusterName string `json:"clusterName"`
	// Role is this cluster's end of the tunnel.
	Role TunnelRole `json:"role"`
	// PeerPublicKey is the peer gateway's WireGuard public key.
	// +optional
	PeerPublicKey string `json:"peerPublicKey,omitempty"`
	// Endpoint is host:port of the server; set on the client.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// MTU is the tunnel MTU both ends use; 0 until the peers agree.
	// +optional
	MTU int32 `json:"mtu,omitempty"`
	// LocalPodCIDRs are this cluster's real pod CIDRs.
	LocalPodCIDRs []string `json:"localPodCIDRs"`
	// Mappings are this cluster's views of the peer's pod CIDRs. They are
	// allocated once and kept here, so restarts never renumber.
	// +optional
	Mappings []CIDRMapping `json:"mappings,omitempty"`
	// PeerViews are how the peer sees this cluster's pod CIDRs, as it said:
	// on the client, addresses this cluster reflects to the peer are
	// translated into them; on the server, they are the consumer's views
	// that passed the provider's checks, which its gateway mirrors (a local
	// pod calling one reaches the local pod behind it).
	// +optional
	PeerViews []CIDRMapping `json:"peerViews,omitempty"`
	// AllowedDestinations are the local pod addresses (CIDRs) the peer may
	// open connections to: on the server, the pods of the consumer's twin
	// namespaces. Empty allows every local pod.
	// +optional
	AllowedDestinations []string `json:"allowedDestinations,omitempty"`
}

// RoutedViews are the views this cluster routes to Tunnel t's gateway: its
// views of the peer's pods and, on the server, the consumer's views of
// this cluster's pods, which the gateway mirrors back to them.
func (t *Tunnel) RoutedViews() []CIDRMapping {
	if t.Spec.Role == TunnelServer {
		return slices.Concat(t.Spec.Mappings, t.Spec.PeerViews)
	}
	return t.Spec.Mappings
}

// TunnelStatus has two writers, each with its own fields: the gateway
// reports the data path (everything but phase and NetworkReady, field
// manager offload-gateway), and the network controller, which keeps the
// Tunnel, reports the peering's network as a whole (phase and
// NetworkReady, field manager offload-network), which the ForeignCluster's
// status mirrors.
type TunnelStatus struct {
	// Phase is the peering's network as the network controller sees it,
	// from the exchange with the peer and the gateway's report: the
	// ForeignCluster's NETWORK column.
	// +optional
	Phase PeeringPhase `json:"phase,omitempty"`
	// Implementation is the WireGuard device that runs: kernel or userspace.
	// +optional
	Implementation string `json:"implementation,omitempty"`
	// PublicKey is this gateway's WireGuard public key.
	// +optional
	PublicKey string `json:"publicKey,omitempty"`
	// Endpoint is the peer's address as the tunnel last saw it.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// LastHandshake is the last completed WireGuard handshake.
	// +optional
	LastHandshake *metav1.Time `json:"lastHandshake,omitempty"`
	// RxBytes and TxBytes count what crossed the tunnel.
	// +optional
	RxBytes int64 `json:"rxBytes,omitempty"`
	// +optional
	TxBytes int64 `json:"txBytes,omitempty"`
	// RxPackets and TxPackets count the packets that crossed the tunnel:
	// received from the peer and sent to it, as the tunnel device counts
	// them. The userspace device counts TCP segments it coalesces (GRO and
	// GSO) as one packet, so its counts can be far below the number of
	// WireGuard packets.
	// +optional
	RxPackets int64 `json:"rxPackets,omitempty"`
	// +optional
	TxPackets int64 `json:"txPackets,omitempty"`
	// FilteredPackets counts the packets the tenant filter dropped, both
	// ways: traffic through the tunnel that the peering does not allow.
	// +optional
	FilteredPackets int64 `json:"filteredPackets,omitempty"`
	// Connected says the peer answered the liveness probe within 10 s.
	// +optional
	Connected bool `json:"connected,omitempty"`
	// PathMTU is the tunnel MTU this side's path allows: the egress MTU
	// toward the peer minus the tunnel's overhead. The peers use the
	// smaller of their two.
	// +optional
	PathMTU int32 `json:"pathMTU,omitempty"`
	// MTU is the MTU the device runs with.
	// +optional
	MTU int32 `json:"mtu,omitempty"`
	// Conditions has Ready, the gateway's (the peer answers through the
	// tunnel), and NetworkReady, the network controller's (the peering's
	// network works, or why not).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Tunnel is one end of the network tunnel to one peer, in the install
// namespace: the configuration its gateway runs with and what the gateway
// reports.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=offload
// +kubebuilder:printcolumn:name="Peer",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.spec.role`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Connected",type=boolean,JSONPath=`.status.connected`
// +kubebuilder:printcolumn:name="Handshake",type=date,JSONPath=`.status.lastHandshake`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Tunnel struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TunnelSpec `json:"spec,omitempty"`

	// Written by server-side apply: a writer that drops all of its fields
	// leaves a null status (kubernetes/kubernetes#117447).

	// +nullable
	Status TunnelStatus `json:"status,omitempty"`
}

// TunnelList is a list of Tunnels.
// +kubebuilder:object:root=true
type TunnelList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Tunnel `json:"items"`
}

func init() {
	register(&NetworkPeering{}, &NetworkPeeringList{}, &Tunnel{}, &TunnelList{})
}
