// Package v1alpha1 holds the offload.io/v1alpha1 API: the custom resources
// kubectl-offload's CLI writes as intent and its agent reconciles.
// +kubebuilder:object:generate=true
// +groupName=offload.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "offload.io", Version: "v1alpha1"}
	// SchemeBuilder registers the types of this API.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion} //nolint:staticcheck // SA1019 since controller-runtime v0.25: moving to runtime.NewSchemeBuilder touches every API type file (issue 27)
	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
