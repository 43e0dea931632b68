package virtualnode

import (
	"context"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/summary"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// waitTimeout bounds each wait of these tests.
const waitTimeout = 30 * time.Second

func resources(cpu, memory, pods string) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory), corev1.ResourcePods: resource.MustParse(pods),
	}
}

// testPeering is one API server playing both clusters: a tenant namespace with
// the provider's ResourceOffer, a kubeconfig Secret for it and an
// authenticated ForeignCluster.
type testPeering struct {
	admin  client.Client
	fc     *offloadv1alpha1.ForeignCluster
	offer  *offloadv1alpha1.ResourceOffer
	tenant string
	r      *Reconciler
}

// peeringOption changes the cluster newPeering makes, or the controller,
// before the controller starts.
type peeringOption func(t *testing.T, admin client.Client, name string, r *Reconciler)

// withStaleVirtualNode leaves a VirtualNode of the name that an earlier
// ForeignCluster owns, as the garbage collector may for a while.
func withStaleVirtualNode(t *testing.T, admin client.Client, name string, _ *Reconciler) {
	mustCreate(t, admin, &offloadv1alpha1.VirtualNode{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: offloadv1alpha1.GroupVersion.String(), Kind: "ForeignCluster", Name: name, UID: "00000000-0000-0000-0000-000000000002", Controller: ptr.To(true),
		}}},
		Spec: offloadv1alpha1.VirtualNodeSpec{NodeName: offloadv1alpha1.VirtualNodeName(name), CredentialsName: name, ClusterID: "stale"},
	})
}

func newPeering(t *testing.T, opts ...peeringOption) *testPeering {
	t.Helper()
	ctx := context.Background()
	cfg := envtest.APIServer(t)
	admin := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, admin)
	install := envtest.NewNamespace(t, admin, "vn")
	tenant := envtest.NewNamespace(t, admin, "vn")
	providerName := "provider-" + rand.String(6)

	p := &testPeering{admin: admin, tenant: tenant}
	p.offer = &offloadv1alpha1.ResourceOffer{
		ObjectMeta: metav1.ObjectMeta{Name: providerName, Namespace: tenant},
		Spec:       offloadv1alpha1.ResourceOfferSpec{ClusterID: string(uuid.NewUUID()), ClusterName: providerName, Resources: resources("4", "8Gi", "110")},
	}
	mustCreate(t, admin, p.offer)

	kubeconfig, err := clientcmd.Load(envtest.APIServerKubeconfig(t))
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig.Contexts[kubeconfig.CurrentContext].Namespace = tenant
	data, err := clientcmd.Write(*kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	p.fc = &offloadv1alpha1.ForeignCluster{
		ObjectMeta: metav1.ObjectMeta{Name: providerName},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: p.offer.Spec.ClusterID, ClusterName: providerName,
			OutgoingPeering: offloadv1alpha1.OutgoingPeering{Enabled: true}},
	}
	mustCreate(t, admin, p.fc)
	t.Cleanup(func() { _ = admin.Delete(context.Background(), p.fc) })
	mustCreate(t, admin, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: peering.PeerKubeconfigSecretName(p.fc.Name), Namespace: install},
		Type:       peering.PeerKubeconfigSecretType,
		Data:       map[string][]byte{peering.PeerKubeconfigKey: data},
	})
	// What the credentials controller reports once it holds credentials.
	pc := &offloadv1alpha1.PeeringCredentials{ObjectMeta: metav1.ObjectMeta{Name: providerName},
		Spec: offloadv1alpha1.PeeringCredentialsSpec{SecretName: peering.PeerKubeconfigSecretName(providerName)}}
	if err := controllerutil.SetControllerReference(p.fc, pc, admin.Scheme()); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, admin, pc)
	meta.SetStatusCondition(&pc.Status.Conditions, metav1.Condition{
		Type: offloadv1alpha1.ConditionAuthenticated, Status: metav1.ConditionTrue, Reason: "Authenticated", Message: "test"})
	if err := admin.Status().Update(ctx, pc); err != nil {
		t.Fatal(err)
	}

	r := &Reconciler{Namespace: install, PollInterval: 500 * time.Millisecond}
	p.r = r
	for _, opt := range opts {
		opt(t, admin, providerName, r)
	}
	envtest.StartManager(t, cfg, func(mgr ctrlmanager.Manager) error {
		if err := (&summary.Reconciler{Client: mgr.GetClient(), Namespace: install}).SetupWithManager(mgr); err != nil {
			return err
		}
		r.Client = mgr.GetClient()
		return r.SetupWithManager(mgr)
	})
	return p
}

