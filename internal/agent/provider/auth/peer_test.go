package auth

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

func TestPeeringWithAValidTokenCreatesATenantWhoseTokenWorksOnlyInItsNamespace(t *testing.T) {
	e := newPeeringEnv(t)
	ctx := context.Background()
	tok := e.newToken(t, time.Now().Add(time.Hour), false)
	c := newConsumer()

	r := e.post(t, peering.PeerPath, e.peerRequest(tok.String(), c), "")
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	resp := r.response(t)
	ns := offloadv1alpha1.TenantNamespace(c.name)
	cred := resp.Credentials
	if resp.ClusterID != e.clusterID || resp.ClusterName != "provider" || cred.TenantNamespace != ns ||
		cred.APIServerURL != e.cfg.Host || cred.CACert != string(e.cfg.CAData) || cred.Token == "" {
		t.Errorf("response %+v does not identify the provider, its API server and the tenant namespace %s", resp, ns)
	}
	if d := time.Until(cred.ExpirationTimestamp); d < testCredentialExpiration-time.Minute || d > testCredentialExpiration+time.Minute {
		t.Errorf("credentials expire in %s, want %s", d, testCredentialExpiration)
	}

	var tenant offloadv1alpha1.Tenant
	if err := e.admin.Get(ctx, client.ObjectKey{Name: c.name}, &tenant); err != nil {
		t.Fatal(err)
	}
	// The auth service names the token and writes no policy: the
	// controller-manager (running here) gives the tenant the token's.
	want := offloadv1alpha1.TenantSpec{ClusterID: c.id, ClusterName: c.name, TenantNamespace: ns}
	got := tenant.Spec
	got.Policy = offloadv1alpha1.ConsumerPolicy{}
	if !apiequality.Semantic.DeepEqual(got, want) || tenant.Annotations[offloadv1alpha1.AnnotationPeeringToken] != tok.ID {
		t.Errorf("tenant spec %+v, annotations %v; want %+v and the token %s named", tenant.Spec, tenant.Annotations, want, tok.ID)
	}
	framework.Eventually(t, 30*time.Second, "the tenant has its token's policy", func(ctx context.Context) bool {
		var tn offloadv1alpha1.Tenant
		return e.admin.Get(ctx, client.ObjectKey{Name: c.name}, &tn) == nil &&
			tn.Spec.Policy.Equal(offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline})
	})
	if tenant.Status.CredentialExpiry == nil || !tenant.Status.CredentialExpiry.Time.Equal(cred.ExpirationTimestamp) {
		t.Errorf("tenant credentialExpiry %v, want %v", tenant.Status.CredentialExpiry, cred.ExpirationTimestamp)
	}
	var nsObj corev1.Namespace
	if err := e.admin.Get(ctx, client.ObjectKey{Name: ns}, &nsObj); err != nil || nsObj.Labels[offloadv1alpha1.LabelTenant] != c.id {
		t.Errorf("namespace %s: labels %v, error %v; want %s=%s", ns, nsObj.Labels, err, offloadv1alpha1.LabelTenant, c.id)
	}
	var rb rbacv1.RoleBinding
	if err := e.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: offloadv1alpha1.TenantRole}, &rb); err != nil {
		t.Fatal(err)
	}
	if rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.Name != offloadv1alpha1.TenantRole || len(rb.Subjects) != 1 || rb.Subjects[0].Name != offloadv1alpha1.ConsumerServiceAccount {
		t.Errorf("RoleBinding binds %+v to %+v", rb.RoleRef, rb.Subjects)
	}
	// The tenant namespace has its budget before the consumer has any
	// credential.
	var budget corev1.ResourceQuota
	if err := e.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: offloadv1alpha1.TenantBudgetName}, &budget); err != nil {
		t.Fatalf("the tenant namespace has no budget: %v", err)
	}
	if !apiequality.Semantic.DeepEqual(budget.Spec.Hard, offloadv1alpha1.TenantBudget()) {
		t.Errorf("the tenant's budget is %v, want %v", budget.Spec.Hard, offloadv1alpha1.TenantBudget())
	}
	// Counted already (the test API server runs no quota controller): the
	// API server's quota admission admits the consumer's first objects.
	for name := range offloadv1alpha1.TenantBudget() {
		used, ok := budget.Status.Used[name]
		hard, want := budget.Status.Hard[name], budget.Spec.Hard[name]
		if !ok || !used.IsZero() || hard.Cmp(want) != 0 {
			t.Errorf("the budget's status counts %s: used %s (set %v) of %s; want 0 of %s", name, used.String(), ok, hard.String(), want.String())
		}
	}
	var stored corev1.ConfigMap
	if err := e.admin.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: peering.TokenConfigMapName(tok.ID)}, &stored); err != nil {
		t.Fatal(err)
	}
	if stored.Data[peering.UsedByKey] != c.id || stored.Data[peering.UsedAtKey] == "" {
		t.Errorf("the token is not marked used by %s: used-by %q", c.id, stored.Data[peering.UsedByKey])
	}

	if got, wantUser := e.reviewToken(t, cred.Token), "system:serviceaccount:"+ns+":"+offloadv1alpha1.ConsumerServiceAccount; got != wantUser {
		t.Errorf("the returned token authenticates as %q, want %q", got, wantUser)
	}
	// The credentials as the consumer uses them: URL, CA and token.
	kube, err := kubernetes.NewForConfig(&rest.Config{
		Host: cred.APIServerURL, BearerToken: cred.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte(cred.CACert)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing secrets with the consumer's credentials: %v, want Forbidden", err)
	}

	other := newConsumer()
	if r := e.post(t, peering.PeerPath, e.peerRequest(e.newToken(t, time.Now().Add(time.Hour), false).String(), other), ""); r.status != http.StatusOK {
		t.Fatalf("peering a second consumer: %d %s", r.status, r.body)
	}
	const group = "offload.io"
	for _, tt := range []struct {
		name                             string
		verb, group, resource, namespace string
		want                             bool
	}{
		{"it may create RemoteNamespaces in its tenant namespace", "create", group, "remotenamespaces", ns, true},
		{"it may list ResourceOffers in its tenant namespace", "list", group, "resourceoffers", ns, true},
		{"it may not create ResourceOffers", "create", group, "resourceoffers", ns, false},
		{"it may not read Secrets in its tenant namespace", "get", "", "secrets", ns, false},
		{"it may not create RemoteNamespaces in another namespace", "create", group, "remotenamespaces", e.namespace, false},
		{"it may not touch another tenant's namespace", "create", group, "remotenamespaces", offloadv1alpha1.TenantNamespace(other.name), false},
		{"it may not list nodes", "list", "", "nodes", "", false},
		{"it may not list Secrets cluster-wide", "list", "", "secrets", "", false},
		{"it may not create namespaces", "create", "", "namespaces", "", false},
		{"it may not read Tenants", "get", group, "tenants", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := e.can(t, c, tt.verb, tt.group, tt.resource, tt.namespace); got != tt.want {
				t.Errorf("%s %s in %q: allowed=%v, want %v", tt.verb, tt.resource, tt.namespace, got, tt.want)
			}
		})
	}

	again := e.post(t, peering.PeerPath, e.peerRequest(tok.String(), newConsumer()), "")
	again.wantError(t, http.StatusUnauthorized, peering.ReasonTokenUsed)
	if !strings.Contains(e.logs.String(), tok.ID) {
		t.Errorf("the logs never name token %s:\n%s", tok.ID, e.logs.String())
	}
}

