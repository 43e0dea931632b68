package summary

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/ssa"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// statusManagers returns the field managers of obj's status.
func statusManagers(obj client.Object) map[string]bool {
	out := map[string]bool{}
	for _, m := range obj.GetManagedFields() {
		if m.Subresource == "status" {
			out[m.Manager] = true
		}
	}
	return out
}

func TestTheSummaryIsTheOneWriterOfTheForeignClustersStatus(t *testing.T) {
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, c)
	ctx := context.Background()
	name := "peer-" + rand.String(5)
	const id = "11111111-2222-4333-8444-999999999999"
	fc := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: id, ClusterName: name, OutgoingPeering: offloadv1alpha1.OutgoingPeering{Enabled: true}}}
	if err := c.Create(ctx, fc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), fc) })
	ns := envtest.NewNamespace(t, c, "offload")
	envtest.StartManager(t, cfg, func(mgr ctrlmanager.Manager) error {
		return (&Reconciler{Client: mgr.GetClient(), Namespace: ns}).SetupWithManager(mgr)
	})

	// The children, each written by its own field manager, as the
	// credentials controller and the virtual node's runtime do.
	pc := &offloadv1alpha1.PeeringCredentials{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: offloadv1alpha1.PeeringCredentialsSpec{SecretName: "s"}}
	vn := &offloadv1alpha1.VirtualNode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: offloadv1alpha1.VirtualNodeSpec{NodeName: offloadv1alpha1.VirtualNodeName(name), CredentialsName: name, ClusterID: id}}
	for _, child := range []client.Object{pc, vn} {
		if err := controllerutil.SetControllerReference(fc, child, c.Scheme()); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, child); err != nil {
			t.Fatal(err)
		}
	}
	if err := ssa.ApplyStatus(ctx, c, pc, issued(), "offload-credentials"); err != nil {
		t.Fatal(err)
	}
	node := offloadv1alpha1.VirtualNodeStatus{Phase: offloadv1alpha1.PhasePending,
		Conditions: []metav1.Condition{cond(offloadv1alpha1.ConditionReady, metav1.ConditionUnknown, "Starting")}}
	if err := ssa.ApplyStatus(ctx, c, vn, node, "offload-virtual-node"); err != nil {
		t.Fatal(err)
	}
	get := func(ctx context.Context) *offloadv1alpha1.ForeignCluster {
		var got offloadv1alpha1.ForeignCluster
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &got); err != nil {
			return nil
		}
		return &got
	}
	framework.Eventually(t, 20*time.Second, "the ForeignCluster mirrors its children", func(ctx context.Context) bool {
		got := get(ctx)
		return got != nil && got.Status.Role == offloadv1alpha1.RoleConsumer && got.Status.Auth == offloadv1alpha1.PhaseEstablished &&
			meta.FindStatusCondition(got.Status.Conditions, offloadv1alpha1.ConditionVirtualNodeReady) != nil
	})

	// A child's change reaches the summary.
	node.Phase = offloadv1alpha1.PhaseEstablished
	node.Conditions = []metav1.Condition{cond(offloadv1alpha1.ConditionReady, metav1.ConditionTrue, "NodeReady")}
	if err := ssa.ApplyStatus(ctx, c, vn, node, "offload-virtual-node"); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 20*time.Second, "VirtualNodeReady follows the VirtualNode", func(ctx context.Context) bool {
		got := get(ctx)
		return got != nil && meta.IsStatusConditionTrue(got.Status.Conditions, offloadv1alpha1.ConditionVirtualNodeReady) &&
			got.Status.Outgoing == offloadv1alpha1.PhaseEstablished
	})

	// The network: the client Tunnel's report, written by the network
	// controller beside its gateway's, reaches the summary alone.
	tunnel := &offloadv1alpha1.Tunnel{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, name)},
		Spec: offloadv1alpha1.TunnelSpec{ClusterID: id, ClusterName: name, Role: offloadv1alpha1.TunnelClient, LocalPodCIDRs: []string{"10.244.0.0/16"}}}
	if err := controllerutil.SetControllerReference(fc, tunnel, c.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, tunnel); err != nil {
		t.Fatal(err)
	}
	gateway := offloadv1alpha1.TunnelStatus{Connected: true, Conditions: []metav1.Condition{cond(offloadv1alpha1.ConditionReady, metav1.ConditionTrue, "Connected")}}
	network := offloadv1alpha1.TunnelStatus{Phase: offloadv1alpha1.PhaseEstablished,
		Conditions: []metav1.Condition{cond(offloadv1alpha1.ConditionNetworkReady, metav1.ConditionTrue, offloadv1alpha1.ReasonTunnelConnected)}}
	if err := ssa.ApplyStatus(ctx, c, tunnel, gateway, "offload-gateway"); err != nil {
		t.Fatal(err)
	}
	if err := ssa.ApplyStatus(ctx, c, tunnel, network, "offload-network"); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 20*time.Second, "NetworkReady follows the Tunnel", func(ctx context.Context) bool {
		got := get(ctx)
		return got != nil && meta.IsStatusConditionTrue(got.Status.Conditions, offloadv1alpha1.ConditionNetworkReady) &&
			got.Status.Network == offloadv1alpha1.PhaseEstablished
	})
	if m := statusManagers(get(ctx)); len(m) != 1 || !m[FieldManager] {
		t.Errorf("the ForeignCluster's status has managers %v, want %s alone", m, FieldManager)
	}
}