func (p *testPeering) node(ctx context.Context) (*corev1.Node, error) {
	var n corev1.Node
	err := p.admin.Get(ctx, client.ObjectKey{Name: offloadv1alpha1.VirtualNodeName(p.fc.Name)}, &n)
	return &n, err
}

func (p *testPeering) condition(ctx context.Context, t string) *metav1.Condition {
	var fc offloadv1alpha1.ForeignCluster
	if err := p.admin.Get(ctx, client.ObjectKeyFromObject(p.fc), &fc); err != nil {
		return nil
	}
	return meta.FindStatusCondition(fc.Status.Conditions, t)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func sameResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

// untaintedOver makes the controller register its node untainted
// (virtualNodes.taint=false) where an agent installed with the taint
// registered it before, next to a taint of the cluster's admin.
func untaintedOver(t *testing.T, admin client.Client, name string, r *Reconciler) {
	r.Untainted = true
	mustCreate(t, admin, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.VirtualNodeName(name), Labels: map[string]string{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{adminsTaint, offloadv1alpha1.VirtualNodeTaint()}},
	})
}

// adminsTaint is a taint of the consumer's admin on a virtual node.
var adminsTaint = corev1.Taint{Key: "example.com/maintenance", Value: "soon", Effect: corev1.TaintEffectPreferNoSchedule}

func TestAVirtualNodeRegisteredWithTheTaintLosesItWhenTheAgentSaysUntainted(t *testing.T) {
	p := newPeering(t, untaintedOver)
	framework.Eventually(t, waitTimeout, "the virtual node is Ready, without the virtual-node taint, with the admin's", func(ctx context.Context) bool {
		n, err := p.node(ctx)
		return err == nil && nodeReady(n) && offloadv1alpha1.VirtualNodeUntainted(n) &&
			slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&adminsTaint) && t.Value == adminsTaint.Value })
	})
}

// taintedOver makes the controller register its node with the taint where
// an agent installed with virtualNodes.taint=false registered it before.
func taintedOver(t *testing.T, admin client.Client, name string, _ *Reconciler) {
	mustCreate(t, admin, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.VirtualNodeName(name), Labels: map[string]string{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{adminsTaint}},
	})
}

func TestAVirtualNodeRegisteredUntaintedGetsTheTaintBack(t *testing.T) {
	p := newPeering(t, taintedOver)
	framework.Eventually(t, waitTimeout, "the virtual node is Ready, with the virtual-node taint and the admin's", func(ctx context.Context) bool {
		n, err := p.node(ctx)
		return err == nil && nodeReady(n) && !offloadv1alpha1.VirtualNodeUntainted(n) &&
			slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&adminsTaint) && t.Value == adminsTaint.Value })
	})
}

func TestAVirtualNodeLeftByAnEarlierPeeringOfTheSameNameIsReplaced(t *testing.T) {
	p := newPeering(t, withStaleVirtualNode)
	framework.Eventually(t, waitTimeout, "VirtualNodeReady is True, from the peering's own VirtualNode", func(ctx context.Context) bool {
		r := p.condition(ctx, offloadv1alpha1.ConditionVirtualNodeReady)
		return r != nil && r.Status == metav1.ConditionTrue
	})
	var vn offloadv1alpha1.VirtualNode
	if err := p.admin.Get(context.Background(), client.ObjectKeyFromObject(p.fc), &vn); err != nil {
		t.Fatal(err)
	}
	var fc offloadv1alpha1.ForeignCluster
	if err := p.admin.Get(context.Background(), client.ObjectKeyFromObject(p.fc), &fc); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(&vn, &fc) || vn.Spec.ClusterID != fc.Spec.ClusterID {
		t.Errorf("VirtualNode %s is owned by %v for cluster %s, want the ForeignCluster's own", vn.Name, vn.OwnerReferences, vn.Spec.ClusterID)
	}
}

