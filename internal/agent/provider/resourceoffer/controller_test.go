package resourceoffer

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/manager"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
)

const providerName = "provider"

func TestTheResourceOfferFollowsTheFreeResourcesOfTheNodes(t *testing.T) {
	cfg, c, agentNS := newEnv(t)
	startManager(t, cfg, agentNS, BasisFree)

	nodeA := createNode(t, c, "4", "8Gi", "110")
	createNode(t, c, "2", "4Gi", "110")
	tenant := createTenant(t, c)

	// 6 cpu, 12Gi and 220 pods are free; half is offered.
	offer := waitForOffer(t, c, tenant, resources("3", "6Gi", "110"))
	owners := offer.GetOwnerReferences()
	if len(owners) != 1 || owners[0].UID != tenant.UID || owners[0].Kind != "Tenant" || owners[0].Controller == nil || !*owners[0].Controller {
		t.Errorf("owner references %+v, want the Tenant %s as controller", owners, tenant.Name)
	}
	if offer.Spec.ClusterID != testClusterID || offer.Spec.ClusterName != providerName {
		t.Errorf("offer identifies cluster %s/%s, want %s/%s", offer.Spec.ClusterID, offer.Spec.ClusterName, testClusterID, providerName)
	}
	if offer.Status.LastUpdate == nil {
		t.Error("status.lastUpdate is not set")
	}

	// A pod bound to node A requests 1 cpu and 2Gi: 5 cpu, 10Gi, 219 pods free.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: agentNS},
		Spec: corev1.PodSpec{
			NodeName: nodeA,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: resources("1", "2Gi", ""),
			}}},
		},
	}
	mustCreate(t, c, pod)
	waitForOffer(t, c, tenant, resources("2500m", "5Gi", "109"))

	// Without node B, 3 cpu, 6Gi and 109 pods are free.
	setNodeReady(t, c, nodeA, true)
	for _, n := range otherNodes(t, c, nodeA) {
		setNodeReady(t, c, n, false)
	}
	waitForOffer(t, c, tenant, resources("1500m", "3Gi", "54"))

	// The offer publishes the tenant's policy, and follows its changes.
	patch := client.MergeFrom(tenant.DeepCopy())
	tenant.Spec.Policy = offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityRestricted, NodePlacement: true}
	if err := c.Patch(context.Background(), tenant, patch); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &offloadv1alpha1.ResourceOffer{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: tenant.Spec.TenantNamespace, Name: providerName}, got); err != nil {
			return false, nil
		}
		return got.Spec.Policy.Equal(tenant.Spec.Policy), nil
	})
	if err != nil {
		t.Errorf("the offer does not publish the tenant's new policy %+v: %v", tenant.Spec.Policy, err)
	}
}

// By default an offer is a share of the lent nodes' allocatable
// resources: it follows the nodes, no pod of the cluster changes it, and
// the agent never asks the API server for one (a provider's own pods cost
// it nothing).
func TestTheDefaultOfferIsAShareOfTheAllocatableAndReadsNoPod(t *testing.T) {
	cfg, c, agentNS := newEnv(t)
	counted, podRequests := envtest.CountRequests(cfg, func(req *http.Request) bool {
		return slices.Contains(strings.Split(req.URL.Path, "/"), "pods")
	})
	startManager(t, counted, agentNS, "")

	nodeA := createNode(t, c, "4", "8Gi", "110")
	createNode(t, c, "2", "4Gi", "110")
	tenant := createTenant(t, c)
	offer := waitForOffer(t, c, tenant, resources("3", "6Gi", "110"))
	if cond := meta.FindStatusCondition(offer.Status.Conditions, offloadv1alpha1.ConditionReady); cond == nil || !strings.Contains(cond.Message, "50% of the allocatable resources") {
		t.Errorf("the offer's Ready condition %+v does not say it is half the allocatable resources", cond)
	}

	// The provider's own pod and the tenant's, both bound to node A, leave
	// the offer as it is.
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "own", Namespace: agentNS}},
		{ObjectMeta: metav1.ObjectMeta{Name: "offloaded", Namespace: tenant.Spec.TenantNamespace,
			Labels: map[string]string{offloadv1alpha1.LabelOriginClusterID: tenant.Spec.ClusterID}}},
	} {
		p.Spec = corev1.PodSpec{NodeName: nodeA, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: resources("1", "2Gi", "")}}}}
		mustCreate(t, c, p)
	}
	// Node B going NotReady does change it, to half of node A's
	// allocatable: the pods on node A are still not subtracted.
	for _, n := range otherNodes(t, c, nodeA) {
		setNodeReady(t, c, n, false)
	}
	waitForOffer(t, c, tenant, resources("2", "4Gi", "55"))
	if n := podRequests.Load(); n != 0 {
		t.Errorf("the agent made %d requests for pods; an offer of the allocatable resources needs none", n)
	}
}

