package v1alpha1

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// TenantBudgetName is the ResourceQuota of a tenant namespace: the auth
// service creates it, with TenantBudget, before it hands the consumer any
// credential. The provider's admin may change it; nothing overwrites it.
const TenantBudgetName = "offload-tenant-budget"

// TenantBudget caps what a consumer may create in its tenant namespace:
// RemoteNamespaces (each one a twin namespace with its own quota) and its
// one NetworkPeering.
func TenantBudget() corev1.ResourceList {
	return corev1.ResourceList{
		"count/remotenamespaces.offload.io": resource.MustParse("50"),
		"count/networkpeerings.offload.io":  resource.MustParse("1"),
	}
}

// Device reports whether r is a resource a pod asks for by count that a
// provider lends only by name: extended resources (GPUs and other devices)
// and huge pages. A ResourceOffer lists those its tenant's policy does not
// lend (ConsumerPolicy.Lends) at 0, and the twin namespaces' quotas hold
// them at 0, so a tenant's pods never take one.
func Device(r corev1.ResourceName) bool {
	name := string(r)
	if strings.HasPrefix(name, corev1.ResourceHugePagesPrefix) {
		return true
	}
	domain, _, ok := strings.Cut(name, "/")
	return ok && domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io") && !strings.HasPrefix(name, "requests.")
}

// ValidateExtendedResource checks that r names an extended resource a
// policy may lend: a qualified name with a domain outside kubernetes.io,
// such as nvidia.com/gpu. Huge pages are never lent.
func ValidateExtendedResource(r corev1.ResourceName) error {
	if errs := validation.IsQualifiedName(string(r)); len(errs) > 0 {
		return fmt.Errorf("%q is not a resource name: %s", r, strings.Join(errs, "; "))
	}
	if !Device(r) || strings.HasPrefix(string(r), corev1.ResourceHugePagesPrefix) {
		return fmt.Errorf("%q is not an extended resource: name one of the form vendor-domain/name, such as nvidia.com/gpu", r)
	}
	return nil
}

// SortedResourceNames returns names sorted, without duplicates, in a new slice.
func SortedResourceNames(names []corev1.ResourceName) []corev1.ResourceName {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}
