package charts_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

const endpointPolicyName = "offload-tenant-endpoints"

func endpointSlice(name string, addressType discoveryv1.AddressType, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: addressType,
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return s
}

// tenantIdentityIn makes a twin namespace of tenant "x" whose endpoint
// CIDRs annotation is cidrs (none when nil), and a client acting as that
// tenant's identity there, with the RBAC to write EndpointSlices.
func tenantIdentityIn(t *testing.T, admin kubernetes.Interface, cidrs *string) (string, kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "twin-", Labels: map[string]string{offloadv1alpha1.LabelTenant: "x"}}}
	if cidrs != nil {
		ns.Annotations = map[string]string{offloadv1alpha1.AnnotationEndpointCIDRs: *cidrs}
	}
	ns, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + offloadv1alpha1.TenantNamespacePrefix + "x:offload-consumer"
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "slices"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"create", "update", "get"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "slices"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "slices"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	if _, err := admin.RbacV1().Roles(ns.Name).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns.Name).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(envtest.APIServer(t))
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	tenant, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	framework.WaitAuthorized(t, cfg, authorizationv1.ResourceAttributes{Namespace: ns.Name, Verb: "create", Group: "discovery.k8s.io", Resource: "endpointslices"})
	return ns.Name, tenant
}

func TestTheTenantEndpointPolicyKeepsServicesPointingAtTheTenantsPods(t *testing.T) {
	admin := enforcedPolicy(t, endpointPolicyName)
	cidrs := "10.244.0.0/16,10.71.0.0/16"
	twin, tenant := tenantIdentityIn(t, admin, &cidrs)
	slices := tenant.DiscoveryV1().EndpointSlices(twin)
	// The policy and the RBAC reach the API server a moment after they
	// are written: the probe is refused by the policy once both hold.
	framework.Eventually(t, 30*time.Second, "the EndpointSlice policy is not enforced", func(ctx context.Context) bool {
		_, err := slices.Create(ctx, endpointSlice("probe", discoveryv1.AddressTypeIPv4, "172.18.0.2"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), endpointPolicyName)
	})

	for i, tc := range []struct {
		name      string
		slice     *discoveryv1.EndpointSlice
		inMessage string
	}{
		{"the provider's API server", endpointSlice("", discoveryv1.AddressTypeIPv4, "172.18.0.2"),
			"points at 172.18.0.2, outside what this provider lets its consumer's Services reach (10.244.0.0/16, 10.71.0.0/16)"},
		{"a node beside one of the tenant's pods", endpointSlice("", discoveryv1.AddressTypeIPv4, "10.244.1.5", "192.168.1.10"), "points at 192.168.1.10,"},
		{"a Service's cluster IP", endpointSlice("", discoveryv1.AddressTypeIPv4, "10.96.0.10"), "points at 10.96.0.10,"},
		{"an IPv6 address", endpointSlice("", discoveryv1.AddressTypeIPv6, "fd00::1"), "points at fd00::1,"},
		{"a name", endpointSlice("", discoveryv1.AddressTypeFQDN, "kubernetes.default.svc.cluster.local"), "addressType FQDN"},
	} {
		t.Run("an EndpointSlice pointing at "+tc.name+" is refused", func(t *testing.T) {
			tc.slice.Name = fmt.Sprintf("refused-%d", i)
			_, err := slices.Create(t.Context(), tc.slice, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.inMessage) {
				t.Fatalf("err = %v, want Forbidden with %q", err, tc.inMessage)
			}
			if _, err := admin.DiscoveryV1().EndpointSlices(twin).Get(t.Context(), tc.slice.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the EndpointSlice exists: %v", err)
			}
			// The cluster's own controllers are not the tenant.
			if _, err := admin.DiscoveryV1().EndpointSlices(twin).Create(t.Context(), tc.slice, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Errorf("the admin's identical EndpointSlice: %v", err)
			}
		})
	}

	t.Run("an EndpointSlice of the tenant's pods is admitted, and cannot be widened", func(t *testing.T) {
		s, err := slices.Create(t.Context(), endpointSlice("pods", discoveryv1.AddressTypeIPv4, "10.244.1.5", "10.71.3.4"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"172.18.0.2"}})
		if _, err := slices.Update(t.Context(), s, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "points at 172.18.0.2,") {
			t.Fatalf("widening: err = %v, want Forbidden", err)
		}
		got, err := admin.DiscoveryV1().EndpointSlices(twin).Get(t.Context(), "pods", metav1.GetOptions{})
		if err != nil || len(got.Endpoints) != 2 {
			t.Fatalf("after the refused update: %v, %v", got, err)
		}
	})

	t.Run("without the provider's list, no address is admitted", func(t *testing.T) {
		bare, tenant := tenantIdentityIn(t, admin, nil)
		_, err := tenant.DiscoveryV1().EndpointSlices(bare).Create(t.Context(), endpointSlice("pods", discoveryv1.AddressTypeIPv4, "10.244.1.5"), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "(nothing yet)") {
			t.Fatalf("err = %v, want Forbidden", err)
		}
		// A slice without endpoints (a Service with no pods yet) is fine.
		if _, err := tenant.DiscoveryV1().EndpointSlices(bare).Create(t.Context(), endpointSlice("empty", discoveryv1.AddressTypeIPv4), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
}
