package status

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/status/statustest"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// The cluster IDs of the peers of the offload tests.
const (
	idEast = "77777777-7777-4777-8777-777777777777"
	idWest = "88888888-8888-4888-8888-888888888888"
	// idStray is the cluster ID of a virtual node without a ForeignCluster.
	idStray = "99999999-9999-4999-8999-999999999999"
)

// offloadWorld is a consumer cluster with peers, their virtual nodes,
// offloaded namespaces and pods, as the agent and the scheduler would have
// left it.
type offloadWorld struct {
	peers []*offloadv1alpha1.ForeignCluster
	// nodes are the nodes with their status.
	nodes []*corev1.Node
	// offloadings are the NamespaceOffloadings with their status.
	offloadings []*offloadv1alpha1.NamespaceOffloading
	// deleting are the namespaces whose NamespaceOffloading is being
	// deleted, which a finalizer keeps.
	deleting map[string]bool
	// pods are the pods with their node and status.
	pods []*corev1.Pod
}

// offloadNode returns a virtual node of the peer with cluster ID id, and
// its Ready condition.
func offloadNode(name, id string, ready corev1.ConditionStatus, reason, message string) *corev1.Node {
	n := statustest.VirtualNode(name, ready)
	n.Labels[offloadv1alpha1.LabelRemoteClusterID] = id
	n.Status.Conditions[0].Reason, n.Status.Conditions[0].Message = reason, message
	return n
}

func offloading(ns string, strategy offloadv1alpha1.PodOffloadingStrategy, remote ...offloadv1alpha1.RemoteNamespaceStatus) *offloadv1alpha1.NamespaceOffloading {
	ready := condition(offloadv1alpha1.ConditionReady, metav1.ConditionTrue, "Offloaded", "every twin namespace is Ready")
	for _, r := range remote {
		if r.Phase != offloadv1alpha1.RemoteNamespaceReady {
			ready = condition(offloadv1alpha1.ConditionReady, metav1.ConditionFalse, "NotReady", "a twin namespace is not Ready")
		}
	}
	return &offloadv1alpha1.NamespaceOffloading{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.NamespaceOffloadingName, Namespace: ns},
		Spec:       offloadv1alpha1.NamespaceOffloadingSpec{PodOffloadingStrategy: strategy},
		Status: offloadv1alpha1.NamespaceOffloadingStatus{
			RemoteNamespaces: remote,
			Conditions:       []metav1.Condition{ready},
		},
	}
}

func twin(id, name string, remote string, phase offloadv1alpha1.RemoteNamespacePhase, message string) offloadv1alpha1.RemoteNamespaceStatus {
	return offloadv1alpha1.RemoteNamespaceStatus{ClusterID: id, ClusterName: name, RemoteNamespace: remote, Phase: phase, Message: message}
}

func pod(ns, name, node string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "nginx"}}},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