func TestAnOfferBasisOtherThanAllocatableOrFreeIsRefused(t *testing.T) {
	for _, b := range []Basis{"", BasisAllocatable, BasisFree} {
		if err := b.Validate(); err != nil {
			t.Errorf("basis %q: %v", b, err)
		}
	}
	err := Basis("capacity").Validate()
	if err == nil || !strings.Contains(err.Error(), `"allocatable" or "free", got "capacity"`) {
		t.Errorf("basis capacity: got %v, want an error naming the valid bases", err)
	}
}

func TestReconcilingAnUnchangedTenantWritesNothing(t *testing.T) {
	_, c, agentNS := newEnv(t)
	tenant := createTenant(t, c)
	r := &Reconciler{Client: c, Namespace: agentNS, SharingPercentage: DefaultSharingPercentage}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: tenant.Name}}
	ctx := context.Background()

	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	var first offloadv1alpha1.ResourceOffer
	if err := c.Get(ctx, offerKey(tenant), &first); err != nil {
		t.Fatalf("the first reconcile published no offer: %v", err)
	}
	if !meta.IsStatusConditionTrue(first.Status.Conditions, offloadv1alpha1.ConditionReady) {
		t.Errorf("conditions %+v, want Ready", first.Status.Conditions)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	var second offloadv1alpha1.ResourceOffer
	if err := c.Get(ctx, offerKey(tenant), &second); err != nil {
		t.Fatal(err)
	}
	if second.ResourceVersion != first.ResourceVersion {
		t.Errorf("the second reconcile wrote the offer (resourceVersion %s, then %s)", first.ResourceVersion, second.ResourceVersion)
	}
}

func TestReconcileWaitsForTheTenantNamespace(t *testing.T) {
	_, c, agentNS := newEnv(t)
	tenant := &offloadv1alpha1.Tenant{
		ObjectMeta: metav1.ObjectMeta{Name: "consumer-" + rand.String(6)},
		Spec:       offloadv1alpha1.TenantSpec{ClusterID: "c", ClusterName: "consumer", TenantNamespace: "offload-tenant-missing-" + rand.String(6)},
	}
	mustCreate(t, c, tenant)
	t.Cleanup(func() { _ = c.Delete(context.Background(), tenant) })
	r := &Reconciler{Client: c, Namespace: agentNS, SharingPercentage: DefaultSharingPercentage}
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: tenant.Name}})
	if err != nil || res.RequeueAfter <= 0 {
		t.Errorf("Reconcile returned %+v, %v; want a requeue after a delay and no error", res, err)
	}
}

// An offloaded burst, the tenant's own pods arriving, leaves its offer as
// it is; each of its pod events used to recount every pod of the cluster.
// The counts are now at most one per MinUpdateInterval, and what changed
// in between is still counted.
func TestABurstOfTheTenantsPodsCountsTheClusterOncePerInterval(t *testing.T) {
	cfg, c, agentNS := newEnv(t)
	var podLists atomic.Int32
	startManagerWith(t, cfg, agentNS, BasisFree, func(c client.Client) client.Client { return podListCounter{c, &podLists} })
	node := createNode(t, c, "40", "80Gi", "110")
	tenant := createTenant(t, c)
	offer := waitForOffer(t, c, tenant, resources("20", "40Gi", "55"))
	// Past the throttle of the offer's last change, which would hold any
	// count back.
	framework.Eventually(t, 2*MinUpdateInterval, "the offer's last change is recent", func(context.Context) bool {
		return time.Since(offer.Status.LastUpdate.Time) > MinUpdateInterval
	})

	podLists.Store(0)
	start := time.Now()
	const burst = 30
	for i := range burst {
		mustCreate(t, c, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("offloaded-%d", i), Namespace: tenant.Spec.TenantNamespace,
				Labels: map[string]string{offloadv1alpha1.LabelOriginClusterID: tenant.Spec.ClusterID}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: resources("100m", "64Mi", "")}}}},
		})
	}
	// A pod of the provider's own, amid the burst, is counted when the
	// next count is due, though no event follows it.
	mustCreate(t, c, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "own", Namespace: agentNS},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: resources("2", "4Gi", "")}}}},
	})
	waitForOffer(t, c, tenant, resources("19", "38Gi", "54"))
	elapsed := time.Since(start)
	// One count at the first event, then one per interval begun since.
	most := 2 + int32(elapsed/MinUpdateInterval)
	if got := podLists.Load(); got > most {
		t.Errorf("%d pod events in %s listed every pod %d times, want at most %d (one count per %s)", burst+1, elapsed.Round(time.Millisecond), got, most, MinUpdateInterval)
	}
}