func TestPeeringRefusesBadRequestsAndLeavesNothingBehind(t *testing.T) {
	e := newPeeringEnv(t)
	ctx := context.Background()
	valid := func() string { return e.newToken(t, time.Now().Add(time.Hour), false).String() }
	spent := func() string {
		tok := e.newToken(t, time.Now().Add(time.Hour), false)
		var s corev1.ConfigMap
		if err := e.admin.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: peering.TokenConfigMapName(tok.ID)}, &s); err != nil {
			t.Fatal(err)
		}
		s.Data[peering.UsedAtKey], s.Data[peering.UsedByKey] = time.Now().UTC().Format(time.RFC3339), "someone"
		if err := e.admin.Update(ctx, &s); err != nil {
			t.Fatal(err)
		}
		return tok.String()
	}
	wrongSecret := func() string {
		tok := e.newToken(t, time.Now().Add(time.Hour), false)
		tok.Secret = strings.Repeat("a", 16)
		return tok.String()
	}
	unknown := func() string { return "abcdef.0123456789abcdef" }

	tests := []struct {
		name       string
		body       func(c consumer) any
		wantStatus int
		wantReason string
	}{
		{"a body that is not JSON is malformed", func(consumer) any { return "{not json" }, http.StatusBadRequest, peering.ReasonMalformedRequest},
		{"a consumer name that is not DNS-1123 is malformed", func(c consumer) any {
			r := e.peerRequest(valid(), c)
			r.ClusterName = "Not_A_Name"
			return r
		}, http.StatusBadRequest, peering.ReasonMalformedRequest},
		{"a request for another provider is refused", func(c consumer) any {
			r := e.peerRequest(valid(), c)
			r.ProviderClusterID = "someone-else"
			return r
		}, http.StatusForbidden, peering.ReasonWrongCluster},
		{"a malformed token is invalid", func(c consumer) any { return e.peerRequest("not-a-token", c) }, http.StatusUnauthorized, peering.ReasonInvalidToken},
		{"an unknown token is invalid", func(c consumer) any { return e.peerRequest(unknown(), c) }, http.StatusUnauthorized, peering.ReasonInvalidToken},
		{"a token with a wrong secret is invalid", func(c consumer) any { return e.peerRequest(wrongSecret(), c) }, http.StatusUnauthorized, peering.ReasonInvalidToken},
		{"an expired token is refused", func(c consumer) any {
			return e.peerRequest(e.newToken(t, time.Now().Add(-time.Minute), false).String(), c)
		}, http.StatusUnauthorized, peering.ReasonTokenExpired},
		{"a used single-use token is refused", func(c consumer) any { return e.peerRequest(spent(), c) }, http.StatusUnauthorized, peering.ReasonTokenUsed},
	}
	messages := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newConsumer()
			body := tt.body(c)
			r := e.post(t, peering.PeerPath, body, "")
			got := r.wantError(t, tt.wantStatus, tt.wantReason)
			messages[tt.name] = got.Message
			if req, ok := body.(peering.PeerRequest); ok {
				if tok, err := peering.ParseToken(req.Token); err == nil && strings.Contains(string(r.body), tok.Secret) {
					t.Errorf("the error body repeats the token secret: %s", r.body)
				}
			}
			e.assertNothingFor(t, c)
		})
	}
	if a, b := messages["an unknown token is invalid"], messages["a token with a wrong secret is invalid"]; a != b {
		t.Errorf("an unknown token (%q) and a wrong secret (%q) get different messages", a, b)
	}
	if m := messages["an expired token is refused"]; !strings.Contains(m, "kubectl offload peer generate") {
		t.Errorf("the expiry message %q does not say how to get a new token", m)
	}
}

