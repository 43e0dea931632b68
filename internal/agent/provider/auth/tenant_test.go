package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/provider/tenant"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
)

// testCredentialExpiration is the credential lifetime of the test servers.
const testCredentialExpiration = 2 * time.Hour

// peeringEnv is a provider with a running auth service whose Kubernetes
// client has exactly the chart's RBAC for offload-auth.
type peeringEnv struct {
	cfg       *rest.Config
	admin     client.Client
	namespace string
	clusterID string
	url       string // https://host:port
	http      *http.Client
	logs      *syncBuffer

	mu      sync.Mutex
	secrets []string // every token secret and credential of the test
}

func (e *peeringEnv) remember(secret string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.secrets = append(e.secrets, secret)
}

// newPeeringEnv installs the CRDs and ClusterRoles, creates an install
// namespace with the identity ConfigMap and starts the auth service there.
func newPeeringEnv(t *testing.T) *peeringEnv {
	t.Helper()
	return newPeeringEnvWith(t, liftedLimits())
}

// newPeeringEnvWith is newPeeringEnv with the auth service's flood limits.
func newPeeringEnvWith(t *testing.T, l limits) *peeringEnv {
	t.Helper()
	cfg := envtest.APIServer(t)
	admin := envtest.NewClient(t, cfg)
	installClusterObjects(t, admin)
	ns := envtest.NewNamespace(t, admin, "auth")
	e := &peeringEnv{cfg: cfg, admin: admin, namespace: ns, clusterID: string(uuid.NewUUID()), logs: &syncBuffer{}}
	mustCreate(t, admin, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.IdentityConfigMap, Namespace: ns},
		Data:       map[string]string{"clusterID": e.clusterID, "clusterName": "provider"},
	})
	authClient := envtest.NewClient(t, e.authSAConfig(t))
	// The tenant controller of the controller-manager tears Tenants down.
	// It also gives them their token's policy.
	envtest.StartManager(t, cfg, (&tenant.Reconciler{Client: admin, Namespace: ns}).SetupWithManager)

	ports := make([]int, 2)
	for i := range ports {
		p, err := netlab.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	logger := funcr.New(func(prefix, args string) { e.logs.WriteLine(prefix + " " + args) }, funcr.Options{Verbosity: 10})
	o := NewOptions()
	o.Namespace = ns
	o.Listen = fmt.Sprintf("127.0.0.1:%d", ports[0])
	o.HealthProbeBindAddress = fmt.Sprintf("127.0.0.1:%d", ports[1])
	o.Logger = logger
	// As the agent reads them, with the auth service's own identity.
	authKube, err := kubernetes.NewForConfig(e.authSAConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	o.SigningKeys = func(ctx context.Context) ([]byte, error) {
		return authKube.CoreV1().RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(ctx)
	}
	srv, err := NewServer(authClient, o)
	if err != nil {
		t.Fatal(err)
	}
	srv.limits = l
	peering, err := NewPeering(authClient, PeeringOptions{
		Namespace: ns, APIServerURL: cfg.Host, APIServerCA: cfg.CAData,
		CredentialExpiration: testCredentialExpiration, Logger: logger,
		// The test API server's own version, as the agent asks for it.
		KubernetesVersion: peering.KubernetesVersionOf(authKube.Discovery()),
	})
	if err != nil {
		t.Fatal(err)
	}
	peering.Register(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("auth server: %v", err)
		}
		e.assertLogsHoldNoSecret(t)
	})
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + o.HealthProbeBindAddress + "/readyz")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("waiting for the auth server: %v", err)
	}
	e.url = "https://" + o.Listen
	e.http = clientTrusting(t, getCASecret(t, admin, ns).Data[offloadv1alpha1.AuthCACertKey], "")
	e.http.Timeout = time.Minute
	return e
}

var clusterObjects sync.Once