// podListCounter counts the pod lists through its client.
type podListCounter struct {
	client.Client
	n *atomic.Int32
}

func (c podListCounter) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.PodList); ok {
		c.n.Add(1)
	}
	return c.Client.List(ctx, list, opts...)
}

func TestOnlyEventsThatChangeTheFreeResourcesTrigger(t *testing.T) {
	pod := func(node string, phase corev1.PodPhase, cpu string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c"}}}, Status: corev1.PodStatus{Phase: phase}}
		p.UID = "uid"
		if cpu != "" {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		}
		return p
	}
	withIP := pod("n", corev1.PodRunning, "1")
	withIP.Status.PodIP = "10.0.0.1"
	// The cache's slim pods share a workload's container list.
	sameList := pod("n", corev1.PodRunning, "1")
	sameList.Spec.Containers = withIP.Spec.Containers
	relabelled := pod("n", corev1.PodRunning, "1")
	relabelled.Labels = map[string]string{offloadv1alpha1.LabelOriginClusterID: "tenant"}
	podTests := []struct {
		name     string
		old, cur *corev1.Pod
		want     []string
	}{
		{"binding a pod triggers", pod("", corev1.PodPending, "1"), pod("n", corev1.PodPending, "1"), []string{""}},
		{"a phase change triggers", pod("n", corev1.PodRunning, "1"), pod("n", corev1.PodSucceeded, "1"), []string{""}},
		{"a resize triggers", pod("n", corev1.PodRunning, "1"), pod("n", corev1.PodRunning, "2"), []string{""}},
		{"a new origin triggers both", pod("n", corev1.PodRunning, "1"), relabelled, []string{"", "tenant"}},
		{"another status update does not", pod("n", corev1.PodRunning, "1"), withIP, nil},
		{"nor one of a pod sharing its containers", sameList, withIP, nil},
		{"nor an unbound pod's", pod("", corev1.PodPending, "1"), pod("", corev1.PodPending, "2"), nil},
	}
	for _, tt := range podTests {
		t.Run(tt.name, func(t *testing.T) {
			u := NewUsage()
			var got []string
			h := u.Handler(func(origin string) { got = append(got, origin) })
			h.OnAdd(tt.old, true)
			got = nil
			h.OnUpdate(tt.old, tt.cur)
			if !slices.Equal(got, tt.want) {
				t.Errorf("changed origins %q, want %q", got, tt.want)
			}
		})
	}
	u := NewUsage()
	var got []string
	h := u.Handler(func(origin string) { got = append(got, origin) })
	h.OnAdd(pod("", corev1.PodPending, "1"), false)
	h.OnDelete(pod("", corev1.PodPending, "1"))
	if got != nil {
		t.Errorf("an unbound pod created and deleted changed origins %q", got)
	}
	h.OnAdd(relabelled, false)
	h.OnDelete(cache.DeletedFinalStateUnknown{Obj: relabelled})
	if want := []string{"tenant", "tenant"}; !slices.Equal(got, want) {
		t.Errorf("a tenant's pod created and deleted changed origins %q, want %q", got, want)
	}

	node := func(ready bool, cpu string) *corev1.Node {
		n := &corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: condition(ready)}}
		return n
	}
	heartbeat := node(true, "2")
	heartbeat.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
	nodeTests := []struct {
		name     string
		old, cur *corev1.Node
		want     bool
	}{
		{"a node going NotReady triggers", node(true, "2"), node(false, "2"), true},
		{"an allocatable change triggers", node(true, "2"), node(true, "2500m"), true},
		{"an equal quantity spelled otherwise does not", node(true, "2"), node(true, "2000m"), false},
		{"a heartbeat does not", node(true, "2"), heartbeat, false},
	}
	for _, tt := range nodeTests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nodeChanged().Update(event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.cur}); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

const testClusterID = "0b7f2c9e-1a2b-4c3d-8e9f-0123456789ab"

// newEnv returns the test API server, a client of it and a new agent
// namespace holding the cluster identity.
func newEnv(t *testing.T) (*rest.Config, client.Client, string) {
	t.Helper()
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, c)
	agentNS := envtest.NewNamespace(t, c, "ro")
	createIdentity(t, c, agentNS)
	return cfg, c, agentNS
}

