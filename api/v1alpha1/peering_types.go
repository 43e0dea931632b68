package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The children of a ForeignCluster on the consumer. Each is named after its
// ForeignCluster, is owned by it (it goes with it) and has one writer; the
// ForeignCluster's status is their summary, which only the summary
// controller writes.

// PeeringCredentialsSpec says where the credentials are kept.
type PeeringCredentialsSpec struct {
	// SecretName is the kubeconfig Secret in the agent's namespace that
	// holds the credentials the provider issued.
	SecretName string `json:"secretName"`
}

// PeeringCredentialsStatus is the state of the credentials exchange with
// the provider; the consumer's credentials controller writes it.
type PeeringCredentialsStatus struct {
	// Phase summarises the exchange (the ForeignCluster's AUTH column).
	// +optional
	Phase PeeringPhase `json:"phase,omitempty"`
	// Conditions are Authenticated and, while the ForeignCluster is
	// deleted, Unpeered.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Expiry is when the credentials expire; the agent renews them before.
	// +optional
	Expiry *metav1.Time `json:"expiry,omitempty"`
	// LastSeen is when the provider's auth service last answered.
	// +optional
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`
	// ObservedTokenID is the ID of the peering token the status answers
	// (the ForeignCluster's offload.io/peer-token-id annotation).
	// +optional
	ObservedTokenID string `json:"observedTokenID,omitempty"`
	// APIServerURL is the provider's API server as its credentials name it.
	// +optional
	APIServerURL string `json:"apiServerURL,omitempty"`
}

// PeeringCredentials are the credentials a consumer holds for one provider.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=offload
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Expiry",type=date,JSONPath=`.status.expiry`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PeeringCredentials struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PeeringCredentialsSpec `json:"spec,omitempty"`

	// Written by server-side apply: a writer that drops all of its fields
	// leaves a null status (kubernetes/kubernetes#117447).

	// +nullable
	Status PeeringCredentialsStatus `json:"status,omitempty"`
}

// PeeringCredentialsList is a list of PeeringCredentials.
// +kubebuilder:object:root=true
type PeeringCredentialsList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PeeringCredentials `json:"items"`
}

// VirtualNodeSpec is the virtual node a consumer runs for one provider.
type VirtualNodeSpec struct {
	// NodeName is the Node: offload-<peer>.
	NodeName string `json:"nodeName"`
	// CredentialsName names the PeeringCredentials the node reaches the
	// provider with.
	CredentialsName string `json:"credentialsName"`
	// ClusterID is the provider's cluster identity.
	ClusterID string `json:"clusterID"`
}

// VirtualNodeStatus is what the virtual node's runtime reports.
type VirtualNodeStatus struct {
	// Phase summarises the outgoing peering (the ForeignCluster's OUTGOING
	// column): Established once the provider's offer was read.
	// +optional
	Phase PeeringPhase `json:"phase,omitempty"`
	// Conditions are Ready (the node is Ready), OfferRead (the provider's
	// ResourceOffer was read) and CredentialsAccepted (False once the
	// provider answered 401 Unauthorized: the credentials controller
	// checks the credentials then).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastSeen is when the provider last answered the node.
	// +optional
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`
	// ProviderPolicy is what the provider lets this cluster's pods do
	// there, as its ResourceOffer says.
	// +optional
	ProviderPolicy *ConsumerPolicy `json:"providerPolicy,omitempty"`
}

// VirtualNode is the runtime of one provider's virtual node on a consumer.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=offload
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VirtualNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VirtualNodeSpec `json:"spec,omitempty"`

	// Written by server-side apply: a writer that drops all of its fields
	// leaves a null status (kubernetes/kubernetes#117447).

	// +nullable
	Status VirtualNodeStatus `json:"status,omitempty"`
}

// VirtualNodeList is a list of VirtualNodes.
// +kubebuilder:object:root=true
type VirtualNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualNode `json:"items"`
}

func init() {
	register(&PeeringCredentials{}, &PeeringCredentialsList{}, &VirtualNode{}, &VirtualNodeList{})
}
