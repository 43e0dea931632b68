package foreigncluster

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/summary"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

const (
	testToken      = "abc123.0123456789abcdef"
	testSecret     = "0123456789abcdef"
	tenantSAToken  = "tenant-sa-token"
	providerAPIURL = "https://provider.example:6443"
	tokenExpired   = "token expired: generate a new one on the provider with `kubectl offload peer generate`"
)

// consumerEnv is a consumer cluster (envtest) with kubectl-offload
// installed, and a fake provider auth service.
type consumerEnv struct {
	c          client.Client
	namespace  string
	consumerID string
	providerID string
	pin        string
	authURL    string
	r          *Reconciler

	mu       sync.Mutex
	requests []peering.PeerRequest
	unpeers  []string // the bearer tokens of unpeer requests
	answer   func(w http.ResponseWriter, req peering.PeerRequest, providerID string)
}

func newConsumerEnv(t *testing.T) *consumerEnv {
	t.Helper()
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	e := &consumerEnv{c: c, namespace: envtest.NewNamespace(t, c, "fc"), consumerID: string(uuid.NewUUID()), providerID: string(uuid.NewUUID())}
	mustCreate(t, c, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.IdentityConfigMap, Namespace: e.namespace},
		Data:       map[string]string{"clusterID": e.consumerID, "clusterName": "consumer"},
	})
	e.answer = grantCredentials
	ca, pin := newCA(t)
	e.pin = pin
	srv, _ := tlsServer(t, servingCert(t, ca), func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == peering.UnpeerPath {
			e.mu.Lock()
			e.unpeers = append(e.unpeers, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
			e.mu.Unlock()
			return
		}
		var req peering.PeerRequest
		if r.URL.Path != peering.PeerPath || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		e.mu.Lock()
		e.requests = append(e.requests, req)
		answer := e.answer
		e.mu.Unlock()
		answer(w, req, e.providerID)
	})
	e.authURL = srv.URL
	e.r = &Reconciler{Client: c, Reader: c, Namespace: e.namespace, HTTPClientTimeout: 5 * time.Second}
	return e
}

func grantCredentials(w http.ResponseWriter, req peering.PeerRequest, providerID string) {
	grantCredentialsOn("")(w, req, providerID)
}

// grantCredentialsOn answers as a provider on Kubernetes version (none
// when empty, as an agent of an older release).
func grantCredentialsOn(version string) func(w http.ResponseWriter, _ peering.PeerRequest, providerID string) {
	return func(w http.ResponseWriter, _ peering.PeerRequest, providerID string) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(peering.PeerResponse{ClusterID: providerID, ClusterName: "provider", KubernetesVersion: version, Credentials: peering.Credentials{
			APIServerURL: providerAPIURL, CACert: "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n", Token: tenantSAToken,
			ExpirationTimestamp: time.Now().Add(time.Hour), TenantNamespace: "tenant-consumer",
		}})
	}
}

func refuseExpired(w http.ResponseWriter, _ peering.PeerRequest, _ string) {
	peering.WriteError(w, &peering.Error{Reason: peering.ReasonTokenExpired, Message: tokenExpired, Status: http.StatusUnauthorized})
}

func (e *consumerEnv) requestCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.requests)
}

// peerWith creates what peer out-of-band creates: the token Secret and the
// ForeignCluster, and returns the ForeignCluster's name.
func (e *consumerEnv) peerWith(t *testing.T, pin string) string {
	t.Helper()
	name := "provider-" + rand.String(6)
	mustCreate(t, e.c, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: peering.PeerTokenSecretName(name), Namespace: e.namespace, Labels: map[string]string{peering.ForeignClusterLabel: name}},
		Type:       peering.PeerAuthTokenSecretType,
		Data:       map[string][]byte{peering.PeerTokenKey: []byte(testToken)},
	})
	mustCreate(t, e.c, &offloadv1alpha1.ForeignCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: e.providerID, ClusterName: name, AuthURL: e.authURL, CACertHash: pin,
			OutgoingPeering: offloadv1alpha1.OutgoingPeering{Enabled: true}},
	})
	t.Cleanup(func() {
		_ = e.c.Delete(context.Background(), &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	return name
}

func (e *consumerEnv) reconcile(t *testing.T, name string) (ctrl.Result, error) {
	t.Helper()
	return e.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
}

// foreignCluster returns ForeignCluster name with the status the summary
// controller writes from the PeeringCredentials this controller reports in.
func (e *consumerEnv) foreignCluster(t *testing.T, name string) *offloadv1alpha1.ForeignCluster {
	t.Helper()
	if _, err := (&summary.Reconciler{Client: e.c, Namespace: e.namespace}).Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: name}}); err != nil {
		t.Fatalf("summarizing ForeignCluster %s: %v", name, err)
	}
	var fc offloadv1alpha1.ForeignCluster
	if err := e.c.Get(context.Background(), types.NamespacedName{Name: name}, &fc); err != nil {
		t.Fatal(err)
	}
	return &fc
}

