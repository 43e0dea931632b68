package auth

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// peered peers a new consumer and returns it with its credentials.
func (e *peeringEnv) peered(t *testing.T) (consumer, peering.Credentials) {
	t.Helper()
	c := newConsumer()
	r := e.post(t, peering.PeerPath, e.peerRequest(e.newToken(t, time.Now().Add(time.Hour), false).String(), c), "")
	if r.status != http.StatusOK {
		t.Fatalf("peering: %d %s", r.status, r.body)
	}
	return c, r.response(t).Credentials
}

func TestRefreshWithTheCurrentTokenIssuesANewWorkingToken(t *testing.T) {
	e := newPeeringEnv(t)
	c, cred := e.peered(t)
	time.Sleep(1100 * time.Millisecond) // so the new token's expiry differs

	r := e.post(t, peering.RefreshPath, peering.RefreshRequest{ClusterID: c.id}, cred.Token)
	if r.status != http.StatusOK {
		t.Fatalf("refresh: %d %s", r.status, r.body)
	}
	resp := r.response(t)
	fresh := resp.Credentials
	if fresh.Token == "" || fresh.Token == cred.Token || resp.ClusterID != e.clusterID || fresh.TenantNamespace != cred.TenantNamespace {
		t.Errorf("refresh returned %+v, want a new token for namespace %s", resp, cred.TenantNamespace)
	}
	if want := "system:serviceaccount:" + cred.TenantNamespace + ":" + offloadv1alpha1.ConsumerServiceAccount; e.reviewToken(t, fresh.Token) != want {
		t.Errorf("the refreshed token does not authenticate as %s", want)
	}
	var tenant offloadv1alpha1.Tenant
	if err := e.admin.Get(context.Background(), client.ObjectKey{Name: c.name}, &tenant); err != nil {
		t.Fatal(err)
	}
	if tenant.Status.CredentialExpiry == nil || !tenant.Status.CredentialExpiry.Time.Equal(fresh.ExpirationTimestamp) {
		t.Errorf("tenant credentialExpiry %v, want the refreshed %v", tenant.Status.CredentialExpiry, fresh.ExpirationTimestamp)
	}
}

func TestRefreshAndUnpeerRefuseWhatIsNotTheTenantsToken(t *testing.T) {
	e := newPeeringEnv(t)
	c, cred := e.peered(t)
	other, otherCred := e.peered(t)
	for _, path := range []string{peering.RefreshPath, peering.UnpeerPath} {
		for _, tt := range []struct {
			name   string
			body   any
			bearer string
			want   int
			reason string
		}{
			{"no Authorization header", peering.RefreshRequest{ClusterID: c.id}, "", http.StatusUnauthorized, peering.ReasonUnauthorized},
			{"a garbage token", peering.RefreshRequest{ClusterID: c.id}, "garbage", http.StatusUnauthorized, peering.ReasonUnauthorized},
			{"another tenant's token", peering.RefreshRequest{ClusterID: c.id}, otherCred.Token, http.StatusUnauthorized, peering.ReasonUnauthorized},
			{"the token with another cluster ID", peering.RefreshRequest{ClusterID: other.id}, cred.Token, http.StatusUnauthorized, peering.ReasonUnauthorized},
			{"a body that is not JSON", "{", cred.Token, http.StatusBadRequest, peering.ReasonMalformedRequest},
		} {
			t.Run(path+" with "+tt.name, func(t *testing.T) {
				r := e.post(t, path, tt.body, tt.bearer)
				r.wantError(t, tt.want, tt.reason)
				if strings.Contains(string(r.body), cred.Token) || strings.Contains(string(r.body), otherCred.Token) {
					t.Errorf("the error body repeats a token: %s", r.body)
				}
			})
		}
	}
	// A ServiceAccount token that authenticates, but is no tenant's.
	intruder := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: e.namespace}}
	mustCreate(t, e.admin, intruder)
	tr := &authenticationv1.TokenRequest{}
	if err := e.admin.SubResource("token").Create(context.Background(), intruder, tr); err != nil {
		t.Fatal(err)
	}
	e.remember(tr.Status.Token)
	e.post(t, peering.RefreshPath, peering.RefreshRequest{ClusterID: c.id}, tr.Status.Token).wantError(t, http.StatusUnauthorized, peering.ReasonUnauthorized)
	for _, n := range []string{c.name, other.name} {
		if err := e.admin.Get(context.Background(), client.ObjectKey{Name: n}, &offloadv1alpha1.Tenant{}); err != nil {
			t.Errorf("tenant %s after refused requests: %v", n, err)
		}
	}
}

func TestUnpeerDeletesTheTenantAndRevokesItsTokensAtOnce(t *testing.T) {
	e := newPeeringEnv(t)
	ctx := context.Background()
	c, cred := e.peered(t)
	r := e.post(t, peering.RefreshPath, peering.RefreshRequest{ClusterID: c.id}, cred.Token)
	if r.status != http.StatusOK {
		t.Fatalf("refresh: %d %s", r.status, r.body)
	}
	refreshed := r.response(t).Credentials.Token

	r = e.post(t, peering.UnpeerPath, peering.RefreshRequest{ClusterID: c.id}, cred.Token)
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "{}" {
		t.Fatalf("unpeer: %d %s, want 200 {}", r.status, r.body)
	}
	if err := e.admin.Get(ctx, client.ObjectKey{Name: c.name}, &offloadv1alpha1.Tenant{}); !apierrors.IsNotFound(err) {
		t.Errorf("the tenant is still there: %v", err)
	}
	var ns corev1.Namespace
	if err := e.admin.Get(ctx, client.ObjectKey{Name: cred.TenantNamespace}, &ns); err == nil && ns.DeletionTimestamp == nil {
		t.Error("the tenant namespace is not being deleted")
	}
	var sa corev1.ServiceAccount
	if err := e.admin.Get(ctx, client.ObjectKey{Namespace: cred.TenantNamespace, Name: offloadv1alpha1.ConsumerServiceAccount}, &sa); !apierrors.IsNotFound(err) {
		t.Errorf("the consumer's ServiceAccount is still there: %v", err)
	}
	// kube-apiserver caches successful token authentications for 10s, so
	// revocation takes effect within that.
	for _, tok := range []string{cred.Token, refreshed} {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			return e.reviewToken(t, tok) == "", nil
		})
		if err != nil {
			t.Errorf("a token of the unpeered tenant still authenticates as %s", e.reviewToken(t, tok))
		}
	}
	// The credentials are gone, so a repeated unpeer or refresh is refused.
	e.post(t, peering.UnpeerPath, peering.RefreshRequest{ClusterID: c.id}, cred.Token).wantError(t, http.StatusUnauthorized, peering.ReasonUnauthorized)
	e.post(t, peering.RefreshPath, peering.RefreshRequest{ClusterID: c.id}, refreshed).wantError(t, http.StatusUnauthorized, peering.ReasonUnauthorized)
}
