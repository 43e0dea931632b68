package namespaceoffloading

import (
	"context"
	"maps"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestMain(m *testing.M) { os.Exit(envtest.RunWithAPIServer(m)) }

// env is one API server playing the consumer and its providers: each
// provider is a tenant namespace the consumer's kubeconfig points into.
type env struct {
	t       *testing.T
	c       client.Client
	r       *Reconciler
	install string
	// ns is the consumer namespace the test offloads.
	ns string
	id struct{ ID, Name string }
}

// testPeer is one provider as the consumer sees it.
type testPeer struct {
	fc     *offloadv1alpha1.ForeignCluster
	tenant string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, c)
	e := &env{t: t, c: c, install: envtest.NewNamespace(t, c, "install")}
	e.id.ID, e.id.Name = string(uuid.NewUUID()), "consumer-"+rand.String(5)
	e.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.IdentityConfigMap, Namespace: e.install},
		Data: map[string]string{"clusterID": e.id.ID, "clusterName": e.id.Name}})
	e.r = &Reconciler{Client: c, Reader: c, Namespace: e.install}
	e.ns = envtest.NewNamespace(t, c, "shop")
	return e
}

func (e *env) create(o client.Object) {
	e.t.Helper()
	if err := e.c.Create(context.Background(), o); err != nil {
		e.t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
	}
}

// addPeer peers with a new provider, authenticated, whose virtual node
// has the given extra labels.
func (e *env) addPeer(nodeLabels map[string]string) *testPeer {
	e.t.Helper()
	ctx := context.Background()
	p := &testPeer{tenant: envtest.NewNamespace(e.t, e.c, "tenant")}
	name := "provider-" + rand.String(6)
	kubeconfig, err := clientcmd.Load(envtest.APIServerKubeconfig(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	kubeconfig.Contexts[kubeconfig.CurrentContext].Namespace = p.tenant
	data, err := clientcmd.Write(*kubeconfig)
	if err != nil {
		e.t.Fatal(err)
	}
	e.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: peering.PeerKubeconfigSecretName(name), Namespace: e.install},
		Type:       peering.PeerKubeconfigSecretType,
		Data:       map[string][]byte{peering.PeerKubeconfigKey: data},
	})
	p.fc = &offloadv1alpha1.ForeignCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: string(uuid.NewUUID()), ClusterName: name,
			OutgoingPeering: offloadv1alpha1.OutgoingPeering{Enabled: true}},
	}
	e.create(p.fc)
	e.t.Cleanup(func() { _ = e.c.Delete(context.Background(), p.fc) })
	meta.SetStatusCondition(&p.fc.Status.Conditions, metav1.Condition{
		Type: offloadv1alpha1.ConditionAuthenticated, Status: metav1.ConditionTrue, Reason: "Authenticated", Message: "test"})
	if err := e.c.Status().Update(ctx, p.fc); err != nil {
		e.t.Fatal(err)
	}
	l := map[string]string{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode, offloadv1alpha1.LabelRemoteClusterID: p.fc.Spec.ClusterID}
	maps.Copy(l, nodeLabels)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.VirtualNodeName(name), Labels: l}}
	e.create(node)
	e.t.Cleanup(func() { _ = e.c.Delete(context.Background(), node) })
	return p
}

// offload creates the NamespaceOffloading of e.ns.
func (e *env) offload(spec offloadv1alpha1.NamespaceOffloadingSpec) *offloadv1alpha1.NamespaceOffloading {
	e.t.Helper()
	no := &offloadv1alpha1.NamespaceOffloading{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.NamespaceOffloadingName, Namespace: e.ns}, Spec: spec}
	e.create(no)
	return no
}

func (e *env) reconcile() reconcile.Result {
	e.t.Helper()
	res, err := e.r.Reconcile(context.Background(), reconcile.Request{
		NamespacedName: types.NamespacedName{Namespace: e.ns, Name: offloadv1alpha1.NamespaceOffloadingName}})
	if err != nil {
		e.t.Fatalf("reconcile: %v", err)
	}
	return res
}

// get reads the NamespaceOffloading; nil once it is gone.
func (e *env) get() *offloadv1alpha1.NamespaceOffloading {
	e.t.Helper()
	var no offloadv1alpha1.NamespaceOffloading
	err := e.c.Get(context.Background(), types.NamespacedName{Namespace: e.ns, Name: offloadv1alpha1.NamespaceOffloadingName}, &no)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return &no
}

// entry returns the status entry of p, nil when there is none.
func (e *env) entry(p *testPeer) *offloadv1alpha1.RemoteNamespaceStatus {
	e.t.Helper()
	for _, rn := range e.get().Status.RemoteNamespaces {
		if rn.ClusterID == p.fc.Spec.ClusterID {
			return &rn
		}
	}
	return nil
}

// remote returns the RemoteNamespace of e.ns in p's tenant namespace, nil
// when there is none.
func (e *env) remote(p *testPeer) *offloadv1alpha1.RemoteNamespace {
	e.t.Helper()
	var rn offloadv1alpha1.RemoteNamespace
	err := e.c.Get(context.Background(), types.NamespacedName{Namespace: p.tenant, Name: e.ns}, &rn)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return &rn
}

// serve plays the provider's controller: it sets the phase of p's
// RemoteNamespace and its Ready condition.
func (e *env) serve(p *testPeer, phase offloadv1alpha1.RemoteNamespacePhase, message string) {
	e.t.Helper()
	rn := e.remote(p)
	if rn == nil {
		e.t.Fatalf("no RemoteNamespace in tenant namespace %s", p.tenant)
	}
	status := metav1.ConditionFalse
	if phase == offloadv1alpha1.RemoteNamespaceReady {
		status = metav1.ConditionTrue
	}
	rn.Status.Phase = phase
	meta.SetStatusCondition(&rn.Status.Conditions, metav1.Condition{Type: offloadv1alpha1.ConditionReady, Status: status,
		Reason: "Test", Message: message, ObservedGeneration: rn.Generation})
	if err := e.c.Status().Update(context.Background(), rn); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) namespaceLabels() map[string]string {
	e.t.Helper()
	var ns corev1.Namespace
	if err := e.c.Get(context.Background(), types.NamespacedName{Name: e.ns}, &ns); err != nil {
		e.t.Fatal(err)
	}
	return ns.Labels
}

// wantReady checks the Ready condition's status and reason, and that it
// was written for the current generation.
func (e *env) wantReady(status metav1.ConditionStatus, reason string) {
	e.t.Helper()
	no := e.get()
	c := meta.FindStatusCondition(no.Status.Conditions, offloadv1alpha1.ConditionReady)
	if c == nil || c.Status != status || c.Reason != reason || c.ObservedGeneration != no.Generation {
		e.t.Fatalf("Ready %+v (generation %d), want %s %s for the current generation", c, no.Generation, status, reason)
	}
}

func selector(key, value string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}}}}}
}
