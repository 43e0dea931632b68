package tenant_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/provider/tenant"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// A Tenant gets the policy of the peering token that peered it, and only
// when the token was used by its cluster and, if bound, is bound to it:
// whoever writes the Tenant's token annotation (the auth service) cannot
// give it another token's policy.
func TestATenantGetsThePolicyOfTheTokenThatPeeredIt(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	ns := envtest.NewNamespace(t, c, "install")
	ctx := t.Context()
	granted := offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityPrivileged, NodeSelector: map[string]string{"pool": "a"}}

	for _, tc := range []struct {
		name    string
		token   func(tn *offloadv1alpha1.Tenant) peering.TokenOptions
		usedBy  func(tn *offloadv1alpha1.Tenant) string // "" leaves the token unused
		noToken bool
		adopted bool
	}{
		{name: "a token used by the tenant's cluster gives its policy", adopted: true,
			token: func(*offloadv1alpha1.Tenant) peering.TokenOptions { return peering.TokenOptions{} }, usedBy: clusterOf},
		{name: "a token bound to the tenant gives its policy", adopted: true,
			token: func(tn *offloadv1alpha1.Tenant) peering.TokenOptions { return peering.TokenOptions{Consumer: tn.Name} }, usedBy: clusterOf},
		{name: "a reusable token used since by another cluster gives its policy", adopted: true,
			token:  func(*offloadv1alpha1.Tenant) peering.TokenOptions { return peering.TokenOptions{Reusable: true} },
			usedBy: func(*offloadv1alpha1.Tenant) string { return "another-cluster" }},
		{name: "a token another cluster used gives nothing",
			token:  func(*offloadv1alpha1.Tenant) peering.TokenOptions { return peering.TokenOptions{} },
			usedBy: func(*offloadv1alpha1.Tenant) string { return "another-cluster" }},
		{name: "a token never used gives nothing",
			token:  func(*offloadv1alpha1.Tenant) peering.TokenOptions { return peering.TokenOptions{} },
			usedBy: func(*offloadv1alpha1.Tenant) string { return "" }},
		{name: "a token bound to another consumer gives nothing",
			token: func(*offloadv1alpha1.Tenant) peering.TokenOptions {
				return peering.TokenOptions{Consumer: "someone-else"}
			},
			usedBy: clusterOf},
		{name: "a token that is gone gives nothing", noToken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := &offloadv1alpha1.Tenant{
				ObjectMeta: metav1.ObjectMeta{Name: "consumer-" + rand.String(6)},
				Spec: offloadv1alpha1.TenantSpec{ClusterID: "id-" + rand.String(6), ClusterName: "consumer",
					TenantNamespace: "offload-tenant-x", Policy: offloadv1alpha1.PendingPolicy()},
			}
			tok := peering.Token{ID: rand.String(6), Secret: "0123456789abcdef"}
			tn.Annotations = map[string]string{offloadv1alpha1.AnnotationPeeringToken: tok.ID}
			if err := c.Create(ctx, tn); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Delete(ctx, tn) })
			if !tc.noToken {
				o := tc.token(tn)
				o.Expires, o.Policy = time.Now().Add(time.Hour), granted
				cm := peering.NewTokenConfigMap(ns, tok, o)
				if by := tc.usedBy(tn); by != "" {
					cm.Data[peering.UsedByKey], cm.Data[peering.UsedAtKey] = by, time.Now().UTC().Format(time.RFC3339)
				}
				if err := c.Create(ctx, cm); err != nil {
					t.Fatal(err)
				}
			}
			changed, err := tenant.AdoptTokenPolicy(ctx, c, c, ns, tn)
			if err != nil || !changed {
				t.Fatalf("AdoptTokenPolicy = %v, %v; want the token recorded", changed, err)
			}
			var got offloadv1alpha1.Tenant
			if err := c.Get(ctx, client.ObjectKeyFromObject(tn), &got); err != nil {
				t.Fatal(err)
			}
			want := offloadv1alpha1.PendingPolicy()
			if tc.adopted {
				want = granted
			}
			if !got.Spec.Policy.Equal(want) || got.Annotations[offloadv1alpha1.AnnotationPolicyFromToken] != tok.ID {
				t.Errorf("policy %+v, annotations %v; want %+v and the token recorded", got.Spec.Policy, got.Annotations, want)
			}
			// Once per token: the admin's later change stays.
			if changed, err := tenant.AdoptTokenPolicy(ctx, c, c, ns, &got); err != nil || changed {
				t.Errorf("AdoptTokenPolicy again = %v, %v; want nothing done", changed, err)
			}
		})
	}
}

func clusterOf(tn *offloadv1alpha1.Tenant) string { return tn.Spec.ClusterID }