func TestTheVirtualNodeFollowsTheOfferAndTheForeignCluster(t *testing.T) {
	p := newPeering(t)
	ctx := context.Background()

	framework.Eventually(t, waitTimeout, "the virtual node is Ready with the offer's capacity", func(ctx context.Context) bool {
		n, err := p.node(ctx)
		return err == nil && nodeReady(n) && sameResources(n.Status.Capacity, p.offer.Spec.Resources) &&
			sameResources(n.Status.Allocatable, p.offer.Spec.Resources)
	})
	n, err := p.node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{
		"offload.io/type": "virtual-node", "offload.io/remote-cluster-id": p.fc.Spec.ClusterID,
		"kubernetes.io/role": "agent", "type": "virtual-kubelet", "kubernetes.io/os": "linux",
	}
	for k, v := range wantLabels {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	// The node reports the provider's Kubernetes version, as a real node
	// reports its kubelet's; the provider here is the test's API server.
	dc, err := discovery.NewDiscoveryClientForConfig(envtest.APIServer(t))
	if err != nil {
		t.Fatal(err)
	}
	providerVersion, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Status.NodeInfo.KubeletVersion; got != providerVersion.GitVersion {
		t.Errorf("kubelet version %q, want the provider's %q", got, providerVersion.GitVersion)
	}
	wantTaint := corev1.Taint{Key: "offload.io/virtual-node", Value: "true", Effect: corev1.TaintEffectNoExecute}
	// The API server adds node.kubernetes.io/not-ready:NoSchedule at
	// registration, and the node lifecycle controller removes it later.
	hasTaint := false
	for _, taint := range n.Spec.Taints {
		hasTaint = hasTaint || taint.MatchTaint(&wantTaint) && taint.Value == wantTaint.Value
	}
	if !hasTaint {
		t.Errorf("taints %v, want %v among them", n.Spec.Taints, wantTaint)
	}
	framework.Eventually(t, waitTimeout, "the node's Lease is renewed in kube-node-lease", func(ctx context.Context) bool {
		var l coordinationv1.Lease
		err := p.admin.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: n.Name}, &l)
		return err == nil && l.Spec.RenewTime != nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == n.Name
	})
	framework.Eventually(t, waitTimeout, "OutgoingPeering and VirtualNodeReady are True", func(ctx context.Context) bool {
		o, r := p.condition(ctx, offloadv1alpha1.ConditionOutgoingPeering), p.condition(ctx, offloadv1alpha1.ConditionVirtualNodeReady)
		return o != nil && o.Status == metav1.ConditionTrue && o.Reason == ReasonEstablished && r != nil && r.Status == metav1.ConditionTrue
	})
	var fc offloadv1alpha1.ForeignCluster
	if err := p.admin.Get(ctx, client.ObjectKeyFromObject(p.fc), &fc); err != nil || fc.Status.Outgoing != offloadv1alpha1.PhaseEstablished {
		t.Errorf("status.outgoing = %q (%v), want Established", fc.Status.Outgoing, err)
	}

	// The provider lends more.
	if err := p.admin.Get(ctx, client.ObjectKeyFromObject(p.offer), p.offer); err != nil {
		t.Fatal(err)
	}
	p.offer.Spec.Resources = resources("6", "12Gi", "200")
	if err := p.admin.Update(ctx, p.offer); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the capacity follows the offer", func(ctx context.Context) bool {
		n, err := p.node(ctx)
		return err == nil && sameResources(n.Status.Capacity, p.offer.Spec.Resources) && sameResources(n.Status.Allocatable, p.offer.Spec.Resources)
	})
	// The metrics offer what the node does.
	if stats := p.r.PeerStats(); len(stats) != 1 || stats[0].Peer != p.fc.Name || !sameResources(stats[0].Offered, p.offer.Spec.Resources) {
		t.Errorf("the peers' stats are %+v, want %s offering %v", stats, p.fc.Name, p.offer.Spec.Resources)
	}

	// The provider stops serving the offer: the ping fails.
	if err := p.admin.Delete(ctx, p.offer); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "VirtualNodeReady turns False while the ping fails", func(ctx context.Context) bool {
		c := p.condition(ctx, offloadv1alpha1.ConditionVirtualNodeReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonProviderUnreachable
	})
	framework.Eventually(t, waitTimeout, "the node turns NotReady while the provider does not answer", func(ctx context.Context) bool {
		return nodeReadyStatus(ctx, p) == corev1.ConditionFalse
	})
	p.offer.ResourceVersion = ""
	mustCreate(t, p.admin, p.offer)
	framework.Eventually(t, waitTimeout, "VirtualNodeReady is True again once the ping succeeds", func(ctx context.Context) bool {
		c := p.condition(ctx, offloadv1alpha1.ConditionVirtualNodeReady)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	framework.Eventually(t, waitTimeout, "the node is Ready again", func(ctx context.Context) bool {
		return nodeReadyStatus(ctx, p) == corev1.ConditionTrue
	})

	// The peering goes away.
	if err := p.admin.Delete(ctx, p.fc); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the virtual node and its Lease are deleted", func(ctx context.Context) bool {
		_, err := p.node(ctx)
		var l coordinationv1.Lease
		leaseErr := p.admin.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: offloadv1alpha1.VirtualNodeName(p.fc.Name)}, &l)
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(leaseErr)
	})
}

func mustCreate(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// nodeReadyStatus returns the status of the virtual node's Ready condition.
func nodeReadyStatus(ctx context.Context, p *testPeering) corev1.ConditionStatus {
	n, err := p.node(ctx)
	if err != nil {
		return ""
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}