func (e *consumerEnv) secret(t *testing.T, name string) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	err := e.c.Get(context.Background(), types.NamespacedName{Namespace: e.namespace, Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &s
}

func authenticated(t *testing.T, fc *offloadv1alpha1.ForeignCluster) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(fc.Status.Conditions, offloadv1alpha1.ConditionAuthenticated)
	if c == nil {
		t.Fatalf("ForeignCluster %s has no Authenticated condition", fc.Name)
	}
	return *c
}

func TestAnAcceptedTokenBecomesAKubeconfigSecretAndIsDeleted(t *testing.T) {
	e := newConsumerEnv(t)
	name := e.peerWith(t, e.pin)
	if _, err := e.reconcile(t, name); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}

	if got := e.requests[0]; got != (peering.PeerRequest{Token: testToken, ClusterID: e.consumerID, ClusterName: "consumer", ProviderClusterID: e.providerID}) {
		t.Errorf("the provider got %+v", got)
	}
	s := e.secret(t, peering.PeerKubeconfigSecretName(name))
	if s == nil {
		t.Fatal("no kubeconfig Secret")
	}
	if s.Type != peering.PeerKubeconfigSecretType || s.Labels[peering.ForeignClusterLabel] != name || len(s.OwnerReferences) != 1 {
		t.Errorf("kubeconfig Secret type %s, labels %v, owners %v", s.Type, s.Labels, s.OwnerReferences)
	}
	if _, err := time.Parse(time.RFC3339, string(s.Data[peering.PeerExpirationKey])); err != nil {
		t.Errorf("expiration: %v", err)
	}
	cfg, err := clientcmd.Load(s.Data[peering.PeerKubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if cfg.Clusters[kctx.Cluster].Server != providerAPIURL || cfg.AuthInfos[kctx.AuthInfo].Token != tenantSAToken || kctx.Namespace != "tenant-consumer" {
		t.Errorf("the kubeconfig does not hold the credentials: %+v", cfg)
	}
	if e.secret(t, peering.PeerTokenSecretName(name)) != nil {
		t.Error("the spent token Secret still exists")
	}
	fc := e.foreignCluster(t, name)
	if c := authenticated(t, fc); c.Status != metav1.ConditionTrue || c.Reason != ReasonAuthenticated {
		t.Errorf("Authenticated = %+v, want True", c)
	}
	if fc.Status.Auth != offloadv1alpha1.PhaseEstablished || fc.Status.Role != offloadv1alpha1.RoleConsumer || fc.Status.LastSeen == nil {
		t.Errorf("status %+v, want auth Established, role Consumer and lastSeen", fc.Status)
	}
	if fc.Status.APIServerURL != providerAPIURL {
		t.Errorf("status.apiServerURL = %q, want %q", fc.Status.APIServerURL, providerAPIURL)
	}
	if fc.Spec.APIServerURL != "" {
		t.Errorf("spec.apiServerURL = %q: the agent wrote the user's intent", fc.Spec.APIServerURL)
	}

	if _, err := e.reconcile(t, name); err != nil {
		t.Fatalf("second Reconcile: %v", err)
	}
	if n := e.requestCount(); n != 1 {
		t.Errorf("the provider got %d requests, want 1: a peered cluster does not authenticate again", n)
	}
}

func TestCredentialsLeftByAnEarlierPeeringOfTheSameNameAreReplaced(t *testing.T) {
	e := newConsumerEnv(t)
	name := e.peerWith(t, e.pin)
	// The garbage collector has not yet removed the PeeringCredentials of
	// the ForeignCluster this name stood for before.
	stale := &offloadv1alpha1.PeeringCredentials{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: offloadv1alpha1.GroupVersion.String(), Kind: "ForeignCluster", Name: name, UID: "00000000-0000-0000-0000-000000000001", Controller: ptr.To(true),
		}}},
		Spec: offloadv1alpha1.PeeringCredentialsSpec{SecretName: peering.PeerKubeconfigSecretName(name)},
	}
	mustCreate(t, e.c, stale)
	if _, err := e.reconcile(t, name); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	fc := e.foreignCluster(t, name)
	var pc offloadv1alpha1.PeeringCredentials
	if err := e.c.Get(context.Background(), types.NamespacedName{Name: name}, &pc); err != nil {
		t.Fatal(err)
	}
	if pc.UID == stale.UID || !metav1.IsControlledBy(&pc, fc) {
		t.Errorf("PeeringCredentials %s is owned by %v, want a new one owned by ForeignCluster %s", name, pc.OwnerReferences, fc.UID)
	}
	if c := authenticated(t, fc); c.Status != metav1.ConditionTrue {
		t.Errorf("Authenticated = %+v, want True: the status went to the stale PeeringCredentials", c)
	}
}

