package auth

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/provider/tenant"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// retire runs the tenant controller once on consumer c, as the
// controller-manager does after every change of the Tenant, with no grace.
func (e *peeringEnv) retire(t *testing.T, c consumer) {
	t.Helper()
	r := &tenant.Reconciler{Client: e.admin, Reader: e.admin, Namespace: e.namespace, CredentialGrace: time.Nanosecond}
	// A conflict is retried, as the controller's queue does.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: c.name}})
		return err
	})
	if err != nil {
		t.Fatalf("tenant reconcile: %v", err)
	}
}

// waitRefused polls until token no longer authenticates: the API server
// caches a validated token for up to 10 s.
func (e *peeringEnv) waitRefused(t *testing.T, token, what string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return e.reviewToken(t, token) == "", nil
	})
	if err != nil {
		t.Fatalf("%s still authenticates", what)
	}
}

func TestARefreshRevokesThePreviousCredentialAndAReplayRevokesThemAll(t *testing.T) {
	e := newPeeringEnv(t)
	c, first := e.peered(t)
	r := e.post(t, peering.RefreshPath, peering.RefreshRequest{ClusterID: c.id}, first.Token)
	if r.status != http.StatusOK {
		t.Fatalf("refresh: %d %s", r.status, r.body)
	}
	second := r.response(t).Credentials
	var tn offloadv1alpha1.Tenant
	if err := e.admin.Get(context.Background(), client.ObjectKey{Name: c.name}, &tn); err != nil {
		t.Fatal(err)
	}
	if len(tn.Status.Credentials) != 2 || tn.Status.CurrentCredential != tn.Status.Credentials[1].Name {
		t.Fatalf("tenant credentials %+v, current %q; want two, the second current", tn.Status.Credentials, tn.Status.CurrentCredential)
	}

	// Within the grace period both work; once it is over the first is revoked.
	if e.reviewToken(t, first.Token) == "" {
		t.Fatal("the first credential stopped working before its grace period")
	}
	e.retire(t, c)
	e.waitRefused(t, first.Token, "the replaced credential")
	if e.reviewToken(t, second.Token) == "" {
		t.Fatal("the current credential was revoked with the replaced one")
	}

	// Someone kept the first credential and refreshes with it: refused,
	// and every credential of the consumer is revoked.
	e.post(t, peering.RefreshPath, peering.RefreshRequest{ClusterID: c.id}, first.Token).wantError(t, http.StatusUnauthorized, peering.ReasonUnauthorized)
	if err := e.admin.Get(context.Background(), client.ObjectKey{Name: c.name}, &tn); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(tn.Status.Conditions, offloadv1alpha1.ConditionCredentialReplayed) {
		t.Fatalf("tenant conditions %+v, want CredentialReplayed", tn.Status.Conditions)
	}
	e.retire(t, c)
	e.waitRefused(t, second.Token, "the current credential after a replay")
	e.post(t, peering.RefreshPath, peering.RefreshRequest{ClusterID: c.id}, second.Token).wantError(t, http.StatusUnauthorized, peering.ReasonUnauthorized)

	// A token anyone could hold does not clear the replay: the tenant is
	// the consumer's, and only its provider's admin can let it peer again.
	e.post(t, peering.PeerPath, e.peerRequest(e.newToken(t, time.Now().Add(time.Hour), true).String(), c), "").
		wantError(t, http.StatusConflict, peering.ReasonTenantExists)
	if err := e.admin.Get(context.Background(), client.ObjectKey{Name: c.name}, &tn); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(tn.Status.Conditions, offloadv1alpha1.ConditionCredentialReplayed) {
		t.Fatalf("an unbound token cleared CredentialReplayed: %+v", tn.Status.Conditions)
	}

	// Peering again with a token bound to the consumer starts afresh.
	again := e.post(t, peering.PeerPath, e.peerRequest(e.boundToken(t, c.name).String(), c), "")
	if again.status != http.StatusOK {
		t.Fatalf("peering again: %d %s", again.status, again.body)
	}
	if e.reviewToken(t, again.response(t).Credentials.Token) == "" {
		t.Error("the credential of the new peering does not authenticate")
	}
	if err := e.admin.Get(context.Background(), client.ObjectKey{Name: c.name}, &tn); err != nil {
		t.Fatal(err)
	}
	if meta.IsStatusConditionTrue(tn.Status.Conditions, offloadv1alpha1.ConditionCredentialReplayed) {
		t.Errorf("CredentialReplayed is still True after peering again: %+v", tn.Status.Conditions)
	}
}

func TestAForgedTokenNamingARetiredCredentialIsNoReplay(t *testing.T) {
	// A caller who never held a credential cannot know a retired Secret's
	// UID; one who names a made-up UID changes nothing.
	e := newPeeringEnv(t)
	c, cred := e.peered(t)
	claims := fmt.Sprintf(`{"kubernetes.io":{"namespace":%q,"secret":{"name":"offload-credential-x","uid":"%s"}}}`,
		cred.TenantNamespace, uuid.NewUUID())
	forged := "eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".x"
	e.post(t, peering.RefreshPath, peering.RefreshRequest{ClusterID: c.id}, forged).wantError(t, http.StatusUnauthorized, peering.ReasonUnauthorized)
	var tn offloadv1alpha1.Tenant
	if err := e.admin.Get(context.Background(), client.ObjectKey{Name: c.name}, &tn); err != nil {
		t.Fatal(err)
	}
	if meta.FindStatusCondition(tn.Status.Conditions, offloadv1alpha1.ConditionCredentialReplayed) != nil || e.reviewToken(t, cred.Token) == "" {
		t.Errorf("a forged token changed the tenant: %+v", tn.Status.Conditions)
	}
}

func TestUnverifiedBindingReadsOnlyWellFormedBoundTokens(t *testing.T) {
	for _, tc := range []struct {
		name, token string
		ok          bool
	}{
		{"a token bound to a Secret", "e30.eyJrdWJlcm5ldGVzLmlvIjp7Im5hbWVzcGFjZSI6Im9mZmxvYWQtdGVuYW50LXgiLCJzZWNyZXQiOnsibmFtZSI6ImEiLCJ1aWQiOiJiIn19fQ.x", true},
		{"a token bound to nothing", "e30.eyJrdWJlcm5ldGVzLmlvIjp7Im5hbWVzcGFjZSI6Im9mZmxvYWQtdGVuYW50LXgifX0.x", false},
		{"two parts", "e30.e30", false},
		{"not base64", "e30.!!!.x", false},
		{"not JSON", "e30.bm90IGpzb24.x", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, uid, ok := unverifiedBinding(tc.token)
			if ok != tc.ok || ok && (ns != "offload-tenant-x" || uid != "b") {
				t.Errorf("unverifiedBinding = %q, %q, %v; want ok=%v", ns, uid, ok, tc.ok)
			}
		})
	}
}