// healthyOffload is a consumer of two providers, east and west, whose
// virtual nodes are Ready, with namespaces shop and batch offloaded, and a
// stray virtual node whose ForeignCluster is gone.
func healthyOffload() *offloadWorld {
	east, west := offloadv1alpha1.VirtualNodeName("provider-east"), offloadv1alpha1.VirtualNodeName("provider-west")
	worker := node("worker-1", "172.18.0.3", nil)
	worker.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return &offloadWorld{
		peers: []*offloadv1alpha1.ForeignCluster{
			statustest.ForeignCluster("provider-east", idEast, true, offloadv1alpha1.ForeignClusterStatus{}),
			statustest.ForeignCluster("provider-west", idWest, true, offloadv1alpha1.ForeignClusterStatus{}),
		},
		nodes: []*corev1.Node{
			offloadNode("provider-east", idEast, corev1.ConditionTrue, "ProviderReachable", "the provider's ResourceOffer was read"),
			offloadNode("provider-west", idWest, corev1.ConditionTrue, "ProviderReachable", "the provider's ResourceOffer was read"),
			offloadNode("stray", idStray, corev1.ConditionTrue, "ProviderReachable", "the provider's ResourceOffer was read"),
			worker,
		},
		offloadings: []*offloadv1alpha1.NamespaceOffloading{
			offloading("shop", offloadv1alpha1.LocalAndRemote,
				twin(idEast, "east", "shop-alpha-3f9a2c", offloadv1alpha1.RemoteNamespaceReady, ""),
				twin(idWest, "west", "shop-alpha-3f9a2c", offloadv1alpha1.RemoteNamespaceReady, "")),
			offloading("batch", offloadv1alpha1.Remote,
				twin(idEast, "east", "batch-alpha-8c1d0e", offloadv1alpha1.RemoteNamespaceReady, "")),
		},
		pods: []*corev1.Pod{
			pod("shop", "web-1", east, corev1.PodRunning),
			pod("shop", "web-2", east, corev1.PodRunning),
			pod("shop", "web-3", west, corev1.PodPending),
			pod("shop", "db-0", "worker-1", corev1.PodRunning),
			pod("batch", "job-1", east, corev1.PodRunning),
		},
	}
}

// createWorld stores w with its status, and removes it when the test ends.
func (a apiServer) createWorld(t *testing.T, w *offloadWorld) {
	t.Helper()
	ctx := context.Background()
	for _, fc := range w.peers {
		a.Create(t, statustest.Peer{FC: fc})
	}
	for _, n := range w.nodes {
		a.createNode(t, n)
	}
	for _, no := range w.offloadings {
		a.createOffloading(t, no, w.deleting[no.Namespace])
	}
	for _, p := range w.pods {
		a.ensureNamespace(t, p.Namespace)
		created, err := a.Kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating pod %s/%s: %v", p.Namespace, p.Name, err)
		}
		t.Cleanup(func() {
			// Without a kubelet only a zero grace period deletes a bound pod.
			err := a.Kube.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
			if err != nil {
				t.Error(err)
			}
		})
		created.Status = p.Status
		if _, err := a.Kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("setting the status of pod %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
}

// createNode stores n with its status, and removes it when the test ends.
func (a apiServer) createNode(t *testing.T, n *corev1.Node) {
	t.Helper()
	ctx := context.Background()
	created, err := a.Kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating node %s: %v", n.Name, err)
	}
	t.Cleanup(func() {
		if err := a.Kube.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	})
	created.Status = n.Status
	if _, err := a.Kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting the status of node %s: %v", n.Name, err)
	}
}

// ensureNamespace creates namespace ns unless it exists. Namespaces stay:
// without a namespace controller they would never finish terminating.
func (a apiServer) ensureNamespace(t *testing.T, ns string) {
	t.Helper()
	_, err := a.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
}

// holdFinalizer keeps a NamespaceOffloading that the test deletes.
const holdFinalizer = "test.offload.io/hold"

