package auth

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/provider/tenant"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

var (
	baselinePolicy   = offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline}
	restrictedPolicy = offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityRestricted}
	privilegedPolicy = offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityPrivileged, NodePlacement: true}
	sameNamePolicy   = offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline, SameNameNamespaces: true}
	everythingPolicy = offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityPrivileged, NodePlacement: true, SameNameNamespaces: true}
)

// policyToken stores a single-use token that grants policy.
func (e *peeringEnv) policyToken(t *testing.T, policy offloadv1alpha1.ConsumerPolicy) peering.Token {
	t.Helper()
	return e.tokenWith(t, peering.TokenOptions{Expires: time.Now().Add(time.Hour), Policy: policy})
}

// peerAndGetPolicy peers c with tok and returns its Tenant's policy, once
// the controller-manager gave it its token's (tenant.AdoptTokenPolicy, run
// here as the controller-manager runs it).
func (e *peeringEnv) peerAndGetPolicy(t *testing.T, tok peering.Token, c consumer) offloadv1alpha1.ConsumerPolicy {
	t.Helper()
	if r := e.post(t, peering.PeerPath, e.peerRequest(tok.String(), c), ""); r.status != http.StatusOK {
		t.Fatalf("peering %s: %d %s", c.name, r.status, r.body)
	}
	var t0 offloadv1alpha1.Tenant
	if err := e.admin.Get(context.Background(), client.ObjectKey{Name: c.name}, &t0); err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.AdoptTokenPolicy(context.Background(), e.admin, e.admin, e.namespace, &t0); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Get(context.Background(), client.ObjectKey{Name: c.name}, &t0); err != nil {
		t.Fatal(err)
	}
	return t0.Spec.Policy
}

func TestPeeringGivesTheTenantThePolicyOfTheToken(t *testing.T) {
	e := newPeeringEnv(t)
	tests := []struct {
		name  string
		token func(t *testing.T) peering.Token
		want  offloadv1alpha1.ConsumerPolicy
	}{
		{
			name:  "a token with the default policy gives baseline without node placement",
			token: func(t *testing.T) peering.Token { return e.newToken(t, time.Now().Add(time.Hour), false) },
			want:  baselinePolicy,
		},
		{
			name: "a token without the policy keys gives baseline without node placement or same-name namespaces",
			token: func(t *testing.T) peering.Token {
				return e.newTokenConfigMap(t, func(tok peering.Token) *corev1.ConfigMap {
					s := peering.NewTokenConfigMap(e.namespace, tok, peering.TokenOptions{Expires: time.Now().Add(time.Hour), Policy: everythingPolicy})
					delete(s.Data, peering.PodSecurityKey)
					delete(s.Data, peering.NodePlacementKey)
					delete(s.Data, peering.SameNameNamespacesKey)
					return s
				})
			},
			want: baselinePolicy,
		},
		{
			name:  "a restricted token gives restricted",
			token: func(t *testing.T) peering.Token { return e.policyToken(t, restrictedPolicy) },
			want:  restrictedPolicy,
		},
		{
			name:  "a privileged token with node placement gives both",
			token: func(t *testing.T) peering.Token { return e.policyToken(t, privilegedPolicy) },
			want:  privilegedPolicy,
		},
		{
			name:  "a token with same-name namespaces gives same-name namespaces",
			token: func(t *testing.T) peering.Token { return e.policyToken(t, sameNamePolicy) },
			want:  sameNamePolicy,
		},
		{
			name:  "a token allowing everything gives everything",
			token: func(t *testing.T) peering.Token { return e.policyToken(t, everythingPolicy) },
			want:  everythingPolicy,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := e.peerAndGetPolicy(t, tt.token(t), newConsumer()); !got.Equal(tt.want) {
				t.Errorf("the tenant's policy is %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestATokenWithAnUnknownPodSecurityLevelPeersNobody(t *testing.T) {
	e := newPeeringEnv(t)
	tok := e.newTokenConfigMap(t, func(tok peering.Token) *corev1.ConfigMap {
		s := peering.NewTokenConfigMap(e.namespace, tok, peering.TokenOptions{Expires: time.Now().Add(time.Hour)})
		s.Data[peering.PodSecurityKey] = "root"
		return s
	})
	c := newConsumer()
	e.post(t, peering.PeerPath, e.peerRequest(tok.String(), c), "").wantError(t, http.StatusUnauthorized, peering.ReasonInvalidToken)
	e.assertNothingFor(t, c)
}

func TestATokenWithAnInvalidSameNameNamespacesPeersNobody(t *testing.T) {
	e := newPeeringEnv(t)
	tok := e.newTokenConfigMap(t, func(tok peering.Token) *corev1.ConfigMap {
		s := peering.NewTokenConfigMap(e.namespace, tok, peering.TokenOptions{Expires: time.Now().Add(time.Hour)})
		s.Data[peering.SameNameNamespacesKey] = "yes"
		return s
	})
	c := newConsumer()
	e.post(t, peering.PeerPath, e.peerRequest(tok.String(), c), "").wantError(t, http.StatusUnauthorized, peering.ReasonInvalidToken)
	e.assertNothingFor(t, c)
}

func TestPeeringAgainWithATokenBoundToTheTenantGivesItThatTokensPolicy(t *testing.T) {
	e := newPeeringEnv(t)
	c := newConsumer()
	steps := []struct {
		name   string
		policy offloadv1alpha1.ConsumerPolicy
	}{
		{name: "the first peering, with a baseline token, gives baseline", policy: baselinePolicy},
		{name: "peering again with a privileged token makes the tenant privileged", policy: privilegedPolicy},
		{name: "peering again with a restricted token takes node placement away", policy: restrictedPolicy},
		{name: "peering again with a same-name token gives same-name namespaces", policy: sameNamePolicy},
		{name: "peering again with a baseline token takes same-name namespaces away", policy: baselinePolicy},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			tok := e.tokenWith(t, peering.TokenOptions{Expires: time.Now().Add(time.Hour), Policy: s.policy, Consumer: c.name})
			if got := e.peerAndGetPolicy(t, tok, c); !got.Equal(s.policy) {
				t.Errorf("the tenant's policy is %+v, want %+v", got, s.policy)
			}
		})
	}
	var list offloadv1alpha1.TenantList
	if err := e.admin.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tn := range list.Items {
		if tn.Spec.ClusterID == c.id {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d tenants for the consumer, want 1", n)
	}
}
