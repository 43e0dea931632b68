package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TenantSpec identifies a consumer on the provider.
type TenantSpec struct {
	// ClusterID is the consumer's cluster identity.
	ClusterID string `json:"clusterID"`
	// ClusterName is the consumer's cluster name.
	ClusterName string `json:"clusterName"`
	// TenantNamespace is the namespace holding the consumer's ServiceAccount,
	// ResourceOffer and RemoteNamespaces: offload-tenant-<consumer-name>.
	TenantNamespace string `json:"tenantNamespace"`
	// Policy is what the consumer's pods may do on this cluster. It comes
	// from the peering token (peer generate --pod-security,
	// --allow-node-placement); the provider may change it here at any time.
	// +optional
	Policy ConsumerPolicy `json:"policy,omitempty"`
}

// TenantStatus is the observed state of a tenant.
type TenantStatus struct {
	// CredentialExpiry is when the consumer's current credentials expire.
	// +optional
	CredentialExpiry *metav1.Time `json:"credentialExpiry,omitempty"`
	// CurrentCredential is the Secret, in the tenant namespace, that the
	// consumer's newest credential is bound to. The tenant controller
	// deletes the credential Secrets of every older credential once a grace
	// period has passed since this one was issued, and their tokens stop
	// working with them.
	// +optional
	CurrentCredential string `json:"currentCredential,omitempty"`
	// Credentials are the credential Secrets not deleted yet, the current
	// one among them, in the order they were issued.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Credentials []IssuedCredential `json:"credentials,omitempty"`
	// RetiredCredentials are the UIDs of the Secrets of the last retired
	// credentials, oldest first. A refresh with one of them is a replay:
	// the credential was copied. Every credential of the consumer is then
	// revoked and CredentialReplayed says so.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	RetiredCredentials []string `json:"retiredCredentials,omitempty"`
	// Granted are the resources offered to the consumer.
	// +optional
	Granted corev1.ResourceList `json:"granted,omitempty"`
	// Conditions has Ready and CredentialReplayed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// IssuedCredential is a credential Secret of a consumer: its token is
// bound to it.
type IssuedCredential struct {
	// Name is the Secret's name, in the tenant namespace.
	Name string `json:"name"`
	// UID is the Secret's UID, which the token names.
	UID string `json:"uid"`
	// Issued is when the token was minted.
	Issued metav1.Time `json:"issued"`
}

// Tenant is the provider's record of one consumer.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=offload
// +kubebuilder:printcolumn:name="Consumer",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.tenantNamespace`
// +kubebuilder:printcolumn:name="Pod Security",type=string,JSONPath=`.spec.policy.podSecurity`
// +kubebuilder:printcolumn:name="Expires",type=date,JSONPath=`.status.credentialExpiry`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Tenant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TenantSpec   `json:"spec,omitempty"`
	Status TenantStatus `json:"status,omitempty"`
}

// TenantList is a list of Tenants.
// +kubebuilder:object:root=true
type TenantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Tenant `json:"items"`
}

// ResourceOfferSpec is what a provider lends to one consumer.
type ResourceOfferSpec struct {
	// ClusterID is the provider's cluster identity.
	ClusterID string `json:"clusterID"`
	// ClusterName is the provider's cluster name.
	ClusterName string `json:"clusterName"`
	// Resources are the cpu, memory, pods and devices lent: a share of the allocatable resources of the provider's nodes that serve the consumer (of what its pods leave free of them, with offerBasis free).
	Resources corev1.ResourceList `json:"resources"`
	// Policy is the tenant's policy, published for the consumer so that its
	// agent leaves out of the pods it sends what the provider would refuse.
	// +optional
	Policy ConsumerPolicy `json:"policy,omitempty"`
}

// ResourceOfferStatus is the observed state of an offer.
type ResourceOfferStatus struct {
	// LastUpdate is when the resources were last recomputed.
	// +optional
	LastUpdate *metav1.Time `json:"lastUpdate,omitempty"`
	// Conditions has Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ResourceOffer is published by the provider in a tenant namespace; the
// consumer's virtual node takes its capacity from it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=offload
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="CPU",type=string,JSONPath=`.spec.resources.cpu`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.spec.resources.memory`
// +kubebuilder:printcolumn:name="Pods",type=string,JSONPath=`.spec.resources.pods`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ResourceOffer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ResourceOfferSpec   `json:"spec,omitempty"`
	Status ResourceOfferStatus `json:"status,omitempty"`
}

// ResourceOfferList is a list of ResourceOffers.
// +kubebuilder:object:root=true
type ResourceOfferList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ResourceOffer `json:"items"`
}

func init() {
	register(&Tenant{}, &TenantList{}, &ResourceOffer{}, &ResourceOfferList{})
}