// installClusterObjects creates the chart's CRDs and the offload-auth and
// offload-tenant ClusterRoles once per test process.
func installClusterObjects(t *testing.T, c client.Client) {
	t.Helper()
	envtest.InstallCRDs(t, c)
	clusterObjects.Do(func() {
		// The rules of charts/offload/templates/rbac-auth.yaml.
		mustCreate(t, c, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.TenantRole},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"offload.io"}, Resources: []string{"remotenamespaces"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
				{APIGroups: []string{"offload.io"}, Resources: []string{"resourceoffers"}, Verbs: []string{"get", "list", "watch"}},
			},
		})
		mustCreate(t, c, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "offload-auth"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"offload.io"}, Resources: []string{"tenants"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
				{APIGroups: []string{"offload.io"}, Resources: []string{"tenants/status"}, Verbs: []string{"get", "update", "patch"}},
				{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "create", "delete"}},
				{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get", "create", "delete"}},
				{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}},
				{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "delete"}},
				{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"rolebindings"}, Verbs: []string{"get", "create", "delete"}},
				{APIGroups: []string{""}, Resources: []string{"resourcequotas"}, Verbs: []string{"get", "create", "delete"}},
				{APIGroups: []string{""}, Resources: []string{"resourcequotas/status"}, Verbs: []string{"update"}},
				{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}, Verbs: []string{"bind"}, ResourceNames: []string{offloadv1alpha1.TenantRole}},
				{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			},
		})
	})
}

// authSAConfig binds the offload-auth roles, as the chart does, to
// ServiceAccount offload-auth of the namespace and returns a config that
// impersonates it.
func (e *peeringEnv) authSAConfig(t *testing.T) *rest.Config {
	t.Helper()
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "offload-auth", Namespace: e.namespace}}
	mustCreate(t, e.admin, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "offload-auth-" + e.namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "offload-auth"},
		Subjects:   subjects,
	})
	mustCreate(t, e.admin, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "offload-auth", Namespace: e.namespace},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{offloadv1alpha1.AuthCASecret}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "update", "delete"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update", "delete"}},
		},
	})
	mustCreate(t, e.admin, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "offload-auth", Namespace: e.namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "offload-auth"},
		Subjects:   subjects,
	})
	cfg := rest.CopyConfig(e.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + e.namespace + ":offload-auth",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + e.namespace, "system:authenticated"},
	}
	framework.WaitAuthorized(t, cfg,
		authorizationv1.ResourceAttributes{Verb: "create", Group: offloadv1alpha1.GroupVersion.Group, Resource: "tenants"},
		authorizationv1.ResourceAttributes{Namespace: e.namespace, Verb: "get", Resource: "configmaps"})
	return cfg
}

func mustCreate(t *testing.T, c client.Client, o client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), o); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
	}
}

// newToken stores a peering token with the default policy in the install
// namespace.
func (e *peeringEnv) newToken(t *testing.T, expires time.Time, reusable bool) peering.Token {
	t.Helper()
	return e.tokenWith(t, peering.TokenOptions{Expires: expires, Reusable: reusable})
}

// tokenWith stores a peering token made with o in the install namespace.
func (e *peeringEnv) tokenWith(t *testing.T, o peering.TokenOptions) peering.Token {
	t.Helper()
	return e.newTokenConfigMap(t, func(tok peering.Token) *corev1.ConfigMap {
		return peering.NewTokenConfigMap(e.namespace, tok, o)
	})
}

// boundToken stores a single-use token, valid for an hour, bound to
// consumer name.
func (e *peeringEnv) boundToken(t *testing.T, name string) peering.Token {
	t.Helper()
	return e.tokenWith(t, peering.TokenOptions{Expires: time.Now().Add(time.Hour), Consumer: name})
}

// newTokenConfigMap stores in the install namespace the token ConfigMap that
// secret makes for a new token.
func (e *peeringEnv) newTokenConfigMap(t *testing.T, stored func(peering.Token) *corev1.ConfigMap) peering.Token {
	t.Helper()
	tok, err := peering.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	e.remember(tok.Secret)
	mustCreate(t, e.admin, stored(tok))
	return tok
}

// waitPolicyAdopted waits until the tenant controller gave Tenant name the
// policy of the token that last peered it, and returns the Tenant.
func (e *peeringEnv) waitPolicyAdopted(t *testing.T, name string) offloadv1alpha1.Tenant {
	t.Helper()
	var tn offloadv1alpha1.Tenant
	framework.Eventually(t, 30*time.Second, "tenant "+name+" has its token's policy", func(ctx context.Context) bool {
		return e.admin.Get(ctx, client.ObjectKey{Name: name}, &tn) == nil && tn.Annotations[offloadv1alpha1.AnnotationPeeringToken] != "" &&
			tn.Annotations[offloadv1alpha1.AnnotationPolicyFromToken] == tn.Annotations[offloadv1alpha1.AnnotationPeeringToken]
	})
	return tn
}