func TestPeeringAsANameAnotherClusterUsesConflictsWithoutSpendingTheToken(t *testing.T) {
	e := newPeeringEnv(t)
	first := newConsumer()
	if r := e.post(t, peering.PeerPath, e.peerRequest(e.newToken(t, time.Now().Add(time.Hour), false).String(), first), ""); r.status != http.StatusOK {
		t.Fatalf("first peering: %d %s", r.status, r.body)
	}
	tok := e.newToken(t, time.Now().Add(time.Hour), false)
	impostor := consumer{id: newConsumer().id, name: first.name}
	e.post(t, peering.PeerPath, e.peerRequest(tok.String(), impostor), "").wantError(t, http.StatusConflict, peering.ReasonTenantConflict)

	var tenant offloadv1alpha1.Tenant
	if err := e.admin.Get(context.Background(), client.ObjectKey{Name: first.name}, &tenant); err != nil || tenant.Spec.ClusterID != first.id {
		t.Errorf("the first consumer's tenant changed: %+v, %v", tenant.Spec, err)
	}
	if r := e.post(t, peering.PeerPath, e.peerRequest(tok.String(), newConsumer()), ""); r.status != http.StatusOK {
		t.Errorf("the token was spent by the refused request: %d %s", r.status, r.body)
	}
}

