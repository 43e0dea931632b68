package namespaceoffloading

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

func TestAnOffloadedNamespaceGetsARemoteNamespaceAndIsReadyOnceTheProviderServesIt(t *testing.T) {
	e := newEnv(t)
	p := e.addPeer(nil)
	e.offload(offloadv1alpha1.NamespaceOffloadingSpec{})

	// A new NamespaceOffloading is looked at again soon while not Ready.
	if res := e.reconcile(); res.RequeueAfter < minPendingRequeue || res.RequeueAfter > time.Second {
		t.Errorf("requeue after %s, want about %s while new and not Ready", res.RequeueAfter, minPendingRequeue)
	}
	twin := offloadv1alpha1.TwinNamespace(e.ns, e.id.Name, e.id.ID)
	rn := e.remote(p)
	if rn == nil {
		t.Fatalf("no RemoteNamespace %s in tenant namespace %s", e.ns, p.tenant)
	}
	want := offloadv1alpha1.RemoteNamespaceSpec{ConsumerClusterID: e.id.ID, SourceNamespace: e.ns, TargetNamespace: twin, MappingStrategy: offloadv1alpha1.DefaultName}
	if rn.Spec != want {
		t.Errorf("RemoteNamespace spec %+v, want %+v", rn.Spec, want)
	}
	if got := e.namespaceLabels()[offloadv1alpha1.LabelOffloaded]; got != "true" {
		t.Errorf("label %s = %q, want true", offloadv1alpha1.LabelOffloaded, got)
	}
	if !controllerutil.ContainsFinalizer(e.get(), offloadv1alpha1.FinalizerNamespaceOffloading) {
		t.Errorf("no finalizer %s", offloadv1alpha1.FinalizerNamespaceOffloading)
	}
	got := e.entry(p)
	if got == nil || got.Phase != offloadv1alpha1.RemoteNamespacePending || got.RemoteNamespace != twin || got.ClusterName != p.fc.Spec.ClusterName {
		t.Fatalf("entry %+v, want Pending for twin namespace %s on %s", got, twin, p.fc.Spec.ClusterName)
	}
	e.wantReady(metav1.ConditionUnknown, ReasonPending)

	e.serve(p, offloadv1alpha1.RemoteNamespaceReady, "namespace is ready")
	if res := e.reconcile(); res.RequeueAfter != readyRequeue {
		t.Errorf("requeue after %s, want %s once Ready", res.RequeueAfter, readyRequeue)
	}
	if got := e.entry(p); got == nil || got.Phase != offloadv1alpha1.RemoteNamespaceReady {
		t.Errorf("entry %+v, want Ready", got)
	}
	e.wantReady(metav1.ConditionTrue, ReasonRemoteNamespacesReady)
}

func TestEnforceSameNameAsksForTheNamespaceNameItself(t *testing.T) {
	e := newEnv(t)
	p := e.addPeer(nil)
	e.offload(offloadv1alpha1.NamespaceOffloadingSpec{NamespaceMappingStrategy: offloadv1alpha1.EnforceSameName})
	e.reconcile()

	rn := e.remote(p)
	if rn == nil || rn.Spec.TargetNamespace != e.ns || rn.Spec.MappingStrategy != offloadv1alpha1.EnforceSameName {
		t.Fatalf("RemoteNamespace %+v, want target %s with EnforceSameName", rn, e.ns)
	}
	if got := e.entry(p); got == nil || got.RemoteNamespace != e.ns {
		t.Errorf("entry %+v, want remote namespace %s", got, e.ns)
	}
}

func TestAFailedRemoteNamespaceFailsTheOffloadingWithTheProvidersMessage(t *testing.T) {
	e := newEnv(t)
	p := e.addPeer(nil)
	e.offload(offloadv1alpha1.NamespaceOffloadingSpec{NamespaceMappingStrategy: offloadv1alpha1.EnforceSameName})
	e.reconcile()
	const message = "namespace already exists on the provider and belongs to someone else"
	e.serve(p, offloadv1alpha1.RemoteNamespaceFailed, message)
	e.reconcile()

	if got := e.entry(p); got == nil || got.Phase != offloadv1alpha1.RemoteNamespaceFailed || got.Message != message {
		t.Errorf("entry %+v, want Failed with the provider's message", got)
	}
	e.wantReady(metav1.ConditionFalse, ReasonRemoteNamespaceFailed)
}

func TestNoMatchingPeerIsReportedAsNoPeer(t *testing.T) {
	e := newEnv(t)
	p := e.addPeer(map[string]string{"region": "us"})
	e.offload(offloadv1alpha1.NamespaceOffloadingSpec{ClusterSelector: selector("region", "eu")})
	e.reconcile()

	if rn := e.remote(p); rn != nil {
		t.Errorf("RemoteNamespace %s made for a peer the selector does not match", rn.Name)
	}
	if n := len(e.get().Status.RemoteNamespaces); n != 0 {
		t.Errorf("%d status entries, want none", n)
	}
	e.wantReady(metav1.ConditionFalse, ReasonNoPeer)
}

