package e2e

import (
	"context"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubectl-offload/kubectl-offload/internal/install"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// localServiceCIDR is the service range kwokctl gives local clusters.
const localServiceCIDR = localcluster.ServiceCIDR

func TestDetectReadsALocalClusterWithoutChangingIt(t *testing.T) {
	c := localcluster.StartClusters(t, localcluster.ClusterOptions{Name: "detect", FakeNodes: 2})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("an admin finds a generic cluster, its ServiceCIDR object and a loopback API server", func(t *testing.T) {
		d, err := install.Detect(ctx, c.Kube, c.Config.Host, "")
		if err != nil {
			t.Fatalf("Detect: %v", err)
		}
		if d.Provider != install.ProviderGeneric {
			t.Errorf("provider = %q (%s); want generic: kwok fake nodes carry no distribution markers", d.Provider, d.ProviderSource)
		}
		if d.ServiceCIDR != localServiceCIDR || d.ServiceCIDRSource != "ServiceCIDR kubernetes" {
			t.Errorf("service CIDR = %q (%s); want %s from the ServiceCIDR API", d.ServiceCIDR, d.ServiceCIDRSource, localServiceCIDR)
		}
		// Fake nodes are ignored and there is no kube-controller-manager pod.
		if d.PodCIDR != "" {
			t.Errorf("pod CIDR = %q (%s); want none detected", d.PodCIDR, d.PodCIDRSource)
		}
		if d.APIServerURL != c.Config.Host || !d.APIServerLoopback {
			t.Errorf("API server = %q, loopback %v (%s); want %s flagged as loopback", d.APIServerURL, d.APIServerLoopback, d.APIServerURLSource, c.Config.Host)
		}
		if d.ClusterName != "" {
			t.Errorf("cluster name = %q (%s); want none for a generic cluster", d.ClusterName, d.ClusterNameSource)
		}
		checkOnlyKubernetesService(ctx, t, c)
	})

	t.Run("an admin who names k3s gets its default pod CIDR where nothing better is found, said to be the default", func(t *testing.T) {
		d, err := install.Detect(ctx, c.Kube, c.Config.Host, install.ProviderK3s)
		if err != nil {
			t.Fatalf("Detect: %v", err)
		}
		if d.Provider != install.ProviderK3s || d.ProviderSource != "--provider" {
			t.Errorf("provider = %q (%s); want k3s from --provider", d.Provider, d.ProviderSource)
		}
		if d.PodCIDR != "10.42.0.0/16" || d.PodCIDRSource != "default for k3s" {
			t.Errorf("pod CIDR = %q (%s); want k3s's 10.42.0.0/16, the default for k3s", d.PodCIDR, d.PodCIDRSource)
		}
		if d.ServiceCIDR != localServiceCIDR || d.ServiceCIDRSource != "ServiceCIDR kubernetes" {
			t.Errorf("service CIDR = %q (%s); want %s from the ServiceCIDR API, before any default", d.ServiceCIDR, d.ServiceCIDRSource, localServiceCIDR)
		}
	})

	t.Run("a user who may not read ServiceCIDRs gets the service range from a dry run that creates nothing", func(t *testing.T) {
		kube := clientWithRules(ctx, t, c, "detect-prober",
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"create"}},
		)
		if _, err := kube.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("reading ServiceCIDR kubernetes as detect-prober: err = %v; want Forbidden", err)
		}
		d, err := install.Detect(ctx, kube, c.Config.Host, "")
		if err != nil {
			t.Fatalf("Detect: %v", err)
		}
		if d.ServiceCIDR != localServiceCIDR || d.ServiceCIDRSource != "dry-run Service probe" {
			t.Errorf("service CIDR = %q (%s); want %s from the dry-run probe", d.ServiceCIDR, d.ServiceCIDRSource, localServiceCIDR)
		}
		checkOnlyKubernetesService(ctx, t, c)
	})

	t.Run("a user who may not list nodes gets a Forbidden error", func(t *testing.T) {
		kube := clientWithRules(ctx, t, c, "detect-nobody")
		_, err := install.Detect(ctx, kube, c.Config.Host, "")
		if !apierrors.IsForbidden(err) {
			t.Errorf("Detect as a user without rights: err = %v; want Forbidden", err)
		}
	})
}

// checkOnlyKubernetesService fails t unless "kubernetes" is the only Service
// in the default namespace.
func checkOnlyKubernetesService(ctx context.Context, t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	svcs, err := c.Kube.CoreV1().Services(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing services: %v", err)
	}
	for _, s := range svcs.Items {
		if s.Name != "kubernetes" {
			t.Errorf("Service default/%s exists after detection; detection must create nothing", s.Name)
		}
	}
}

// clientWithRules returns a client that impersonates user, who is granted
// exactly rules cluster-wide, once the authorizer applies them.
func clientWithRules(ctx context.Context, t *testing.T, c *localcluster.Cluster, user string, rules ...rbacv1.PolicyRule) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) == 0 {
		return kube
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules}
	if _, err := c.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ClusterRole %s: %v", user, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := c.Kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ClusterRoleBinding %s: %v", user, err)
	}
	// The RBAC authorizer reads roles and bindings from informers: wait
	// until it allows every rule.
	attrs := make([]authorizationv1.ResourceAttributes, 0, len(rules))
	for _, r := range rules {
		attrs = append(attrs, authorizationv1.ResourceAttributes{Group: r.APIGroups[0], Resource: r.Resources[0], Verb: r.Verbs[0]})
	}
	framework.WaitAuthorized(t, cfg, attrs...)
	return kube
}
