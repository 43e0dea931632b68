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

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
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
