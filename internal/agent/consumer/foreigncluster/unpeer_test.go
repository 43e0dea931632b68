package foreigncluster

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// newFreshlyPeeredEnv returns a peered consumer whose credentials are
// renewed in half an hour, and its ForeignCluster's name.
func newFreshlyPeeredEnv(t *testing.T) (*consumerEnv, *fakeProvider, string) {
	t.Helper()
	now := time.Now().Truncate(time.Second)
	return newPeeredEnv(t, now.Add(-10*time.Minute), now.Add(50*time.Minute))
}

// deleteForeignCluster deletes the ForeignCluster name, as kubectl offload unpeer does.
func (e *consumerEnv) deleteForeignCluster(t *testing.T, name string) {
	t.Helper()
	if err := e.c.Delete(context.Background(), &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// forceUnpeer sets the annotation kubectl offload unpeer --force sets.
func (e *consumerEnv) forceUnpeer(t *testing.T, name string) {
	t.Helper()
	fc := e.foreignCluster(t, name)
	patch := client.MergeFrom(fc.DeepCopy())
	metav1.SetMetaDataAnnotation(&fc.ObjectMeta, offloadv1alpha1.AnnotationForceUnpeer, "true")
	if err := e.c.Patch(context.Background(), fc, patch); err != nil {
		t.Fatal(err)
	}
}

// assertUnpeered fails unless the peer's Secrets are gone and the
// ForeignCluster name is gone, or goes within a few seconds.
func (e *consumerEnv) assertUnpeered(t *testing.T, name string) {
	t.Helper()
	for _, s := range []string{peering.PeerKubeconfigSecretName(name), peering.PeerTokenSecretName(name)} {
		if e.secret(t, s) != nil {
			t.Errorf("Secret %s still exists", s)
		}
	}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		err := e.c.Get(ctx, types.NamespacedName{Name: name}, &offloadv1alpha1.ForeignCluster{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Errorf("the ForeignCluster is still there: %v", err)
	}
}

func TestPeeringAddsTheUnpeerFinalizerBeforeTheTokenIsSpent(t *testing.T) {
	e := newConsumerEnv(t)
	name := e.peerWith(t, e.pin)
	finalizerOnPeering := false
	e.mu.Lock()
	e.answer = func(w http.ResponseWriter, req peering.PeerRequest, providerID string) {
		var fc offloadv1alpha1.ForeignCluster
		err := e.c.Get(context.Background(), types.NamespacedName{Name: name}, &fc)
		e.mu.Lock()
		finalizerOnPeering = err == nil && controllerutil.ContainsFinalizer(&fc, offloadv1alpha1.FinalizerUnpeer)
		e.mu.Unlock()
		grantCredentials(w, req, providerID)
	}
	e.mu.Unlock()

	if _, err := e.reconcile(t, name); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if e.requestCount() != 1 {
		t.Fatalf("the provider got %d requests, want 1", e.requestCount())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !finalizerOnPeering {
		t.Errorf("the ForeignCluster had no finalizer %s when the token was spent", offloadv1alpha1.FinalizerUnpeer)
	}
	if fc := e.foreignCluster(t, name); !controllerutil.ContainsFinalizer(fc, offloadv1alpha1.FinalizerUnpeer) {
		t.Errorf("finalizers = %v, want %s", fc.Finalizers, offloadv1alpha1.FinalizerUnpeer)
	}
}

func TestAForeignClusterWithoutOutgoingPeeringGetsNoFinalizer(t *testing.T) {
	e := newConsumerEnv(t)
	name := "provider-" + rand.String(6)
	mustCreate(t, e.c, &offloadv1alpha1.ForeignCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       offloadv1alpha1.ForeignClusterSpec{ClusterID: e.providerID, ClusterName: name},
	})
	t.Cleanup(func() {
		_ = e.c.Delete(context.Background(), &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	if _, err := e.reconcile(t, name); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if fc := e.foreignCluster(t, name); len(fc.Finalizers) != 0 {
		t.Errorf("finalizers = %v, want none", fc.Finalizers)
	}
}

func TestDeletingAPeeredClusterRemovesItsTenantOnTheProvider(t *testing.T) {
	tests := []struct {
		name   string
		answer http.HandlerFunc
	}{
		{name: "the provider removes the tenant", answer: unpeered},
		{name: "a provider that no longer accepts the credentials has nothing left to remove", answer: refuse(http.StatusUnauthorized)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, p, name := newFreshlyPeeredEnv(t)
			p.answerUnpeer(tt.answer)
			e.deleteForeignCluster(t, name)

			if _, err := e.reconcile(t, name); err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			calls := p.callsTo(peering.UnpeerPath)
			if len(calls) != 1 {
				t.Fatalf("the provider got %d unpeer calls, want 1", len(calls))
			}
			if want := (providerCall{path: peering.UnpeerPath, bearer: tenantSAToken, body: peering.RefreshRequest{ClusterID: e.consumerID}}); calls[0] != want {
				t.Errorf("the provider got %+v, want %+v", calls[0], want)
			}
			e.assertUnpeered(t, name)
		})
	}
}

func TestAProviderThatCannotUnpeerKeepsTheForeignClusterUntilTheUnpeerIsForced(t *testing.T) {
	tests := []struct {
		name     string
		provider func(*fakeProvider)
	}{
		{name: "the provider is unreachable", provider: func(p *fakeProvider) { p.srv.Close() }},
		{name: "the provider fails", provider: func(p *fakeProvider) { p.answerUnpeer(refuse(http.StatusInternalServerError)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, p, name := newFreshlyPeeredEnv(t)
			tt.provider(p)
			e.deleteForeignCluster(t, name)

			res, err := e.reconcile(t, name)
			if err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			if res.RequeueAfter <= 0 {
				t.Errorf("Reconcile = %+v, want a retry", res)
			}
			fc := e.foreignCluster(t, name)
			if fc.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(fc, offloadv1alpha1.FinalizerUnpeer) {
				t.Errorf("deletion %v, finalizers %v: want the ForeignCluster kept by %s", fc.DeletionTimestamp, fc.Finalizers, offloadv1alpha1.FinalizerUnpeer)
			}
			c := meta.FindStatusCondition(fc.Status.Conditions, offloadv1alpha1.ConditionUnpeered)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonUnpeerFailed || !strings.Contains(c.Message, "kubectl offload unpeer "+name+" --force") {
				t.Errorf("Unpeered = %+v, want False %s with the --force hint", c, ReasonUnpeerFailed)
			}
			assertNoTokens(t, fc)
			if e.secret(t, peering.PeerKubeconfigSecretName(name)) == nil {
				t.Error("the kubeconfig Secret was deleted: the agent cannot retry")
			}

			calls := len(p.callsTo(peering.UnpeerPath))
			e.forceUnpeer(t, name)
			if _, err := e.reconcile(t, name); err != nil {
				t.Fatalf("Reconcile after --force: %v", err)
			}
			if n := len(p.callsTo(peering.UnpeerPath)); n != calls {
				t.Errorf("the provider got %d more unpeer calls after --force, want none", n-calls)
			}
			e.assertUnpeered(t, name)
		})
	}
}

func TestAForcedUnpeerCallsNoProvider(t *testing.T) {
	e, p, name := newFreshlyPeeredEnv(t)
	e.forceUnpeer(t, name)
	e.deleteForeignCluster(t, name)

	if _, err := e.reconcile(t, name); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if n := len(p.callsTo(peering.UnpeerPath)); n != 0 {
		t.Errorf("the provider got %d unpeer calls, want none", n)
	}
	e.assertUnpeered(t, name)
}

func TestAClusterDeletedBeforeItAuthenticatedLeavesNoTokenBehind(t *testing.T) {
	e := newConsumerEnv(t)
	e.answer = refuseExpired
	name := e.peerWith(t, e.pin)
	if _, err := e.reconcile(t, name); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if e.secret(t, peering.PeerTokenSecretName(name)) == nil {
		t.Fatal("the token Secret is gone before the deletion")
	}
	e.deleteForeignCluster(t, name)

	if _, err := e.reconcile(t, name); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if n := e.requestCount(); n != 1 {
		t.Errorf("the provider got %d requests, want only the refused peering", n)
	}
	e.assertUnpeered(t, name)
}
