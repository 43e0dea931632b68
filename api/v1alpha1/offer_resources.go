package v1alpha1

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

// NotLent reports whether r is a resource a provider's nodes have that its
// ResourceOffers list at 0: extended resources (GPUs and other devices)
// and huge pages. The twin namespaces' quotas hold them at 0, so a
// tenant's pods never take one.
func NotLent(r corev1.ResourceName) bool {
	name := string(r)
	if strings.HasPrefix(name, corev1.ResourceHugePagesPrefix) {
		return true
	}
	domain, _, ok := strings.Cut(name, "/")
	return ok && domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io") && !strings.HasPrefix(name, "requests.")
}