func TestTheLocalStrategyIsReadyWithoutPeers(t *testing.T) {
	e := newEnv(t)
	e.offload(offloadv1alpha1.NamespaceOffloadingSpec{PodOffloadingStrategy: offloadv1alpha1.Local, ClusterSelector: selector("region", "nowhere")})
	e.reconcile()

	e.wantReady(metav1.ConditionTrue, ReasonPodsStayLocal)
	if got := e.namespaceLabels()[offloadv1alpha1.LabelOffloaded]; got != "true" {
		t.Errorf("label %s = %q, want true", offloadv1alpha1.LabelOffloaded, got)
	}
}

func TestAPeerTheSelectorNoLongerMatchesLosesItsRemoteNamespace(t *testing.T) {
	e := newEnv(t)
	eu := e.addPeer(map[string]string{"region": "eu"})
	us := e.addPeer(map[string]string{"region": "us"})
	e.offload(offloadv1alpha1.NamespaceOffloadingSpec{})
	e.reconcile()
	if e.remote(eu) == nil || e.remote(us) == nil {
		t.Fatal("want a RemoteNamespace on both peers")
	}
	e.serve(eu, offloadv1alpha1.RemoteNamespaceReady, "ready")

	no := e.get()
	no.Spec.ClusterSelector = selector("region", "eu")
	if err := e.c.Update(context.Background(), no); err != nil {
		t.Fatal(err)
	}
	e.reconcile()

	if e.remote(us) != nil {
		t.Error("the deselected peer still has its RemoteNamespace")
	}
	if e.entry(us) != nil {
		t.Error("the deselected peer still has a status entry")
	}
	if e.remote(eu) == nil || e.entry(eu) == nil {
		t.Error("the selected peer lost its RemoteNamespace")
	}
	e.wantReady(metav1.ConditionTrue, ReasonRemoteNamespacesReady)
}

func TestAnUnreachableProviderKeepsItsLastKnownPhase(t *testing.T) {
	e := newEnv(t)
	p := e.addPeer(nil)
	e.offload(offloadv1alpha1.NamespaceOffloadingSpec{})
	e.reconcile()
	e.serve(p, offloadv1alpha1.RemoteNamespaceReady, "ready")
	e.reconcile()

	// The provider moves away: nothing listens on port 1.
	unreachable := clientcmdapi.NewConfig()
	unreachable.Clusters["p"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", InsecureSkipTLSVerify: true}
	unreachable.AuthInfos["p"] = &clientcmdapi.AuthInfo{Token: "t"}
	unreachable.Contexts["p"] = &clientcmdapi.Context{Cluster: "p", AuthInfo: "p", Namespace: p.tenant}
	unreachable.CurrentContext = "p"
	data, err := clientcmd.Write(*unreachable)
	if err != nil {
		t.Fatal(err)
	}
	var secret corev1.Secret
	key := types.NamespacedName{Namespace: e.install, Name: peering.PeerKubeconfigSecretName(p.fc.Name)}
	if err := e.c.Get(context.Background(), key, &secret); err != nil {
		t.Fatal(err)
	}
	secret.Data[peering.PeerKubeconfigKey] = data
	if err := e.c.Update(context.Background(), &secret); err != nil {
		t.Fatal(err)
	}
	e.reconcile()

	got := e.entry(p)
	if got == nil || got.Phase != offloadv1alpha1.RemoteNamespaceReady || got.Message == "ready" {
		t.Errorf("entry %+v, want the last known phase Ready with a message saying the provider is unreachable", got)
	}
}

func TestDeletionWaitsForTheProvidersThenReleasesTheNamespace(t *testing.T) {
	e := newEnv(t)
	p := e.addPeer(nil)
	e.offload(offloadv1alpha1.NamespaceOffloadingSpec{})
	e.reconcile()
	// Play the provider's finalizer, which holds the RemoteNamespace until
	// the twin namespace is gone.
	rn := e.remote(p)
	controllerutil.AddFinalizer(rn, "offload.io/remote-namespace")
	if err := e.c.Update(context.Background(), rn); err != nil {
		t.Fatal(err)
	}

	if err := e.c.Delete(context.Background(), e.get()); err != nil {
		t.Fatal(err)
	}
	if res := e.reconcile(); res.RequeueAfter == 0 {
		t.Error("no requeue while the provider deletes the twin namespace")
	}
	rn = e.remote(p)
	if rn == nil || rn.DeletionTimestamp.IsZero() {
		t.Fatalf("RemoteNamespace %+v, want it being deleted", rn)
	}
	no := e.get()
	if no == nil || !controllerutil.ContainsFinalizer(no, offloadv1alpha1.FinalizerNamespaceOffloading) {
		t.Fatal("the NamespaceOffloading went before its RemoteNamespace")
	}
	if got := e.entry(p); got == nil || got.Phase != offloadv1alpha1.RemoteNamespaceTerminating {
		t.Errorf("entry %+v, want Terminating", got)
	}
	if e.namespaceLabels()[offloadv1alpha1.LabelOffloaded] == "" {
		t.Error("the namespace lost its label before the twin namespace went")
	}

	controllerutil.RemoveFinalizer(rn, "offload.io/remote-namespace")
	if err := e.c.Update(context.Background(), rn); err != nil {
		t.Fatal(err)
	}
	e.reconcile()

	if _, ok := e.namespaceLabels()[offloadv1alpha1.LabelOffloaded]; ok {
		t.Error("the namespace still has its label")
	}
	if no := e.get(); no != nil {
		t.Errorf("the NamespaceOffloading is still there, finalizers %v", no.Finalizers)
	}
}
