package charts_test

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// In its own namespace, the auth service's identity reads no Secret but the
// auth CA (this cluster's peer kubeconfigs and gateway keys are there),
// creates only the CA, spends peering tokens without changing what they
// grant, and claims cluster IDs without touching the agents' other Leases.
func TestTheAuthServiceSpendsTokensAndReadsNoSecretOfItsNamespace(t *testing.T) {
	s := enforcedAuthPolicy(t)
	ctx, admin, auth, ns := t.Context(), s.admin, s.auth, s.release
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	dryUpdate := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}

	kubeconfig := "offload-peer-" + rand.String(5) + "-kubeconfig"
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: kubeconfig},
		StringData: map[string]string{"kubeconfig": "credentials for a provider"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := peering.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	token, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, peering.NewTokenConfigMap(ns, tok, peering.TokenOptions{Expires: time.Now().Add(time.Hour)}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	identity, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.IdentityConfigMap},
		Data: map[string]string{"clusterID": "a", "clusterName": "b"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leader, err := admin.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "offload-controller-manager"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	forbidden := func(t *testing.T, err error, policy bool) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Fatalf("got %v, want it forbidden", err)
		}
		if by := strings.Contains(err.Error(), authPolicyName); by != policy {
			t.Errorf("refused by the policy: %v, want %v (%v)", by, policy, err)
		}
	}
	for name, do := range map[string]func(context.Context, kubernetes.Interface) error{
		"reading a peer kubeconfig": func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets(ns).Get(ctx, kubeconfig, metav1.GetOptions{})
			return err
		},
		"listing the namespace's Secrets": func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			return err
		},
		"creating a ConfigMap (a token of its own)": func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, peering.NewTokenConfigMap(ns, peering.Token{ID: "planted", Secret: "x"}, peering.TokenOptions{Expires: time.Now().Add(time.Hour)}), dry)
			return err
		},
	} {
		t.Run(name+" is refused by RBAC", func(t *testing.T) { forbidden(t, do(ctx, auth), false) })
	}

	spend := func(c *corev1.ConfigMap) {
		c.Data[peering.UsedByKey], c.Data[peering.UsedAtKey] = "consumer", time.Now().UTC().Format(time.RFC3339)
	}
	for name, do := range map[string]func(context.Context, kubernetes.Interface) error{
		"creating another Secret in its namespace": func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "planted"}}, dry)
			return err
		},
		"making a token privileged": func(ctx context.Context, c kubernetes.Interface) error {
			cm := token.DeepCopy()
			cm.Data[peering.PodSecurityKey] = string(offloadv1alpha1.PodSecurityPrivileged)
			_, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, dryUpdate)
			return err
		},
		"spending a token and extending it": func(ctx context.Context, c kubernetes.Interface) error {
			cm := token.DeepCopy()
			spend(cm)
			cm.Data[peering.ExpirationKey] = time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
			_, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, dryUpdate)
			return err
		},
		"binding a token to a consumer": func(ctx context.Context, c kubernetes.Interface) error {
			cm := token.DeepCopy()
			cm.Data[peering.ConsumerKey] = "victim"
			_, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, dryUpdate)
			return err
		},
		"changing the cluster identity": func(ctx context.Context, c kubernetes.Interface) error {
			cm := identity.DeepCopy()
			cm.Data["clusterID"] = "stolen"
			_, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, dryUpdate)
			return err
		},
		"taking the controller-manager's leader Lease": func(ctx context.Context, c kubernetes.Interface) error {
			l := leader.DeepCopy()
			l.Spec.HolderIdentity = new("offload-auth")
			_, err := c.CoordinationV1().Leases(ns).Update(ctx, l, dryUpdate)
			return err
		},
	} {
		t.Run(name+" is refused by the policy", func(t *testing.T) { forbidden(t, do(ctx, auth), true) })
	}

	t.Run("what the auth service does is admitted", func(t *testing.T) {
		if _, err := auth.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.AuthCASecret}}, dry); err != nil {
			t.Errorf("creating the auth CA: %v", err)
		}
		if _, err := auth.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "offload-cluster-id-0123456789abcdef0123"}}, dry); err != nil {
			t.Errorf("claiming a cluster ID: %v", err)
		}
		got, err := auth.CoreV1().ConfigMaps(ns).Get(ctx, token.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spend(got)
		spent, err := auth.CoreV1().ConfigMaps(ns).Update(ctx, got, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("spending a token: %v", err)
		}
		unspent := spent.DeepCopy()
		delete(unspent.Data, peering.UsedAtKey)
		delete(unspent.Data, peering.UsedByKey)
		_, err = auth.CoreV1().ConfigMaps(ns).Update(ctx, unspent, dryUpdate)
		forbidden(t, err, true)
		if err := auth.CoreV1().ConfigMaps(ns).Delete(ctx, token.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("removing a token: %v", err)
		}
	})
}