func TestAFailedPeeringDeletesTheTenantItCreated(t *testing.T) {
	e := newPeeringEnv(t)
	c := newConsumer()
	// A namespace of that name that is not the consumer's makes the second step fail.
	mustCreate(t, e.admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.TenantNamespace(c.name)}})
	e.post(t, peering.PeerPath, e.peerRequest(e.newToken(t, time.Now().Add(time.Hour), false).String(), c), "").
		wantError(t, http.StatusConflict, peering.ReasonTenantConflict)
	err := e.admin.Get(context.Background(), client.ObjectKey{Name: c.name}, &offloadv1alpha1.Tenant{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the tenant created before the failure is still there: %v", err)
	}
	var sa corev1.ServiceAccount
	if err := e.admin.Get(context.Background(), client.ObjectKey{Namespace: offloadv1alpha1.TenantNamespace(c.name), Name: offloadv1alpha1.ConsumerServiceAccount}, &sa); !apierrors.IsNotFound(err) {
		t.Errorf("a ServiceAccount was created in a namespace that is not the tenant's: %v", err)
	}
}

// A consumer's name and cluster ID are no secret: a token holder naming an
// existing tenant must not get its credentials. Only a token the provider's
// admin bound to that consumer peers it again, and refusals spend nothing.
func TestAnExistingTenantIsPeeredAgainOnlyWithATokenBoundToIt(t *testing.T) {
	e := newPeeringEnv(t)
	ctx := context.Background()
	reusable := e.newToken(t, time.Now().Add(time.Hour), true)
	c := newConsumer()
	r := e.post(t, peering.PeerPath, e.peerRequest(reusable.String(), c), "")
	if r.status != http.StatusOK {
		t.Fatalf("first peering: %d %s", r.status, r.body)
	}
	first := r.response(t).Credentials
	before := e.waitPolicyAdopted(t, c.name)

	singleUse := e.newToken(t, time.Now().Add(time.Hour), false)
	boundToOther := e.boundToken(t, "someone-else")
	for name, tc := range map[string]struct {
		token  peering.Token
		status int
		reason string
	}{
		"the reusable token that peered it": {token: reusable, status: http.StatusConflict, reason: peering.ReasonTenantExists},
		"an unbound single-use token":       {token: singleUse, status: http.StatusConflict, reason: peering.ReasonTenantExists},
		"a token bound to another consumer": {token: boundToOther, status: http.StatusForbidden, reason: peering.ReasonTokenForAnotherConsumer},
	} {
		t.Run(name+" is refused and changes nothing", func(t *testing.T) {
			msg := e.post(t, peering.PeerPath, e.peerRequest(tc.token.String(), c), "").wantError(t, tc.status, tc.reason)
			if !strings.Contains(msg.Message, "--consumer "+c.name) {
				t.Errorf("the refusal does not say how to peer again: %q", msg.Message)
			}
			var after offloadv1alpha1.Tenant
			if err := e.admin.Get(ctx, client.ObjectKey{Name: c.name}, &after); err != nil {
				t.Fatal(err)
			}
			if after.ResourceVersion != before.ResourceVersion {
				t.Errorf("the refused request changed the tenant: %+v", after.Status)
			}
			if e.reviewToken(t, first.Token) == "" {
				t.Error("the tenant's credential stopped working")
			}
		})
	}
	// The refused single-use token was not spent, nor the bound one.
	if r := e.post(t, peering.PeerPath, e.peerRequest(singleUse.String(), newConsumer()), ""); r.status != http.StatusOK {
		t.Errorf("the refused single-use token was spent: %d %s", r.status, r.body)
	}
	if r := e.post(t, peering.PeerPath, e.peerRequest(boundToOther.String(), consumer{id: newConsumer().id, name: "someone-else"}), ""); r.status != http.StatusOK {
		t.Errorf("the refused bound token was spent: %d %s", r.status, r.body)
	}

	// The provider's admin binds a token to the consumer: it peers again.
	again := e.post(t, peering.PeerPath, e.peerRequest(e.boundToken(t, c.name).String(), c), "")
	if again.status != http.StatusOK {
		t.Fatalf("peering again with a bound token: %d %s", again.status, again.body)
	}
	if e.reviewToken(t, again.response(t).Credentials.Token) == "" {
		t.Error("the credential of the new peering does not authenticate")
	}
	var list offloadv1alpha1.TenantList
	if err := e.admin.List(ctx, &list, client.MatchingLabels{offloadv1alpha1.LabelTenant: c.id}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].UID != before.UID {
		t.Errorf("%d tenants for the consumer after peering again, want the same one", len(list.Items))
	}
}

