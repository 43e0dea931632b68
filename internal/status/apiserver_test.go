package status

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// testNow is the clock of the peer tests: ages and expiries are relative to it.
var testNow = time.Date(2030, time.January, 2, 12, 0, 0, 0, time.UTC)

func testClock() time.Time { return testNow }

// at returns testNow moved by d.
func at(d time.Duration) *metav1.Time {
	t := metav1.NewTime(testNow.Add(d))
	return &t
}

// apiServer holds clients for a real kube-apiserver that serves the
// chart's CRDs. ForeignClusters, Tenants and Nodes are cluster-scoped, so
// every test removes the ones it creates before it ends.
type apiServer struct {
	kube   kubernetes.Interface
	client client.Client
}

func newAPIServer(t *testing.T) apiServer {
	t.Helper()
	cfg := framework.APIServer(t)
	c := framework.NewClient(t, cfg)
	framework.InstallCRDs(t, c)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return apiServer{kube: kube, client: c}
}

// env returns an Env on the API server whose clock is testNow, without a
// Helm release.
func (a apiServer) env() *Env {
	env := NewEnv(a.kube, a.client, helmclient.New(memoryHelm(), testNamespace), testNamespace)
	env.clock = testClock
	return env
}

// factory returns a Factory with the API server's clients.
func (a apiServer) factory() factory.Factory {
	return fakeFactory{kube: a.kube, client: a.client, helm: memoryHelm()}
}

// testPeer is a peer as the agent would have recorded it.
type testPeer struct {
	fc *offloadv1alpha1.ForeignCluster
	// node is the virtual node, with its status; nil when there is none.
	node *corev1.Node
	// tenant is the provider's record of the peer as a consumer, with its status.
	tenant *offloadv1alpha1.Tenant
	// unpeering deletes the ForeignCluster, which a finalizer keeps.
	unpeering bool
}

// create stores p with its status, and removes it when the test ends.
func (a apiServer) create(t *testing.T, p testPeer) {
	t.Helper()
	ctx := context.Background()
	fc := p.fc.DeepCopy()
	if p.unpeering {
		fc.Finalizers = []string{offloadv1alpha1.FinalizerUnpeer}
	}
	if err := a.client.Create(ctx, fc); err != nil {
		t.Fatalf("creating ForeignCluster %s: %v", fc.Name, err)
	}
	t.Cleanup(func() { a.deleteForeignCluster(t, fc.Name) })
	fc.Status = p.fc.Status
	if err := a.client.Status().Update(ctx, fc); err != nil {
		t.Fatalf("setting the status of ForeignCluster %s: %v", fc.Name, err)
	}
	if p.unpeering {
		if err := a.client.Delete(ctx, fc); err != nil {
			t.Fatal(err)
		}
	}
	if p.node != nil {
		node, err := a.kube.CoreV1().Nodes().Create(ctx, p.node, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating node %s: %v", p.node.Name, err)
		}
		t.Cleanup(func() {
			if err := a.kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}); err != nil {
				t.Error(err)
			}
		})
		node.Status = p.node.Status
		if _, err := a.kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("setting the status of node %s: %v", node.Name, err)
		}
	}
	if p.tenant != nil {
		tenant := p.tenant.DeepCopy()
		if err := a.client.Create(ctx, tenant); err != nil {
			t.Fatalf("creating Tenant %s: %v", tenant.Name, err)
		}
		t.Cleanup(func() {
			if err := a.client.Delete(context.Background(), tenant); err != nil {
				t.Error(err)
			}
		})
		tenant.Status = p.tenant.Status
		if err := a.client.Status().Update(ctx, tenant); err != nil {
			t.Fatalf("setting the status of Tenant %s: %v", tenant.Name, err)
		}
	}
}

// deleteForeignCluster removes ForeignCluster name, finalizers and all. A
// custom resource without finalizers is gone once Delete returns.
func (a apiServer) deleteForeignCluster(t *testing.T, name string) {
	ctx := context.Background()
	fc := &offloadv1alpha1.ForeignCluster{}
	if err := a.client.Get(ctx, client.ObjectKey{Name: name}, fc); err != nil {
		if !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		return
	}
	if len(fc.Finalizers) > 0 {
		fc.Finalizers = nil
		if err := a.client.Update(ctx, fc); err != nil {
			t.Error(err)
			return
		}
	}
	if err := a.client.Delete(ctx, fc); client.IgnoreNotFound(err) != nil {
		t.Error(err)
	}
}

func condition(t string, s metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(testNow.Add(-time.Hour))}
}

func foreignCluster(name, id string, outgoing bool, st offloadv1alpha1.ForeignClusterStatus) *offloadv1alpha1.ForeignCluster {
	fc := &offloadv1alpha1.ForeignCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: offloadv1alpha1.ForeignClusterSpec{
			ClusterID: id, ClusterName: name,
			OutgoingPeering: offloadv1alpha1.OutgoingPeering{Enabled: outgoing},
		},
		Status: st,
	}
	if outgoing {
		fc.Spec.AuthURL = "https://172.18.0.3:31443"
		fc.Spec.CACertHash = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		fc.Status.APIServerURL = "https://172.18.0.3:6443"
	}
	return fc
}

