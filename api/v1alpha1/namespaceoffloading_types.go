package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NamespaceMappingStrategy chooses the name of twin namespaces.
// +kubebuilder:validation:Enum=DefaultName;EnforceSameName
type NamespaceMappingStrategy string

// The namespace mapping strategies.
const (
	// DefaultName names the twin namespace NS-<consumer>-<hash6>.
	DefaultName NamespaceMappingStrategy = "DefaultName"
	// EnforceSameName names the twin namespace NS, and fails if it is taken.
	EnforceSameName NamespaceMappingStrategy = "EnforceSameName"
)

// PodOffloadingStrategy chooses where the pods of an offloaded namespace may run.
// +kubebuilder:validation:Enum=LocalAndRemote;Remote;Local
type PodOffloadingStrategy string

// The pod offloading strategies.
const (
	LocalAndRemote PodOffloadingStrategy = "LocalAndRemote"
	Remote         PodOffloadingStrategy = "Remote"
	Local          PodOffloadingStrategy = "Local"
)

// NamespaceOffloadingName is the name of the singleton NamespaceOffloading in a namespace.
const NamespaceOffloadingName = "offloading"

// NamespaceOffloadingSpec asks for a namespace to span peers.
type NamespaceOffloadingSpec struct {
	// NamespaceMappingStrategy chooses the twin namespace names.
	// +kubebuilder:default=DefaultName
	// +optional
	NamespaceMappingStrategy NamespaceMappingStrategy `json:"namespaceMappingStrategy,omitempty"`
	// PodOffloadingStrategy chooses where pods may run.
	// +kubebuilder:default=LocalAndRemote
	// +optional
	PodOffloadingStrategy PodOffloadingStrategy `json:"podOffloadingStrategy,omitempty"`
	// ClusterSelector selects peers by the labels of their virtual nodes; empty selects all.
	// +optional
	ClusterSelector *corev1.NodeSelector `json:"clusterSelector,omitempty"`
}

// RemoteNamespacePhase is the state of a twin namespace.
// +kubebuilder:validation:Enum=Pending;Ready;Failed;Terminating
type RemoteNamespacePhase string

// The twin namespace phases.
const (
	RemoteNamespacePending     RemoteNamespacePhase = "Pending"
	RemoteNamespaceReady       RemoteNamespacePhase = "Ready"
	RemoteNamespaceFailed      RemoteNamespacePhase = "Failed"
	RemoteNamespaceTerminating RemoteNamespacePhase = "Terminating"
)

// RemoteNamespaceStatus is the state of the twin namespace in one peer.
type RemoteNamespaceStatus struct {
	// ClusterID is the peer's identity.
	ClusterID string `json:"clusterID"`
	// ClusterName is the peer's name.
	ClusterName string `json:"clusterName"`
	// RemoteNamespace is the twin namespace's name in the peer.
	RemoteNamespace string `json:"remoteNamespace"`
	// Phase is the twin namespace's state.
	Phase RemoteNamespacePhase `json:"phase"`
	// Message explains a Failed phase.
	// +optional
	Message string `json:"message,omitempty"`
}

// NamespaceOffloadingStatus is the observed state of an offloaded namespace.
type NamespaceOffloadingStatus struct {
	// RemoteNamespaces has one entry per selected peer.
	// +optional
	// +listType=map
	// +listMapKey=clusterID
	RemoteNamespaces []RemoteNamespaceStatus `json:"remoteNamespaces,omitempty"`
	// Conditions has Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NamespaceOffloading makes its namespace span peers. It is a singleton named "offloading".
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=offload
// +kubebuilder:printcolumn:name="Mapping",type=string,JSONPath=`.spec.namespaceMappingStrategy`
// +kubebuilder:printcolumn:name="Pods",type=string,JSONPath=`.spec.podOffloadingStrategy`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'offloading'",message="a NamespaceOffloading must be named offloading"
type NamespaceOffloading struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NamespaceOffloadingSpec   `json:"spec,omitempty"`
	Status NamespaceOffloadingStatus `json:"status,omitempty"`
}

// NamespaceOffloadingList is a list of NamespaceOffloadings.
// +kubebuilder:object:root=true
type NamespaceOffloadingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NamespaceOffloading `json:"items"`
}

// RemoteNamespaceSpec asks a provider for a twin namespace.
type RemoteNamespaceSpec struct {
	// ConsumerClusterID is the identity of the consumer asking.
	ConsumerClusterID string `json:"consumerClusterID"`
	// SourceNamespace is the namespace on the consumer.
	SourceNamespace string `json:"sourceNamespace"`
	// TargetNamespace is the twin namespace to create on the provider.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	TargetNamespace string `json:"targetNamespace"`
	// MappingStrategy is the strategy that chose TargetNamespace.
	// +optional
	MappingStrategy NamespaceMappingStrategy `json:"mappingStrategy,omitempty"`
}

// RemoteNamespaceObservedStatus is the observed state of a twin namespace on the provider.
type RemoteNamespaceObservedStatus struct {
	// Phase is the twin namespace's state.
	// +optional
	Phase RemoteNamespacePhase `json:"phase,omitempty"`
	// Conditions has Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RemoteNamespace lives in a tenant namespace on the provider and asks for a
// twin namespace, with a RoleBinding for the consumer and a ResourceQuota.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=offload
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.sourceNamespace`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetNamespace`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RemoteNamespace struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RemoteNamespaceSpec           `json:"spec,omitempty"`
	Status RemoteNamespaceObservedStatus `json:"status,omitempty"`
}

// RemoteNamespaceList is a list of RemoteNamespaces.
// +kubebuilder:object:root=true
type RemoteNamespaceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RemoteNamespace `json:"items"`
}

func init() {
	register(&NamespaceOffloading{}, &NamespaceOffloadingList{}, &RemoteNamespace{}, &RemoteNamespaceList{})
}