// peerAtOnce sends, all at once, a peering request for each consumer with
// the token tokenOf gives it. It returns how many succeeded, and calls
// refused with each refusal, after checking that the refused consumer got
// nothing.
func (e *peeringEnv) peerAtOnce(t *testing.T, consumers []consumer, tokenOf func(int) peering.Token, refused func(int, reply)) int {
	t.Helper()
	replies := make([]reply, len(consumers))
	var wg sync.WaitGroup
	for i := range consumers {
		wg.Go(func() {
			replies[i] = e.post(t, peering.PeerPath, e.peerRequest(tokenOf(i).String(), consumers[i]), "")
		})
	}
	wg.Wait()
	ok := 0
	for i, r := range replies {
		if r.status == http.StatusOK {
			ok++
			continue
		}
		refused(i, r)
		e.assertNothingFor(t, consumers[i])
	}
	return ok
}

// Two first peerings naming one cluster ID under two names, at once, each
// with a token of its own, yield one tenant: a cluster ID is one consumer's.
func TestConcurrentFirstPeeringsOfOneClusterIDMakeOneTenant(t *testing.T) {
	e := newPeeringEnv(t)
	id := newConsumer().id
	const n = 8
	consumers := make([]consumer, n)
	tokens := make([]peering.Token, n)
	for i := range consumers {
		consumers[i] = consumer{id: id, name: newConsumer().name}
		tokens[i] = e.newToken(t, time.Now().Add(time.Hour), false)
	}
	ok := e.peerAtOnce(t, consumers, func(i int) peering.Token { return tokens[i] }, func(i int, r reply) {
		r.wantError(t, http.StatusConflict, peering.ReasonTenantConflict)
		// Refused, so not spent.
		if r := e.post(t, peering.PeerPath, e.peerRequest(tokens[i].String(), newConsumer()), ""); r.status != http.StatusOK {
			t.Errorf("the token of a refused peering was spent: %d %s", r.status, r.body)
		}
	})
	var list offloadv1alpha1.TenantList
	if err := e.admin.List(context.Background(), &list, client.MatchingLabels{offloadv1alpha1.LabelTenant: id}); err != nil {
		t.Fatal(err)
	}
	if ok != 1 || len(list.Items) != 1 {
		t.Errorf("%d peerings succeeded and %d tenants hold the cluster ID, want 1 and 1", ok, len(list.Items))
	}
}

// Once a tenant is gone, its cluster ID may peer again, under another name
// too: the claim its Tenant owned no longer stands.
func TestAClusterIDIsFreeAgainOnceItsTenantIsGone(t *testing.T) {
	e := newPeeringEnv(t)
	ctx := context.Background()
	c, _ := e.peered(t)
	tn := &offloadv1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: c.name}}
	if err := e.admin.Delete(ctx, tn); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(e.admin.Get(ctx, client.ObjectKeyFromObject(tn), tn)), nil
	})
	if err != nil {
		t.Fatalf("waiting for the tenant controller to remove the Tenant: %v", err)
	}
	renamed := consumer{id: c.id, name: newConsumer().name}
	if r := e.post(t, peering.PeerPath, e.peerRequest(e.newToken(t, time.Now().Add(time.Hour), false).String(), renamed), ""); r.status != http.StatusOK {
		t.Fatalf("peering the cluster ID again under another name: %d %s", r.status, r.body)
	}
	var claim coordinationv1.Lease
	if err := e.admin.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: claimName(c.id)}, &claim); err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(claim.Spec.HolderIdentity, "") != renamed.name || len(claim.OwnerReferences) != 1 || claim.OwnerReferences[0].Name != renamed.name {
		t.Errorf("the claim names %v, owned by %+v; want %s", claim.Spec.HolderIdentity, claim.OwnerReferences, renamed.name)
	}
}