// createOffloading stores no with its status, deletes it when deleting is
// set, and removes it, finalizers and all, when the test ends.
func (a apiServer) createOffloading(t *testing.T, no *offloadv1alpha1.NamespaceOffloading, deleting bool) {
	t.Helper()
	ctx := context.Background()
	a.ensureNamespace(t, no.Namespace)
	obj := no.DeepCopy()
	if deleting {
		obj.Finalizers = []string{holdFinalizer}
	}
	if err := a.Client.Create(ctx, obj); err != nil {
		t.Fatalf("creating NamespaceOffloading %s/%s: %v", no.Namespace, no.Name, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		cur := &offloadv1alpha1.NamespaceOffloading{}
		if err := a.Client.Get(ctx, client.ObjectKeyFromObject(no), cur); err != nil {
			if !apierrors.IsNotFound(err) {
				t.Error(err)
			}
			return
		}
		if len(cur.Finalizers) > 0 {
			cur.Finalizers = nil
			if err := a.Client.Update(ctx, cur); err != nil {
				t.Error(err)
				return
			}
		}
		if err := a.Client.Delete(ctx, cur); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
	})
	obj.Status = no.Status
	if err := a.Client.Status().Update(ctx, obj); err != nil {
		t.Fatalf("setting the status of NamespaceOffloading %s/%s: %v", no.Namespace, no.Name, err)
	}
	if deleting {
		if err := a.Client.Delete(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
}

// offloadClock is the clock of the offload tests. Nodes get their creation
// time from the API server, so it runs 20 hours ahead of it: every node is
// 20h old.
func offloadClock() time.Time { return time.Now().Add(20 * time.Hour) }

// runOffloadStatus executes `kubectl offload status args...` against the
// API server with the virtual nodes and offloaded namespaces sections alone.
func runOffloadStatus(t *testing.T, a apiServer, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	o := NewOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	o.Checkers = []Checker{virtualNodesChecker{}, offloadedNamespacesChecker{}}
	o.now = offloadClock
	err = statustest.Execute(newCmdStatus(a.Factory(), o), &out, &errOut, args...)
	return out.String(), errOut.String(), err
}

// offloadScenarios are the consumer clusters the offload golden files show.
var offloadScenarios = []struct {
	name   string
	golden string
	world  func() *offloadWorld
	// wantErr is the one-line error; empty means exit code 0.
	wantErr string
}{
	{
		name:   "Ready virtual nodes and Ready twin namespaces pass",
		golden: "offload-healthy",
		world:  healthyOffload,
	},
	{
		name:   "a NotReady virtual node fails and says to look at its peer",
		golden: "offload-node-not-ready",
		world: func() *offloadWorld {
			w := healthyOffload()
			w.nodes[1] = offloadNode("provider-west", idWest, corev1.ConditionFalse, "ProviderUnreachable",
				"cannot reach the provider's API server at https://172.18.0.4:6443")
			return w
		},
		wantErr: "1 check failed: virtual nodes",
	},
	{
		name:   "a Failed twin namespace fails; Pending, Terminating and unplaced namespaces are warnings",
		golden: "offload-namespace-failed",
		world: func() *offloadWorld {
			w := healthyOffload()
			idle := offloading("idle", offloadv1alpha1.LocalAndRemote)
			idle.Status.Conditions = []metav1.Condition{condition(offloadv1alpha1.ConditionReady, metav1.ConditionFalse, "NoPeer",
				"no virtual node matches the cluster selector region in (us)")}
			w.offloadings = append(w.offloadings,
				offloading("reports", offloadv1alpha1.Remote,
					twin(idEast, "east", "reports", offloadv1alpha1.RemoteNamespaceFailed,
						"namespace reports already exists in the provider: EnforceSameName needs a free name"),
					twin(idWest, "west", "reports", offloadv1alpha1.RemoteNamespacePending, "")),
				offloading("legacy", offloadv1alpha1.LocalAndRemote,
					twin(idEast, "east", "legacy-alpha-0a1b2c", offloadv1alpha1.RemoteNamespaceReady, "")),
				idle,
			)
			w.deleting = map[string]bool{"legacy": true}
			return w
		},
		wantErr: "1 check failed: offloaded namespaces",
	},
	{
		name:   "a cluster without virtual nodes or offloaded namespaces says so and passes",
		golden: "offload-empty",
		world:  func() *offloadWorld { return &offloadWorld{} },
	},
}

func TestOffloadSectionsTable(t *testing.T) {
	a := newAPIServer(t)
	for _, sc := range offloadScenarios {
		t.Run(sc.name, func(t *testing.T) {
			a.createWorld(t, sc.world())
			out, errOut, err := runOffloadStatus(t, a)
			statustest.AssertResult(t, err, sc.wantErr)
			if errOut != "" {
				t.Errorf("stderr = %q, want nothing: only cli.Run prints the error", errOut)
			}
			framework.Golden(t, sc.golden+".txt", out)
		})
	}
}

func TestVirtualNodesSection(t *testing.T) {
	a := newAPIServer(t)
	w := offloadScenarios[1].world()
	a.createWorld(t, w)
	env := a.env()
	env.clock = offloadClock
	s := Collect(context.Background(), env, []Checker{virtualNodesChecker{}}).Sections[0]

	t.Run("only nodes labelled as virtual nodes are listed, by name", func(t *testing.T) {
		var got []string
		for _, vn := range s.VirtualNodes {
			got = append(got, vn.Name)
		}
		if want := "offload-provider-east,offload-provider-west,offload-stray"; strings.Join(got, ",") != want {
			t.Errorf("virtual nodes = %v, want %s", got, want)
		}
	})

	tests := []struct {
		name string
		node string
		want VirtualNode
	}{
		{
			name: "a peer is named by its ForeignCluster and the pods on its node are counted",
			node: "offload-provider-east",
			want: VirtualNode{Peer: "provider-east", ClusterID: idEast, Ready: "Ready", CPU: "4", Memory: "8Gi", Pods: "110", RunningPods: 3, TotalPods: 3},
		},
		{
			name: "a NotReady node carries the reason and message of its Ready condition",
			node: "offload-provider-west",
			want: VirtualNode{Peer: "provider-west", ClusterID: idWest, Ready: "NotReady", Reason: "ProviderUnreachable",
				Message: "cannot reach the provider's API server at https://172.18.0.4:6443", CPU: "4", Memory: "8Gi", Pods: "110", RunningPods: 0, TotalPods: 1},
		},
		{
			name: "a node without a ForeignCluster has its cluster ID and no peer name",
			node: "offload-stray",
			want: VirtualNode{ClusterID: idStray, Ready: "Ready", CPU: "4", Memory: "8Gi", Pods: "110"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, vn := range s.VirtualNodes {
				if vn.Name != tt.node {
					continue
				}
				tt.want.Name, tt.want.Created = tt.node, vn.Created
				if vn != tt.want {
					t.Errorf("virtual node = %+v\nwant           %+v", vn, tt.want)
				}
				if vn.Created.IsZero() {
					t.Error("created is not set")
				}
				return
			}
			t.Errorf("no virtual node %s in %+v", tt.node, s.VirtualNodes)
		})
	}

	t.Run("the NotReady node fails, saying to run kubectl offload status peer", func(t *testing.T) {
		c := findCheck(s, "node/offload-provider-west")
		if c == nil || c.Status != StatusFailed || !strings.Contains(c.Message, "cannot reach the provider's API server") ||
			!strings.Contains(c.Message, "run kubectl offload status peer provider-west") {
			t.Errorf("check = %+v, want failed with the condition's message and kubectl offload status peer provider-west", c)
		}
		if c := findCheck(s, "node/offload-provider-east"); c == nil || c.Status != StatusOK {
			t.Errorf("check of the Ready node = %+v, want ok", c)
		}
	})
}

func TestVirtualNodeWithoutReadyConditionIsUnknown(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "offload-new", Labels: map[string]string{offloadv1alpha1.LabelRemoteClusterID: idEast},
			CreationTimestamp: metav1.NewTime(testNow.Add(-90 * time.Second))},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}},
	}
	vn := newVirtualNode(n, map[string]string{idEast: "provider-east"})
	if vn.Ready != "Unknown" || vn.CPU != "500m" || vn.Memory != "" {
		t.Errorf("virtual node = %+v, want Unknown with 500m CPU and no memory", vn)
	}
	c := vn.check()
	if c.Status != StatusFailed || c.Message != "virtual node offload-new is Unknown: the node has no Ready condition; run kubectl offload status peer provider-east" {
		t.Errorf("check = %+v", c)
	}
	if row := vn.row(testNow, false); strings.Join(row, "|") != "offload-new|provider-east|Unknown|500m|-|-|-|90s" {
		t.Errorf("row = %v", row)
	}
}