// startManager runs a controller-manager with the Reconciler until the test ends.
func startManager(t *testing.T, cfg *rest.Config, namespace string, basis Basis) {
	t.Helper()
	startManagerWith(t, cfg, namespace, basis, func(c client.Client) client.Client { return c })
}

// startManagerWith is startManager with the Reconciler's client wrapped.
func startManagerWith(t *testing.T, cfg *rest.Config, namespace string, basis Basis, wrap func(client.Client) client.Client) {
	t.Helper()
	port, err := netlab.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	o := manager.NewOptions()
	o.Namespace = namespace
	o.LeaderElection = false
	o.HealthProbeBindAddress = fmt.Sprintf("127.0.0.1:%d", port)
	o.GracefulShutdownTimeout = 10 * time.Second
	o.Logger = ktesting.NewLogger(t, ktesting.NewConfig())
	mgr, err := manager.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: wrap(mgr.GetClient()), Namespace: namespace, SharingPercentage: DefaultSharingPercentage, Basis: basis, skipNameValidation: true}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager: %v", err)
		}
	})
}

func createIdentity(t *testing.T, c client.Client, namespace string) {
	t.Helper()
	mustCreate(t, c, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.IdentityConfigMap, Namespace: namespace},
		Data:       map[string]string{"clusterID": testClusterID, "clusterName": providerName},
	})
}

// createNode creates a Ready node with the given allocatable resources and
// returns its name. The node is deleted when the test ends.
func createNode(t *testing.T, c client.Client, cpu, memory, pods string) string {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + rand.String(6)}}
	mustCreate(t, c, node)
	t.Cleanup(func() { _ = c.Delete(context.Background(), node) })
	node.Status.Capacity = resources(cpu, memory, pods)
	node.Status.Allocatable = resources(cpu, memory, pods)
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	if err := c.Status().Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	return node.Name
}

// otherNodes returns the names of the nodes other than keep.
func otherNodes(t *testing.T, c client.Client, keep string) []string {
	t.Helper()
	var nodes corev1.NodeList
	if err := c.List(context.Background(), &nodes); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range nodes.Items {
		if n.Name != keep {
			out = append(out, n.Name)
		}
	}
	return out
}

func setNodeReady(t *testing.T, c client.Client, name string, ready bool) {
	t.Helper()
	var node corev1.Node
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &node); err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: condition(ready), Reason: "Test"}}
	if err := c.Status().Update(context.Background(), &node); err != nil {
		t.Fatal(err)
	}
}

// createTenant creates a Tenant and its namespace; the Tenant is deleted
// when the test ends (envtest has no garbage collector for its offer).
func createTenant(t *testing.T, c client.Client) *offloadv1alpha1.Tenant {
	t.Helper()
	ns := envtest.NewNamespace(t, c, "ro")
	tenant := &offloadv1alpha1.Tenant{
		ObjectMeta: metav1.ObjectMeta{Name: "consumer-" + rand.String(6)},
		Spec:       offloadv1alpha1.TenantSpec{ClusterID: "1c2d3e4f-0000-4000-8000-000000000001", ClusterName: "consumer", TenantNamespace: ns},
	}
	mustCreate(t, c, tenant)
	t.Cleanup(func() { _ = c.Delete(context.Background(), tenant) })
	return tenant
}

func offerKey(tenant *offloadv1alpha1.Tenant) client.ObjectKey {
	return client.ObjectKey{Namespace: tenant.Spec.TenantNamespace, Name: providerName}
}

// waitForOffer polls the tenant's offer until it is Ready and offers want.
func waitForOffer(t *testing.T, c client.Client, tenant *offloadv1alpha1.Tenant, want corev1.ResourceList) *offloadv1alpha1.ResourceOffer {
	t.Helper()
	var offer offloadv1alpha1.ResourceOffer
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, offerKey(tenant), &offer); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return sameResources(offer.Spec.Resources, want) &&
			meta.IsStatusConditionTrue(offer.Status.Conditions, offloadv1alpha1.ConditionReady), nil
	})
	if err != nil {
		t.Fatalf("waiting for resource offer %s to offer %v: last %v, conditions %+v: %v",
			offerKey(tenant), want, offer.Spec.Resources, offer.Status.Conditions, err)
	}
	return &offer
}

func resources(cpu, memory, pods string) corev1.ResourceList {
	out := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}
	if pods != "" {
		out[corev1.ResourcePods] = resource.MustParse(pods)
	}
	return out
}

func condition(ok bool) corev1.ConditionStatus {
	if ok {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
}

func mustCreate(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}