func TestConcurrentRequestsWithOneSingleUseTokenPeerExactlyOnce(t *testing.T) {
	e := newPeeringEnv(t)
	tok := e.newToken(t, time.Now().Add(time.Hour), false)
	const n = 20
	consumers := make([]consumer, n)
	for i := range consumers {
		consumers[i] = newConsumer()
	}
	ok := e.peerAtOnce(t, consumers, func(int) peering.Token { return tok }, func(_ int, r reply) {
		r.wantError(t, http.StatusUnauthorized, peering.ReasonTokenUsed)
	})
	if ok != 1 {
		t.Errorf("%d requests succeeded, want exactly 1", ok)
	}
}

func TestASecondConsumerClaimingAnotherOnesClusterIDIsRefusedWithoutSpendingTheToken(t *testing.T) {
	e := newPeeringEnv(t)
	first := newConsumer()
	if r := e.post(t, peering.PeerPath, e.peerRequest(e.newToken(t, time.Now().Add(time.Hour), false).String(), first), ""); r.status != http.StatusOK {
		t.Fatalf("first peering: %d %s", r.status, r.body)
	}
	tok := e.newToken(t, time.Now().Add(time.Hour), false)
	impostor := consumer{id: first.id, name: newConsumer().name}
	e.post(t, peering.PeerPath, e.peerRequest(tok.String(), impostor), "").wantError(t, http.StatusConflict, peering.ReasonTenantConflict)

	if err := e.admin.Get(context.Background(), client.ObjectKey{Name: impostor.name}, &offloadv1alpha1.Tenant{}); !apierrors.IsNotFound(err) {
		t.Errorf("the impostor got a tenant: %v", err)
	}
	if err := e.admin.Get(context.Background(), client.ObjectKey{Name: offloadv1alpha1.TenantNamespace(impostor.name)}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("the impostor got a tenant namespace: %v", err)
	}
	if r := e.post(t, peering.PeerPath, e.peerRequest(tok.String(), newConsumer()), ""); r.status != http.StatusOK {
		t.Errorf("the token was spent by the refused request: %d %s", r.status, r.body)
	}
}

func TestAWrongProviderClusterIDTellsNothingAboutThisCluster(t *testing.T) {
	e := newPeeringEnv(t)
	req := e.peerRequest("abcdef.0123456789abcdef", newConsumer())
	req.ProviderClusterID = newConsumer().id
	r := e.post(t, peering.PeerPath, req, "")
	r.wantError(t, http.StatusForbidden, peering.ReasonWrongCluster)
	if strings.Contains(string(r.body), e.clusterID) {
		t.Errorf("an unauthenticated caller learns this cluster's ID: %s", r.body)
	}
}

func TestAConsumerOutsideTheKubernetesVersionPolicyIsRefusedWithoutSpendingTheToken(t *testing.T) {
	e := newPeeringEnv(t)
	tok := e.newToken(t, time.Now().Add(time.Hour), false)
	old := newConsumer()
	req := e.peerRequest(tok.String(), old)
	req.KubernetesVersion = "v1.31.4"
	got := e.post(t, peering.PeerPath, req, "").wantError(t, http.StatusUnprocessableEntity, peering.ReasonUnsupportedVersion)
	if !strings.Contains(got.Message, "v1.31.4") || !strings.Contains(got.Message, peering.SupportedKubernetes()) {
		t.Errorf("message %q; want the consumer's version and the supported range", got.Message)
	}
	e.assertNothingFor(t, old)

	// The same token then peers a consumer inside the policy, and the
	// answer says the provider's version for the consumer's own check.
	req = e.peerRequest(tok.String(), newConsumer())
	req.KubernetesVersion = "v1.34.4"
	r := e.post(t, peering.PeerPath, req, "")
	if r.status != http.StatusOK {
		t.Fatalf("the token was spent by the refused request: %d %s", r.status, r.body)
	}
	var resp peering.PeerResponse
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	v, err := kubernetes.NewForConfigOrDie(e.cfg).Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if resp.KubernetesVersion != v.GitVersion {
		t.Errorf("the answer says Kubernetes %q; want the provider's %s", resp.KubernetesVersion, v.GitVersion)
	}

	// An agent of an older release sends no version: the provider checks its own alone.
	if r := e.post(t, peering.PeerPath, e.peerRequest(e.newToken(t, time.Now().Add(time.Hour), false).String(), newConsumer()), ""); r.status != http.StatusOK {
		t.Errorf("a request without a Kubernetes version: %d %s; want it peered", r.status, r.body)
	}
}
