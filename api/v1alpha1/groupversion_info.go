// Package v1alpha1 holds the offload.io/v1alpha1 API: the custom resources
// kubectl-offload's CLI writes as intent and its agent reconciles.
// +kubebuilder:object:generate=true
// +groupName=offload.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "offload.io", Version: "v1alpha1"}
	// SchemeBuilder registers the types of this API. It is apimachinery's,
	// so that importing the API needs nothing but apimachinery.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme

	// knownTypes are the types the type files register in their init.
	knownTypes []runtime.Object
)

// register adds objects to the types AddToScheme adds.
func register(objects ...runtime.Object) { knownTypes = append(knownTypes, objects...) }

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
