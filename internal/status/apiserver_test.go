package status

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/internal/status/statustest"
)

// testNow is the clock of the peer tests: ages and expiries are relative to it.
var testNow = time.Date(2030, time.January, 2, 12, 0, 0, 0, time.UTC)

func testClock() time.Time { return testNow }

// at returns testNow moved by d.
func at(d time.Duration) *metav1.Time {
	t := metav1.NewTime(testNow.Add(d))
	return &t
}

// apiServer is statustest's API server, with the status tests' helpers.
type apiServer struct{ statustest.APIServer }

func newAPIServer(t *testing.T) apiServer {
	t.Helper()
	return apiServer{statustest.NewAPIServer(t)}
}

// env returns an Env on the API server whose clock is testNow, without a
// Helm release.
func (a apiServer) env() *Env {
	env := NewEnv(a.Kube, a.Client, helmclient.New(statustest.MemoryHelm(), statustest.Namespace), statustest.Namespace)
	env.clock = testClock
	return env
}

func condition(t string, s metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(testNow.Add(-time.Hour))}
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
func peerWorld() []statustest.Peer {
	noNode := consumerOf(at(20 * time.Hour))
	noNode.Conditions[2] = condition(offloadv1alpha1.ConditionVirtualNodeReady, metav1.ConditionFalse, "ProviderUnreachable",
		"cannot reach the provider's API server at https://172.18.0.3:6443: check the network between the clusters")
	unpeering := consumerOf(at(22 * time.Hour))
	unpeering.Conditions = append(unpeering.Conditions, condition(offloadv1alpha1.ConditionUnpeered, metav1.ConditionFalse, "UnpeerFailed",
		"the provider did not remove the tenant: its auth service is unreachable; kubectl offload unpeer provider-f --force skips it"))
	return []statustest.Peer{
		{
			// The provider lends its GPUs, not its FPGAs, and 50Gi of storage.
			FC: func() *offloadv1alpha1.ForeignCluster {
				st := consumerOf(at(23 * time.Hour))
				st.ProviderPolicy = &offloadv1alpha1.ConsumerPolicy{ExtendedResources: []corev1.ResourceName{"nvidia.com/gpu"},
					Storage: &offloadv1alpha1.StoragePolicy{StorageClassName: "standard", Capacity: resource.MustParse("50Gi"), Claims: 20}}
				return statustest.ForeignCluster("provider-a", idReady, true, st)
			}(),
			Node: func() *corev1.Node {
				n := statustest.VirtualNode("provider-a", corev1.ConditionTrue)
				n.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("2")
				n.Status.Allocatable["example.com/fpga"] = resource.MustParse("0")
				return n
			}(),
		},
		{
			FC: statustest.ForeignCluster("provider-b", idAuthFail, true, offloadv1alpha1.ForeignClusterStatus{
				Auth: offloadv1alpha1.PhaseFailed,
				Conditions: []metav1.Condition{condition(offloadv1alpha1.ConditionAuthenticated, metav1.ConditionFalse, "TokenExpired",
					"the peering token expired: generate a new one on the provider with kubectl offload peer generate and run the command it prints here")},
			}),
		},
		{
			FC: func() *offloadv1alpha1.ForeignCluster {
				fc := statustest.ForeignCluster("consumer-c", idConsumer, false, offloadv1alpha1.ForeignClusterStatus{
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
			Tenant: &offloadv1alpha1.Tenant{
				ObjectMeta: metav1.ObjectMeta{Name: "consumer-c"},
				Spec:       offloadv1alpha1.TenantSpec{ClusterID: idConsumer, ClusterName: "consumer-c", TenantNamespace: "offload-tenant-consumer-c"},
				Status:     offloadv1alpha1.TenantStatus{CredentialExpiry: at(30 * time.Minute)},
			},
		},
		{
			FC:   statustest.ForeignCluster("provider-d", idExpired, true, consumerOf(at(-5*time.Minute))),
			Node: statustest.VirtualNode("provider-d", corev1.ConditionTrue),
		},
		{FC: statustest.ForeignCluster("provider-e", idNoNode, true, noNode)},
		{FC: statustest.ForeignCluster("provider-f", idUnpeering, true, unpeering), Unpeering: true},
	}
}

// collectPeers runs the peers checker alone.
func collectPeers(ctx context.Context, env *Env) Report {
	return Collect(ctx, env, []Checker{peersChecker{}})
}