// The auth service's identity writes no Tenant policy: it makes Tenants with
// the pending policy and the name of their peering token, and the
// controller-manager gives them the token's policy.
func TestTheAuthServiceWritesNoTenantPolicy(t *testing.T) {
	s := enforcedAuthPolicy(t)
	admin := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, admin)
	auth := envtest.NewClient(t, s.authConfig)
	ctx := t.Context()
	name := "c" + rand.String(6)
	tenant := func(policy offloadv1alpha1.ConsumerPolicy) *offloadv1alpha1.Tenant {
		return &offloadv1alpha1.Tenant{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{offloadv1alpha1.AnnotationPeeringToken: "abc123"}},
			Spec:       offloadv1alpha1.TenantSpec{ClusterID: "id-" + name, ClusterName: name, TenantNamespace: offloadv1alpha1.TenantNamespace(name), Policy: policy},
		}
	}
	refused := func(t *testing.T, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), authPolicyName) || !strings.Contains(err.Error(), "writes no Tenant policy") {
			t.Fatalf("got %v, want it refused by %s", err, authPolicyName)
		}
	}
	for level, policy := range map[string]offloadv1alpha1.ConsumerPolicy{
		"privileged":                       {PodSecurity: offloadv1alpha1.PodSecurityPrivileged},
		"baseline":                         {PodSecurity: offloadv1alpha1.PodSecurityBaseline},
		"restricted with node placement":   {PodSecurity: offloadv1alpha1.PodSecurityRestricted, NodePlacement: true},
		"restricted with chosen nodes":     {PodSecurity: offloadv1alpha1.PodSecurityRestricted, NodeSelector: map[string]string{"pool": "a"}},
		"restricted, same-name namespaces": {PodSecurity: offloadv1alpha1.PodSecurityRestricted, SameNameNamespaces: true},
	} {
		t.Run("creating a "+level+" Tenant is refused", func(t *testing.T) {
			refused(t, auth.Create(ctx, tenant(policy), client.DryRunAll))
		})
	}
	t.Run("claiming the policy was adopted is refused", func(t *testing.T) {
		tn := tenant(offloadv1alpha1.PendingPolicy())
		tn.Annotations[offloadv1alpha1.AnnotationPolicyFromToken] = "abc123"
		refused(t, auth.Create(ctx, tn, client.DryRunAll))
	})
	created := tenant(offloadv1alpha1.PendingPolicy())
	if err := auth.Create(ctx, created); err != nil {
		t.Fatalf("creating a Tenant with the pending policy: %v", err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.WithoutCancel(ctx), created) })
	// The controller-manager (here the admin) gives it its token's policy.
	adopted := created.DeepCopy()
	adopted.Spec.Policy = offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline}
	adopted.Annotations[offloadv1alpha1.AnnotationPolicyFromToken] = "abc123"
	if err := admin.Update(ctx, adopted); err != nil {
		t.Fatal(err)
	}
	t.Run("changing a Tenant's policy is refused", func(t *testing.T) {
		u := adopted.DeepCopy()
		u.Spec.Policy.PodSecurity = offloadv1alpha1.PodSecurityPrivileged
		refused(t, auth.Update(ctx, u, client.DryRunAll))
	})
	t.Run("taking the adoption back, so that another token's policy is adopted unchecked, is refused", func(t *testing.T) {
		u := adopted.DeepCopy()
		delete(u.Annotations, offloadv1alpha1.AnnotationPolicyFromToken)
		refused(t, auth.Update(ctx, u, client.DryRunAll))
	})
	t.Run("naming the token of a new peering is admitted", func(t *testing.T) {
		u := adopted.DeepCopy()
		u.Annotations[offloadv1alpha1.AnnotationPeeringToken] = "def456"
		if err := auth.Update(ctx, u, client.DryRunAll); err != nil {
			t.Fatal(err)
		}
	})
}