func TestARefusedTokenSetsTheProvidersReasonAndIsNotRetriedAtOnce(t *testing.T) {
	e := newConsumerEnv(t)
	e.answer = refuseExpired
	name := e.peerWith(t, e.pin)
	res, err := e.reconcile(t, name)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Errorf("Reconcile = %+v, want a retry within a minute, not an error and not a hot loop", res)
	}
	fc := e.foreignCluster(t, name)
	c := authenticated(t, fc)
	if c.Status != metav1.ConditionFalse || c.Reason != peering.ReasonTokenExpired || c.Message != tokenExpired {
		t.Errorf("Authenticated = %+v, want False with the provider's reason and message", c)
	}
	if fc.Status.Auth != offloadv1alpha1.PhaseFailed {
		t.Errorf("status.auth = %s, want Failed", fc.Status.Auth)
	}
	if e.secret(t, peering.PeerKubeconfigSecretName(name)) != nil {
		t.Error("a kubeconfig Secret exists")
	}
	if e.secret(t, peering.PeerTokenSecretName(name)) == nil {
		t.Error("the token Secret was deleted")
	}
}

func TestAnAuthServerWithAnotherCAGetsNoTokenAndIsReportedAsAPinMismatch(t *testing.T) {
	e := newConsumerEnv(t)
	_, otherPin := newCA(t)
	name := e.peerWith(t, otherPin)
	if _, err := e.reconcile(t, name); err == nil {
		t.Error("Reconcile succeeded, want an error so that it is retried with backoff")
	}
	if n := e.requestCount(); n != 0 {
		t.Fatalf("the fake provider got %d requests: the token left the consumer", n)
	}
	c := authenticated(t, e.foreignCluster(t, name))
	if c.Status != metav1.ConditionFalse || c.Reason != ReasonCAHashMismatch || !strings.HasPrefix(c.Message, "the auth server's CA does not match --ca-cert-hash: ") {
		t.Errorf("Authenticated = %+v, want False CAHashMismatch", c)
	}
	if strings.Contains(c.Message, testSecret) {
		t.Error("the message contains the token")
	}
	if e.secret(t, peering.PeerKubeconfigSecretName(name)) != nil {
		t.Error("a kubeconfig Secret exists")
	}
}

func TestAnUnreachableAuthServiceIsReportedAndRetried(t *testing.T) {
	e := newConsumerEnv(t)
	e.authURL = "https://127.0.0.1:1"
	name := e.peerWith(t, e.pin)
	if _, err := e.reconcile(t, name); err == nil {
		t.Error("Reconcile succeeded, want an error so that it is retried with backoff")
	}
	c := authenticated(t, e.foreignCluster(t, name))
	if c.Status != metav1.ConditionUnknown || c.Reason != ReasonUnreachable || strings.Contains(c.Message, testSecret) {
		t.Errorf("Authenticated = %+v, want Unknown Unreachable: pending while the agent retries", c)
	}
}

func TestTheManagerRunsTheReconciler(t *testing.T) {
	e := newConsumerEnv(t)
	envtest.StartManager(t, envtest.APIServer(t), func(mgr ctrlmanager.Manager) error {
		return (&Reconciler{Client: mgr.GetClient(), Namespace: e.namespace, HTTPClientTimeout: 5 * time.Second}).SetupWithManager(mgr)
	})
	ctx := context.Background()
	name := e.peerWith(t, e.pin)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		fc := e.foreignCluster(t, name)
		c := meta.FindStatusCondition(fc.Status.Conditions, offloadv1alpha1.ConditionAuthenticated)
		return c != nil && c.Status == metav1.ConditionTrue, nil
	})
	if err != nil {
		t.Fatalf("the ForeignCluster did not become Authenticated: %v", err)
	}
}