// consumer is a consumer cluster with a fresh name.
type consumer struct{ id, name string }

func newConsumer() consumer {
	return consumer{id: string(uuid.NewUUID()), name: "consumer-" + rand.String(6)}
}

func (e *peeringEnv) peerRequest(tok string, c consumer) peering.PeerRequest {
	return peering.PeerRequest{Token: tok, ClusterID: c.id, ClusterName: c.name, ProviderClusterID: e.clusterID}
}

type reply struct {
	status int
	body   []byte
}

// post sends body as JSON, with bearer in the Authorization header when
// not empty. It remembers every credential it sees, for the log check.
func (e *peeringEnv) post(t *testing.T, path string, body any, bearer string) reply {
	t.Helper()
	var b []byte
	if s, ok := body.(string); ok {
		b = []byte(s)
	} else {
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(http.MethodPost, e.url+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{status: resp.StatusCode, body: out}
	if r.status == http.StatusOK && path != peering.UnpeerPath {
		e.remember(r.response(t).Credentials.Token)
	}
	return r
}

func (r reply) response(t *testing.T) peering.PeerResponse {
	t.Helper()
	var resp peering.PeerResponse
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatalf("body %s is not a PeerResponse: %v", r.body, err)
	}
	return resp
}

func (r reply) error(t *testing.T) peering.Error {
	t.Helper()
	var e peering.Error
	if err := json.Unmarshal(r.body, &e); err != nil || e.Reason == "" {
		t.Fatalf("body %s is not an auth Error: %v", r.body, err)
	}
	return e
}

// wantError checks the status and reason of a refusal.
func (r reply) wantError(t *testing.T, status int, reason string) peering.Error {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d (%s), want %d %s", r.status, r.body, status, reason)
	}
	got := r.error(t)
	if got.Reason != reason {
		t.Fatalf("reason %s (%s), want %s", got.Reason, got.Message, reason)
	}
	return got
}

// reviewToken returns the user name the API server sees for token, or ""
// when it does not authenticate.
func (e *peeringEnv) reviewToken(t *testing.T, token string) string {
	t.Helper()
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	if err := e.admin.Create(context.Background(), review); err != nil {
		t.Fatal(err)
	}
	if !review.Status.Authenticated {
		return ""
	}
	return review.Status.User.Username
}

// can asks the API server whether the consumer's ServiceAccount may verb
// resource in namespace ("" for cluster-wide).
func (e *peeringEnv) can(t *testing.T, c consumer, verb, group, resource, namespace string) bool {
	t.Helper()
	ns := offloadv1alpha1.TenantNamespace(c.name)
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + ns + ":" + offloadv1alpha1.ConsumerServiceAccount,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Namespace: namespace},
	}}
	if err := e.admin.Create(context.Background(), sar); err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

// assertNothingFor checks that no Tenant, tenant namespace or
// ServiceAccount exists for c.
func (e *peeringEnv) assertNothingFor(t *testing.T, c consumer) {
	t.Helper()
	ctx := context.Background()
	for _, o := range []client.Object{
		&offloadv1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: c.name}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.TenantNamespace(c.name)}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: offloadv1alpha1.TenantNamespace(c.name)}},
	} {
		err := e.admin.Get(ctx, client.ObjectKeyFromObject(o), o)
		if err == nil && o.GetDeletionTimestamp() == nil {
			t.Errorf("%T %s exists after a failed peering", o, client.ObjectKeyFromObject(o))
		} else if err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
	var claim coordinationv1.Lease
	err := e.admin.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: claimName(c.id)}, &claim)
	if err == nil && ptr.Deref(claim.Spec.HolderIdentity, "") == c.name {
		t.Errorf("the claim of cluster ID %s names %s after a failed peering", c.id, c.name)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}

// assertLogsHoldNoSecret fails when a token secret or a credential the test
// saw appears in the service's logs.
func (e *peeringEnv) assertLogsHoldNoSecret(t *testing.T) {
	t.Helper()
	logs := e.logs.String()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.secrets {
		if s != "" && strings.Contains(logs, s) {
			t.Errorf("the logs contain a token or credential:\n%s", logs)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) WriteLine(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.WriteString(s + "\n")
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
