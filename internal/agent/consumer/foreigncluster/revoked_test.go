package foreigncluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// pointCredentialsAt rewrites the kubeconfig Secret of peer name so that its
// token goes to server, a real API server trusting caPEM, like a provider.
func (e *consumerEnv) pointCredentialsAt(t *testing.T, name, server string, caPEM []byte, token string) {
	t.Helper()
	s := e.secret(t, peering.PeerKubeconfigSecretName(name))
	fresh, err := peering.NewKubeconfigSecret(e.namespace, name, peering.Credentials{
		APIServerURL: server, CACert: string(caPEM), Token: token,
		ExpirationTimestamp: time.Now().Add(time.Hour), TenantNamespace: "tenant-consumer",
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s.Data = fresh.Data
	if err := e.c.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// reportUnauthorized sets CredentialsAccepted=False on peer name's
// VirtualNode, as the virtual node's runtime does when the provider answers
// it 401.
func (e *consumerEnv) reportUnauthorized(t *testing.T, name string) {
	t.Helper()
	fc := e.foreignCluster(t, name)
	vn := &offloadv1alpha1.VirtualNode{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       offloadv1alpha1.VirtualNodeSpec{NodeName: offloadv1alpha1.VirtualNodeName(name), CredentialsName: name, ClusterID: fc.Spec.ClusterID},
	}
	if err := controllerutil.SetControllerReference(fc, vn, e.c.Scheme()); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, e.c, vn)
	meta.SetStatusCondition(&vn.Status.Conditions, metav1.Condition{
		Type: offloadv1alpha1.ConditionCredentialsAccepted, Status: metav1.ConditionFalse,
		Reason: offloadv1alpha1.ReasonUnauthorized, Message: "Unauthorized",
	})
	if err := e.c.Status().Update(context.Background(), vn); err != nil {
		t.Fatal(err)
	}
}

func TestCredentialsTheProviderNoLongerAcceptsMakeAuthenticatedFalse(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	e, _, name := newPeeredEnv(t, now, now.Add(time.Hour))
	cfg := envtest.APIServer(t)
	e.pointCredentialsAt(t, name, cfg.Host, cfg.CAData, "a-revoked-token")

	// Nothing reported yet: the provider is not asked.
	if _, err := e.reconcile(t, name); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if c := authenticated(t, e.foreignCluster(t, name)); c.Status != metav1.ConditionTrue {
		t.Fatalf("Authenticated = %+v before any 401, want True", c)
	}

	e.reportUnauthorized(t, name)
	res, err := e.reconcile(t, name)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if res.RequeueAfter <= 0 {
		t.Errorf("Reconcile = %+v, want a later check", res)
	}
	fc := e.foreignCluster(t, name)
	c := authenticated(t, fc)
	if c.Status != metav1.ConditionFalse || c.Reason != offloadv1alpha1.ReasonUnauthorized {
		t.Fatalf("Authenticated = %+v, want False %s", c, offloadv1alpha1.ReasonUnauthorized)
	}
	if !strings.Contains(c.Message, "kubectl offload unpeer "+name) || !strings.Contains(c.Message, "kubectl offload peer generate") {
		t.Errorf("the message %q does not say what to do", c.Message)
	}
	if fc.Status.Auth != offloadv1alpha1.PhaseFailed {
		t.Errorf("status.auth = %s, want Failed", fc.Status.Auth)
	}
	assertNoTokens(t, fc)

	// A provider that cannot be reached is no verdict: the refusal stands.
	e.pointCredentialsAt(t, name, "https://127.0.0.1:1", cfg.CAData, "a-revoked-token")
	if _, err := e.reconcile(t, name); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if c := authenticated(t, e.foreignCluster(t, name)); c.Status != metav1.ConditionFalse || c.Reason != offloadv1alpha1.ReasonUnauthorized {
		t.Errorf("Authenticated = %+v while the provider is unreachable, want it to stay False %s", c, offloadv1alpha1.ReasonUnauthorized)
	}
}

func TestOnlyAFreshUnauthorizedReportWakesTheController(t *testing.T) {
	vn := func(accepted metav1.ConditionStatus) *offloadv1alpha1.VirtualNode {
		v := &offloadv1alpha1.VirtualNode{}
		if accepted != "" {
			meta.SetStatusCondition(&v.Status.Conditions, metav1.Condition{Type: offloadv1alpha1.ConditionCredentialsAccepted, Status: accepted, Reason: "R"})
		}
		return v
	}
	tests := []struct {
		name          string
		before, after *offloadv1alpha1.VirtualNode
		want          bool
	}{
		{"the virtual node starts seeing 401", vn(metav1.ConditionTrue), vn(metav1.ConditionFalse), true},
		{"the virtual node's first report is a 401", vn(""), vn(metav1.ConditionFalse), true},
		{"the virtual node keeps seeing 401", vn(metav1.ConditionFalse), vn(metav1.ConditionFalse), false},
		{"the provider accepts the credentials again", vn(metav1.ConditionFalse), vn(metav1.ConditionTrue), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := credentialsRefused.Update(event.UpdateEvent{ObjectOld: tt.before, ObjectNew: tt.after}); got != tt.want {
				t.Errorf("predicate = %v, want %v", got, tt.want)
			}
		})
	}
}