func mustCreate(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

func TestCredentialsForAnAPIServerWithoutVerifiedHTTPSAreNotKept(t *testing.T) {
	for _, tc := range []struct{ name, url, ca string }{
		{"an http URL", "http://203.0.113.7:6443", "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"},
		{"no CA", providerAPIURL, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newConsumerEnv(t)
			e.answer = func(w http.ResponseWriter, _ peering.PeerRequest, providerID string) {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(peering.PeerResponse{ClusterID: providerID, ClusterName: "provider", Credentials: peering.Credentials{
					APIServerURL: tc.url, CACert: tc.ca, Token: tenantSAToken,
					ExpirationTimestamp: time.Now().Add(time.Hour), TenantNamespace: "tenant-consumer",
				}})
			}
			name := e.peerWith(t, e.pin)
			if _, err := e.reconcile(t, name); err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			if c := authenticated(t, e.foreignCluster(t, name)); c.Status != metav1.ConditionFalse || c.Reason != ReasonInsecureProvider {
				t.Errorf("Authenticated = %+v, want False for %s", c, ReasonInsecureProvider)
			}
			if e.secret(t, peering.PeerKubeconfigSecretName(name)) != nil {
				t.Error("the credentials were kept in a kubeconfig Secret")
			}
		})
	}
}

// withKubernetes makes e's consumer run Kubernetes consumer and its fake
// provider answer as Kubernetes provider.
func (e *consumerEnv) withKubernetes(consumer, provider string) {
	e.r.KubernetesVersion = func(context.Context) (string, error) { return consumer, nil }
	e.answer = grantCredentialsOn(provider)
}

// expectRefusedForVersions checks that the peering failed with the
// version reason and a message naming version, and kept no credentials.
func (e *consumerEnv) expectRefusedForVersions(t *testing.T, name, version string) {
	t.Helper()
	fc := e.foreignCluster(t, name)
	c := authenticated(t, fc)
	if c.Status != metav1.ConditionFalse || c.Reason != peering.ReasonUnsupportedVersion || !strings.Contains(c.Message, version) || !strings.Contains(c.Message, peering.SupportedKubernetes()) {
		t.Errorf("Authenticated = %+v, want False, reason %s, naming %s and the supported range", c, peering.ReasonUnsupportedVersion, version)
	}
	if fc.Status.Auth != offloadv1alpha1.PhaseFailed {
		t.Errorf("status.auth = %s, want Failed", fc.Status.Auth)
	}
	if e.secret(t, peering.PeerKubeconfigSecretName(name)) != nil {
		t.Error("a kubeconfig Secret exists for a pair outside the version policy")
	}
}

func TestAPairOutsideTheKubernetesVersionPolicyIsRefusedAtPeer(t *testing.T) {
	t.Run("this cluster too old: refused before the token is spent", func(t *testing.T) {
		e := newConsumerEnv(t)
		e.withKubernetes("v1.31.4", "v1.37.2")
		name := e.peerWith(t, e.pin)
		if res, err := e.reconcile(t, name); err != nil || res.RequeueAfter <= 0 {
			t.Fatalf("Reconcile = %+v, %v; want a later retry, not an error", res, err)
		}
		e.expectRefusedForVersions(t, name, "v1.31.4")
		if n := e.requestCount(); n != 0 {
			t.Errorf("%d peering requests reached the provider; want none, so that the token stays unspent", n)
		}
		if e.secret(t, peering.PeerTokenSecretName(name)) == nil {
			t.Error("the token Secret was deleted")
		}
	})
	t.Run("the provider outside this release's range: its credentials are handed back", func(t *testing.T) {
		e := newConsumerEnv(t)
		e.withKubernetes("v1.37.2", "v1.38.0")
		name := e.peerWith(t, e.pin)
		if res, err := e.reconcile(t, name); err != nil || res.RequeueAfter <= 0 {
			t.Fatalf("Reconcile = %+v, %v; want a later retry, not an error", res, err)
		}
		e.expectRefusedForVersions(t, name, "v1.38.0")
		e.mu.Lock()
		unpeers := slices.Clone(e.unpeers)
		req := e.requests[0]
		e.mu.Unlock()
		if len(unpeers) != 1 || unpeers[0] != tenantSAToken {
			t.Errorf("unpeer requests with tokens %q; want one, with the credentials the provider issued", unpeers)
		}
		if req.KubernetesVersion != "v1.37.2" {
			t.Errorf("the peering request said Kubernetes %q; want this cluster's v1.37.2", req.KubernetesVersion)
		}
	})
	t.Run("a supported pair peers", func(t *testing.T) {
		e := newConsumerEnv(t)
		e.withKubernetes("v1.34.4", "v1.37.2")
		name := e.peerWith(t, e.pin)
		if _, err := e.reconcile(t, name); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
		if e.secret(t, peering.PeerKubeconfigSecretName(name)) == nil {
			t.Error("no kubeconfig Secret for a pair inside the policy")
		}
	})
}