// virtualNode returns the virtual node of peer with its Ready condition.
func virtualNode(peer string, ready corev1.ConditionStatus) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.VirtualNodeName(peer), Labels: map[string]string{"offload.io/type": "virtual-node"}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "ProviderReachable"}},
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"),
				corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"),
				corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
		},
	}
}

// The cluster IDs of the test peers.
const (
	idReady     = "11111111-1111-4111-8111-111111111111"
	idAuthFail  = "22222222-2222-4222-8222-222222222222"
	idConsumer  = "33333333-3333-4333-8333-333333333333"
	idExpired   = "44444444-4444-4444-8444-444444444444"
	idNoNode    = "55555555-5555-4555-8555-555555555555"
	idUnpeering = "66666666-6666-4666-8666-666666666666"
)

// consumerOf is the status of a ForeignCluster this cluster consumes,
// authenticated and with a Ready virtual node.
func consumerOf(expiry *metav1.Time) offloadv1alpha1.ForeignClusterStatus {
	return offloadv1alpha1.ForeignClusterStatus{
		Role: offloadv1alpha1.RoleConsumer, Auth: offloadv1alpha1.PhaseEstablished,
		Outgoing: offloadv1alpha1.PhaseEstablished, Incoming: offloadv1alpha1.PhaseNone, Network: offloadv1alpha1.PhaseNone,
		Conditions: []metav1.Condition{
			condition(offloadv1alpha1.ConditionAuthenticated, metav1.ConditionTrue, "Authenticated", "the provider issued credentials, kept in Secret offload-peer-kubeconfig"),
			condition(offloadv1alpha1.ConditionOutgoingPeering, metav1.ConditionTrue, "Established", "the provider's ResourceOffer was read"),
			condition(offloadv1alpha1.ConditionVirtualNodeReady, metav1.ConditionTrue, "NodeReady", "virtual node is Ready"),
		},
		CredentialExpiry: expiry,
		LastSeen:         at(-5 * time.Minute),
	}
}

// peerWorld is a cluster with one peer of every kind the peers section tells apart.
func peerWorld() []testPeer {
	noNode := consumerOf(at(20 * time.Hour))
	noNode.Conditions[2] = condition(offloadv1alpha1.ConditionVirtualNodeReady, metav1.ConditionFalse, "ProviderUnreachable",
		"cannot reach the provider's API server at https://172.18.0.3:6443: check the network between the clusters")
	unpeering := consumerOf(at(22 * time.Hour))
	unpeering.Conditions = append(unpeering.Conditions, condition(offloadv1alpha1.ConditionUnpeered, metav1.ConditionFalse, "UnpeerFailed",
		"the provider did not remove the tenant: its auth service is unreachable; kubectl offload unpeer provider-f --force skips it"))
	return []testPeer{
		{
			fc:   foreignCluster("provider-a", idReady, true, consumerOf(at(23*time.Hour))),
			node: virtualNode("provider-a", corev1.ConditionTrue),
		},
		{
			fc: foreignCluster("provider-b", idAuthFail, true, offloadv1alpha1.ForeignClusterStatus{
				Auth: offloadv1alpha1.PhaseFailed,
				Conditions: []metav1.Condition{condition(offloadv1alpha1.ConditionAuthenticated, metav1.ConditionFalse, "TokenExpired",
					"the peering token expired: generate a new one on the provider with kubectl offload peer generate and run the command it prints here")},
			}),
		},
		{
			fc: func() *offloadv1alpha1.ForeignCluster {
				fc := foreignCluster("consumer-c", idConsumer, false, offloadv1alpha1.ForeignClusterStatus{
					Role: offloadv1alpha1.RoleProvider, Incoming: offloadv1alpha1.PhaseEstablished,
					Conditions: []metav1.Condition{
						condition(offloadv1alpha1.ConditionOutgoingPeering, metav1.ConditionFalse, "Disabled", "outgoing peering is disabled"),
						condition(offloadv1alpha1.ConditionIncomingPeering, metav1.ConditionTrue, "Established", "the consumer holds credentials"),
						condition(offloadv1alpha1.ConditionVirtualNodeReady, metav1.ConditionFalse, "Disabled", "outgoing peering is disabled"),
					},
					LastSeen: at(-2 * time.Minute),
				})
				fc.Labels = map[string]string{offloadv1alpha1.LabelIncomingOnly: "true"}
				return fc
			}(),
			tenant: &offloadv1alpha1.Tenant{
				ObjectMeta: metav1.ObjectMeta{Name: "consumer-c"},
				Spec:       offloadv1alpha1.TenantSpec{ClusterID: idConsumer, ClusterName: "consumer-c", TenantNamespace: "offload-tenant-consumer-c"},
				Status:     offloadv1alpha1.TenantStatus{CredentialExpiry: at(30 * time.Minute)},
			},
		},
		{
			fc:   foreignCluster("provider-d", idExpired, true, consumerOf(at(-5*time.Minute))),
			node: virtualNode("provider-d", corev1.ConditionTrue),
		},
		{fc: foreignCluster("provider-e", idNoNode, true, noNode)},
		{fc: foreignCluster("provider-f", idUnpeering, true, unpeering), unpeering: true},
	}
}

// collectPeers runs the peers checker alone.
func collectPeers(ctx context.Context, env *Env) Report {
	return Collect(ctx, env, []Checker{peersChecker{}})
}
