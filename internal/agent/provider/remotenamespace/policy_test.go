package remotenamespace

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/fabric/network"
	"github.com/kubectl-offload/kubectl-offload/internal/ipam"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

func TestTwinNamespacesEnforceTheTenantsPolicyAndFollowItsChanges(t *testing.T) {
	e := newEnv(t)
	e.offer(e.tenant, "2", "4Gi", "20")
	rn := e.ready(e.tenant)
	target := rn.Spec.TargetNamespace
	wantLabels := func(level offloadv1alpha1.PodSecurityLevel, placement bool) {
		t.Helper()
		ns := e.namespace(target)
		for _, k := range []string{offloadv1alpha1.LabelPodSecurityEnforce, offloadv1alpha1.LabelPodSecurityWarn} {
			if ns.Labels[k] != string(level) {
				t.Errorf("label %s=%q, want %q", k, ns.Labels[k], level)
			}
		}
		if ns.Labels[offloadv1alpha1.LabelPodSecurityEnforceVersion] != "latest" {
			t.Errorf("label %s=%q, want latest", offloadv1alpha1.LabelPodSecurityEnforceVersion, ns.Labels[offloadv1alpha1.LabelPodSecurityEnforceVersion])
		}
		if got := ns.Labels[offloadv1alpha1.LabelNodePlacement] == offloadv1alpha1.NodePlacementAllowed; got != placement {
			t.Errorf("node placement label %v, want %v", got, placement)
		}
	}
	wantLabels(offloadv1alpha1.PodSecurityBaseline, false)

	// The provider's own API server refuses a privileged pod there, from
	// anyone: here from the cluster admin.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: target}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}}
	if err := e.c.Create(context.Background(), pod); !apierrors.IsForbidden(err) {
		t.Fatalf("creating a privileged pod in a baseline twin namespace: %v, want Forbidden by Pod Security admission", err)
	}

	setPolicy := func(p offloadv1alpha1.ConsumerPolicy) {
		t.Helper()
		e.get(e.tenant)
		patch := client.MergeFrom(e.tenant.DeepCopy())
		e.tenant.Spec.Policy = p
		if err := e.c.Patch(context.Background(), e.tenant, patch); err != nil {
			t.Fatal(err)
		}
		e.reconcile(rn)
	}
	setPolicy(offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityPrivileged, NodePlacement: true})
	wantLabels(offloadv1alpha1.PodSecurityPrivileged, true)
	setPolicy(offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityRestricted})
	wantLabels(offloadv1alpha1.PodSecurityRestricted, false)

	// A label changed on the provider by hand is put back.
	ns := e.namespace(target)
	patch := client.MergeFrom(ns.DeepCopy())
	ns.Labels[offloadv1alpha1.LabelPodSecurityEnforce] = string(offloadv1alpha1.PodSecurityPrivileged)
	ns.Labels[offloadv1alpha1.LabelNodePlacement] = offloadv1alpha1.NodePlacementAllowed
	if err := e.c.Patch(context.Background(), ns, patch); err != nil {
		t.Fatal(err)
	}
	e.reconcile(rn)
	wantLabels(offloadv1alpha1.PodSecurityRestricted, false)
}

func TestTwinNamespacesHoldTheStorageLentAndFollowItsChanges(t *testing.T) {
	e := newEnv(t)
	e.offer(e.tenant, "2", "4Gi", "20")
	rn := e.ready(e.tenant)
	target := rn.Spec.TargetNamespace
	want := func(class, storage, claims string) {
		t.Helper()
		if got := e.namespace(target).Annotations[offloadv1alpha1.AnnotationStorageClass]; got != class {
			t.Errorf("annotation %s = %q, want %q", offloadv1alpha1.AnnotationStorageClass, got, class)
		}
		var quota corev1.ResourceQuota
		if err := e.c.Get(context.Background(), key(target, QuotaName), &quota); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[corev1.ResourceName]string{corev1.ResourceRequestsStorage: storage, corev1.ResourcePersistentVolumeClaims: claims} {
			if q, ok := quota.Spec.Hard[name]; !ok || q.Cmp(resource.MustParse(want)) != 0 {
				t.Errorf("quota %s = %s (set %v), want %s", name, q.String(), ok, want)
			}
		}
	}
	want("", "0", "0")
	setPolicy := func(st *offloadv1alpha1.StoragePolicy) {
		t.Helper()
		e.get(e.tenant)
		patch := client.MergeFrom(e.tenant.DeepCopy())
		e.tenant.Spec.Policy.Storage = st
		if err := e.c.Patch(context.Background(), e.tenant, patch); err != nil {
			t.Fatal(err)
		}
		e.reconcile(rn)
	}
	setPolicy(&offloadv1alpha1.StoragePolicy{StorageClassName: "standard", Capacity: resource.MustParse("20Gi"), Claims: 4})
	want("standard", "20Gi", "4")
	setPolicy(&offloadv1alpha1.StoragePolicy{StorageClassName: "fast", Capacity: resource.MustParse("1Gi")})
	want("fast", "1Gi", strconv.Itoa(offloadv1alpha1.DefaultStorageClaims))
	setPolicy(nil)
	want("", "0", "0")
}

func TestTenantChangesRequeueTheirRemoteNamespaces(t *testing.T) {
	e := newEnv(t)
	e.offer(e.tenant, "2", "4Gi", "20")
	rn := e.ready(e.tenant)
	other := e.newTenant("99999999-2222-4333-8444-000000000000")
	if reqs := e.r.requestsOfTenant(context.Background(), e.tenant); len(reqs) != 1 || reqs[0].Name != rn.Name || reqs[0].Namespace != rn.Namespace {
		t.Errorf("requests of the tenant %v, want only %s/%s", reqs, rn.Namespace, rn.Name)
	}
	if reqs := e.r.requestsOfTenant(context.Background(), other); len(reqs) != 0 {
		t.Errorf("requests of another tenant %v, want none", reqs)
	}
}

func TestPodsWithoutRequestsGetTheDefaultRequests(t *testing.T) {
	// The test API server runs no quota controller, so it enforces no
	// ResourceQuota: the e2e tests check the quota on real clusters.
	e := newEnv(t)
	e.offer(e.tenant, "250m", "4Gi", "20")
	rn := e.ready(e.tenant)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "free", Namespace: rn.Spec.TargetNamespace},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	_, err := framework.Poll(context.Background(), 100*time.Millisecond, 10*time.Second, func(ctx context.Context) (bool, string) {
		if err := e.c.Create(ctx, pod); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if err != nil {
		t.Fatal(err)
	}
	got := pod.Spec.Containers[0].Resources.Requests
	if got.Cpu().Cmp(DefaultRequests[corev1.ResourceCPU]) != 0 || got.Memory().Cmp(DefaultRequests[corev1.ResourceMemory]) != 0 {
		t.Errorf("a container without requests got %v, want the defaults %v", got, DefaultRequests)
	}
}

// twoTwinNamespaces gives the tenant an offer and two ready
// RemoteNamespaces, a and b, and returns them with a's quota.
func (e *env) twoTwinNamespaces() (a, b *offloadv1alpha1.RemoteNamespace, qa *corev1.ResourceQuota) {
	e.t.Helper()
	e.offer(e.tenant, "4", "8Gi", "20")
	a, b = e.ready(e.tenant), e.ready(e.tenant)
	qa = &corev1.ResourceQuota{}
	if err := e.c.Get(context.Background(), key(a.Spec.TargetNamespace, QuotaName), qa); err != nil {
		e.t.Fatal(err)
	}
	return a, b, qa
}

func TestTheOfferIsOneBudgetForAllTheTenantsTwinNamespaces(t *testing.T) {
	e := newEnv(t)
	_, b, qa := e.twoTwinNamespaces()
	ctx := context.Background()
	// What the quota controller records as used in a's namespace (the test
	// API server runs none).
	qa.Status.Hard = qa.Spec.Hard
	qa.Status.Used = corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("3"),
		corev1.ResourceRequestsMemory: resource.MustParse("2Gi"), corev1.ResourcePods: resource.MustParse("5")}
	if err := e.c.Status().Update(ctx, qa); err != nil {
		t.Fatal(err)
	}
	reqs := e.r.requestsOfTenantOf(ctx, qa)
	if len(reqs) != 2 {
		t.Errorf("a change of use in one twin namespace requeues %v, want both RemoteNamespaces of the tenant", reqs)
	}
	e.reconcile(b)
	var qb corev1.ResourceQuota
	if err := e.c.Get(ctx, key(b.Spec.TargetNamespace, QuotaName), &qb); err != nil {
		t.Fatal(err)
	}
	want := corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("1"),
		corev1.ResourceRequestsMemory: resource.MustParse("6Gi"), corev1.ResourcePods: resource.MustParse("15")}
	for name, q := range want {
		if got := qb.Spec.Hard[name]; got.Cmp(q) != 0 {
			t.Errorf("quota of the second namespace: %s = %s, want %s (the offer less the first namespace's use)", name, got.String(), q.String())
		}
	}
	// Another tenant's use does not count.
	other := e.newTenant("88888888-2222-4333-8444-" + rand.String(12))
	e.offer(other, "4", "8Gi", "20")
	c := e.ready(other)
	var qc corev1.ResourceQuota
	if err := e.c.Get(ctx, key(c.Spec.TargetNamespace, QuotaName), &qc); err != nil {
		t.Fatal(err)
	}
	if got := qc.Spec.Hard[corev1.ResourceRequestsCPU]; got.Cmp(resource.MustParse("4")) != 0 {
		t.Errorf("another tenant's quota: cpu %s, want its whole offer", got.String())
	}
}

func TestAChangeOfUseRequeuesTheTenantsOtherTwinNamespacesOnly(t *testing.T) {
	e := newEnv(t)
	a, b, before := e.twoTwinNamespaces()
	ctx := context.Background()
	used := before.DeepCopy()
	used.Status.Hard = used.Spec.Hard
	used.Status.Used = corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("1"), corev1.ResourcePods: resource.MustParse("2")}
	if err := e.c.Status().Update(ctx, used); err != nil {
		t.Fatal(err)
	}
	names := func(reqs []reconcile.Request) []string {
		var out []string
		for _, r := range reqs {
			out = append(out, r.Name)
		}
		slices.Sort(out)
		return out
	}
	if got := names(e.r.requestsOfQuotaUpdate(ctx, before, used)); !slices.Equal(got, []string{b.Name}) {
		t.Errorf("a change of use in %s's twin namespace requeues %v, want only the other RemoteNamespace %s", a.Name, got, b.Name)
	}
	both := []string{a.Name, b.Name}
	slices.Sort(both)
	drifted := used.DeepCopy()
	drifted.Spec.Hard[corev1.ResourceRequestsCPU] = resource.MustParse("100")
	if got := names(e.r.requestsOfQuotaUpdate(ctx, used, drifted)); !slices.Equal(got, both) {
		t.Errorf("a change of the quota's limits requeues %v, want every RemoteNamespace of the tenant %v", got, both)
	}
	relabelled := used.DeepCopy()
	relabelled.Labels = map[string]string{"someone": "else"}
	if got := names(e.r.requestsOfQuotaUpdate(ctx, used, relabelled)); !slices.Equal(got, both) {
		t.Errorf("a change of the quota's labels requeues %v, want every RemoteNamespace of the tenant %v", got, both)
	}
	// The controller's watch of quotas queues the same.
	queued := func(send func(handler.Funcs, workqueue.TypedRateLimitingInterface[reconcile.Request])) []string {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		send(e.r.quotaEvents(), q)
		var out []reconcile.Request
		for q.Len() > 0 {
			req, _ := q.Get()
			out = append(out, req)
			q.Done(req)
		}
		return names(out)
	}
	if got := queued(func(h handler.Funcs, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		h.Update(ctx, event.UpdateEvent{ObjectOld: before, ObjectNew: used}, q)
	}); !slices.Equal(got, []string{b.Name}) {
		t.Errorf("the watch queues %v for a change of use, want only %s", got, b.Name)
	}
	if got := queued(func(h handler.Funcs, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		h.Delete(ctx, event.DeleteEvent{Object: used}, q)
	}); !slices.Equal(got, both) {
		t.Errorf("the watch queues %v for a deleted quota, want every RemoteNamespace of the tenant %v", got, both)
	}
}

func TestLentDevicesAreOneBudgetForAllTheTenantsTwinNamespaces(t *testing.T) {
	offered := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), "nvidia.com/gpu": resource.MustParse("3"), "example.com/fpga": resource.MustParse("0")}
	got := BudgetFor(offered, nil, corev1.ResourceList{"requests.nvidia.com/gpu": resource.MustParse("2"), "requests.example.com/fpga": resource.MustParse("1")})
	for name, want := range map[corev1.ResourceName]string{"requests.nvidia.com/gpu": "1", "requests.example.com/fpga": "0", corev1.ResourceRequestsCPU: "4"} {
		if q, ok := got[name]; !ok || q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("budget %s = %s (set %v), want %s", name, q.String(), ok, want)
		}
	}
}

func TestLentStorageIsOneBudgetForAllTheTenantsTwinNamespaces(t *testing.T) {
	offered := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}
	none := BudgetFor(offered, nil, nil)
	for _, name := range []corev1.ResourceName{corev1.ResourceRequestsStorage, corev1.ResourcePersistentVolumeClaims} {
		if q, ok := none[name]; !ok || q.Sign() != 0 {
			t.Errorf("without storage lent, %s = %s (set %v), want 0", name, q.String(), ok)
		}
	}
	lent := &offloadv1alpha1.StoragePolicy{StorageClassName: "standard", Capacity: resource.MustParse("10Gi"), Claims: 5}
	got := BudgetFor(offered, lent, corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("4Gi"), corev1.ResourcePersistentVolumeClaims: resource.MustParse("2")})
	for name, want := range map[corev1.ResourceName]string{corev1.ResourceRequestsStorage: "6Gi", corev1.ResourcePersistentVolumeClaims: "3"} {
		if q, ok := got[name]; !ok || q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("budget %s = %s (set %v), want %s", name, q.String(), ok, want)
		}
	}
}

func TestBudgetForNeverGoesBelowZero(t *testing.T) {
	got := BudgetFor(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}, nil,
		corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("3")})
	if q := got[corev1.ResourceRequestsCPU]; q.Sign() != 0 {
		t.Errorf("budget %s, want 0 when the others use more than the offer", q.String())
	}
}

func TestTwinNamespacesListWhereTheTenantsEndpointSlicesMayPoint(t *testing.T) {
	e := newEnv(t)
	e.r.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	e.r.FlatCIDRs = []netip.Prefix{netip.MustParsePrefix("192.168.50.0/24")}
	e.offer(e.tenant, "2", "4Gi", "20")
	rn := e.ready(e.tenant)
	wantCIDRs := func(want string) {
		t.Helper()
		if got := e.namespace(rn.Spec.TargetNamespace).Annotations[offloadv1alpha1.AnnotationEndpointCIDRs]; got != want {
			t.Errorf("annotation %s = %q, want %q", offloadv1alpha1.AnnotationEndpointCIDRs, got, want)
		}
	}
	// The public addresses of the nodes other tests made here.
	hosts, err := network.HostAddresses(context.Background(), e.c, e.c)
	if err != nil {
		t.Fatal(err)
	}
	publicHosts := PublicHosts(hosts)
	wantPolicy := func(ipBlocks ...string) {
		t.Helper()
		var np networkingv1.NetworkPolicy
		if err := e.c.Get(context.Background(), key(rn.Spec.TargetNamespace, NetworkPolicyName), &np); err != nil {
			t.Fatal(err)
		}
		want := NetworkPolicyFor(e.tenant.Spec.ClusterID, ipBlocks, publicHosts)
		if !equality.Semantic.DeepEqual(np.Spec, want) {
			t.Errorf("NetworkPolicy %s = %+v, want %+v", NetworkPolicyName, np.Spec, want)
		}
	}
	// Without the fabric: this cluster's pod CIDRs and the admin's ranges;
	// only the latter are the consumer's pods.
	wantCIDRs("10.244.0.0/16,192.168.50.0/24")
	wantPolicy("192.168.50.0/24")

	// The fabric serves the tenant: the views of its pods are added, and
	// the consumer's view of this cluster's pods, which the gateway
	// mirrors.
	if err := e.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: installNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tunnel := &offloadv1alpha1.Tunnel{
		ObjectMeta: metav1.ObjectMeta{Namespace: installNamespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelServer, e.tenant.Name)},
		Spec: offloadv1alpha1.TunnelSpec{ClusterID: e.tenant.Spec.ClusterID, ClusterName: e.tenant.Name, Role: offloadv1alpha1.TunnelServer,
			LocalPodCIDRs: []string{"10.244.0.0/16"}, Mappings: []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.71.0.0/16"}},
			PeerViews: []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.72.0.0/16"}}},
	}
	e.create(tunnel)
	if got := e.r.requestsOfTunnel(context.Background(), tunnel); len(got) != 1 || got[0].Name != rn.Name || got[0].Namespace != rn.Namespace {
		t.Errorf("the Tunnel requeues %v, want the tenant's RemoteNamespace", got)
	}
	e.reconcile(rn)
	wantCIDRs("10.244.0.0/16,10.71.0.0/16,10.72.0.0/16,192.168.50.0/24")
	wantPolicy("10.71.0.0/16", "10.72.0.0/16", "192.168.50.0/24")

	// Hand edits are put back.
	var np networkingv1.NetworkPolicy
	if err := e.c.Get(context.Background(), key(rn.Spec.TargetNamespace, NetworkPolicyName), &np); err != nil {
		t.Fatal(err)
	}
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{}} // from anywhere
	if err := e.c.Update(context.Background(), &np); err != nil {
		t.Fatal(err)
	}
	ns := e.namespace(rn.Spec.TargetNamespace)
	patch := client.MergeFrom(ns.DeepCopy())
	ns.Annotations[offloadv1alpha1.AnnotationEndpointCIDRs] = "0.0.0.0/0"
	if err := e.c.Patch(context.Background(), ns, patch); err != nil {
		t.Fatal(err)
	}
	e.reconcile(rn)
	wantCIDRs("10.244.0.0/16,10.71.0.0/16,10.72.0.0/16,192.168.50.0/24")
	wantPolicy("10.71.0.0/16", "10.72.0.0/16", "192.168.50.0/24")

	// A node with a public address: tenant pods may not open connections
	// to it, though they may to other public addresses. Its private
	// address is excepted already. A change of its public address
	// reconciles every twin namespace.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "public-" + rand.String(5)}}
	e.create(node)
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), node) })
	old := node.DeepCopy()
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.99.0.7"}, {Type: corev1.NodeExternalIP, Address: "198.51.100.7"}}
	if err := e.c.Status().Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	if !publicAddressesChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: node}) ||
		publicAddressesChanged.Create(event.CreateEvent{Object: old}) ||
		publicAddressesChanged.Update(event.UpdateEvent{ObjectOld: node, ObjectNew: node.DeepCopy()}) {
		t.Error("the node watch does not pass exactly the changes of public addresses")
	}
	e.reconcile(rn)
	if slices.Contains(publicHosts, "198.51.100.7/32") {
		t.Fatal("the node's public address was excepted before the node had it")
	}
	publicHosts = ipam.CanonicalCIDRs(append(publicHosts, "198.51.100.7/32"))
	wantPolicy("10.71.0.0/16", "10.72.0.0/16", "192.168.50.0/24")
}

func TestTheNetworkPolicyLetsInTheProviderTheTenantAndItsConsumerOnly(t *testing.T) {
	spec := NetworkPolicyFor("tenant-a", []string{"10.71.0.0/16"}, nil)
	if !slices.Equal(spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) ||
		len(spec.PodSelector.MatchLabels)+len(spec.PodSelector.MatchExpressions) != 0 {
		t.Fatalf("the policy must select every pod of the namespace for ingress and egress: %+v", spec)
	}
	// Which namespaces' pods get in, by their labels.
	for _, tc := range []struct {
		name   string
		labels labels.Set
		in     bool
	}{
		{"the provider's own namespace", labels.Set{"kubernetes.io/metadata.name": "monitoring"}, true},
		{"a twin namespace of the same tenant", labels.Set{offloadv1alpha1.LabelTenant: "tenant-a"}, true},
		{"a twin namespace of another tenant", labels.Set{offloadv1alpha1.LabelTenant: "tenant-b"}, false},
		{"another tenant's namespace", labels.Set{offloadv1alpha1.LabelTenant: "tenant-b", "kubernetes.io/metadata.name": offloadv1alpha1.TenantNamespacePrefix + "b"}, false},
	} {
		in := false
		for _, peer := range spec.Ingress[0].From {
			if peer.NamespaceSelector == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
			if err != nil {
				t.Fatal(err)
			}
			in = in || sel.Matches(tc.labels)
		}
		if in != tc.in {
			t.Errorf("pods of %s let in: %v, want %v", tc.name, in, tc.in)
		}
	}
	var blocks []string
	for _, peer := range spec.Ingress[0].From {
		if peer.IPBlock != nil {
			blocks = append(blocks, peer.IPBlock.CIDR)
		}
	}
	if len(blocks) != 1 || blocks[0] != "10.71.0.0/16" {
		t.Errorf("addresses let in: %v, want only the consumer's view 10.71.0.0/16", blocks)
	}
}

// egressAllows evaluates spec's egress rules, as a network plugin does,
// for a connection to ip:port (TCP), in a namespace labelled ns when the
// destination is a pod of this cluster.
func egressAllows(t *testing.T, spec networkingv1.NetworkPolicySpec, ip string, port int32, ns labels.Set) bool {
	t.Helper()
	addr := netip.MustParseAddr(ip)
	for _, rule := range spec.Egress {
		portOK := len(rule.Ports) == 0
		for _, p := range rule.Ports {
			portOK = portOK || (p.Protocol != nil && *p.Protocol == corev1.ProtocolTCP && p.Port != nil && p.Port.IntVal == port)
		}
		if !portOK {
			continue
		}
		if len(rule.To) == 0 {
			return true
		}
		for _, peer := range rule.To {
			switch {
			case peer.IPBlock != nil:
				in := netip.MustParsePrefix(peer.IPBlock.CIDR).Contains(addr)
				for _, e := range peer.IPBlock.Except {
					in = in && !netip.MustParsePrefix(e).Contains(addr)
				}
				if in {
					return true
				}
			case peer.NamespaceSelector != nil && ns != nil:
				sel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
				if err != nil {
					t.Fatal(err)
				}
				if sel.Matches(ns) {
					return true
				}
			}
		}
	}
	return false
}

func TestTheNetworkPolicyLetsTenantPodsOutOnlyToTheirOwnAndThePublic(t *testing.T) {
	hosts := PublicHosts([]netip.Prefix{netip.MustParsePrefix("198.51.100.7/32"), netip.MustParsePrefix("10.99.1.1/32"), netip.MustParsePrefix("172.18.0.2/32")})
	if !slices.Equal(hosts, []string{"198.51.100.7/32"}) {
		t.Errorf("PublicHosts = %v, want the one public address", hosts)
	}
	spec := NetworkPolicyFor("tenant-a", []string{"10.71.0.0/16"}, hosts)
	for _, tc := range []struct {
		name string
		ip   string
		port int32
		ns   labels.Set
		out  bool
	}{
		{"DNS", "10.96.0.10", 53, nil, true},
		{"a pod of a twin namespace of the same tenant", "10.244.3.4", 8080, labels.Set{offloadv1alpha1.LabelTenant: "tenant-a"}, true},
		{"the consumer's pods, through the tunnel", "10.71.3.4", 8080, nil, true},
		{"a public address", "203.0.113.9", 443, nil, true},
		{"a provider node's public address", "198.51.100.7", 10250, nil, false},
		{"the cloud's metadata service", "169.254.169.254", 80, nil, false},
		{"a provider node's kubelet", "10.99.1.1", 10250, nil, false},
		{"the provider's API server", "172.18.0.2", 6443, nil, false},
		{"the provider's own pods", "10.244.1.9", 8080, labels.Set{"kubernetes.io/metadata.name": "monitoring"}, false},
		{"another tenant's pods", "10.244.2.2", 8080, labels.Set{offloadv1alpha1.LabelTenant: "tenant-b"}, false},
	} {
		if got := egressAllows(t, spec, tc.ip, tc.port, tc.ns); got != tc.out {
			t.Errorf("%s (%s:%d): let out %v, want %v", tc.name, tc.ip, tc.port, got, tc.out)
		}
	}
}

func TestTwinNamespacesListTheClustersDefaultPriorityClasses(t *testing.T) {
	e := newEnv(t)
	e.offer(e.tenant, "2", "4Gi", "20")
	rn := e.ready(e.tenant)
	target := rn.Spec.TargetNamespace
	if got, ok := e.namespace(target).Annotations[offloadv1alpha1.AnnotationPriorityClasses]; !ok || got != "" {
		t.Errorf("annotation %s = %q (set %v), want set and empty: the cluster has no default class", offloadv1alpha1.AnnotationPriorityClasses, got, ok)
	}

	// The provider's admin makes a default class: tenant pods get it from
	// the Priority admission, so their namespaces let them carry it.
	class := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "everyone-" + rand.String(5)}, Value: 100, GlobalDefault: true}
	e.create(class)
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), class) })
	if !defaultChanged.Create(event.CreateEvent{Object: class}) ||
		defaultChanged.Create(event.CreateEvent{Object: &schedulingv1.PriorityClass{Value: 100}}) {
		t.Error("the watch does not pass exactly the default classes")
	}
	if reqs := e.r.requestsOfAll(context.Background(), class); !slices.ContainsFunc(reqs, func(r reconcile.Request) bool { return r.Name == rn.Name && r.Namespace == rn.Namespace }) {
		t.Errorf("requests %v do not include %s/%s", reqs, rn.Namespace, rn.Name)
	}
	e.reconcile(rn)
	if got := e.namespace(target).Annotations[offloadv1alpha1.AnnotationPriorityClasses]; got != class.Name {
		t.Errorf("annotation %s = %q, want %q", offloadv1alpha1.AnnotationPriorityClasses, got, class.Name)
	}
}

func TestATwinNamespaceHoldsWhatWasLentAndNoMore(t *testing.T) {
	e := newEnv(t)
	o := e.offer(e.tenant, "2", "4Gi", "20")
	patch := client.MergeFrom(o.DeepCopy())
	o.Spec.Resources[corev1.ResourceEphemeralStorage] = resource.MustParse("10Gi")
	o.Spec.Resources["nvidia.com/gpu"] = resource.MustParse("0")
	if err := e.c.Patch(context.Background(), o, patch); err != nil {
		t.Fatal(err)
	}
	rn := e.ready(e.tenant)
	target := rn.Spec.TargetNamespace

	var q corev1.ResourceQuota
	if err := e.c.Get(context.Background(), key(target, QuotaName), &q); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[corev1.ResourceName]string{
		corev1.ResourceRequestsEphemeralStorage: "10Gi", "requests.nvidia.com/gpu": "0", "count/serviceaccounts": "10",
		corev1.ResourceRequestsCPU: "2", corev1.ResourceRequestsMemory: "4Gi",
	} {
		if got, ok := q.Spec.Hard[name]; !ok || got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("quota %s = %s (set %v), want %s", name, got.String(), ok, want)
		}
	}

	// The API server's LimitRanger gives a container without limits what
	// was lent as its limits, and refuses one that asks for more.
	ctx := context.Background()
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: target},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := framework.Poll(ctx, 100*time.Millisecond, 10*time.Second, func(ctx context.Context) (bool, string) {
		if err := e.c.Create(ctx, plain); err != nil {
			return false, err.Error()
		}
		return plain.Spec.Containers[0].Resources.Limits != nil, fmt.Sprintf("limits %v", plain.Spec.Containers[0].Resources.Limits)
	}); err != nil {
		t.Fatal(err)
	}
	limits := plain.Spec.Containers[0].Resources.Limits
	if limits.Cpu().Cmp(resource.MustParse("2")) != 0 || limits.Memory().Cmp(resource.MustParse("4Gi")) != 0 ||
		limits.StorageEphemeral().Cmp(resource.MustParse("10Gi")) != 0 {
		t.Errorf("a container without limits got limits %v, want the offer's cpu, memory and ephemeral storage", limits)
	}
	greedy := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "greedy", Namespace: target},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")}}}}}}
	if err := e.c.Create(ctx, greedy); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "maximum memory usage per Container is 4Gi") {
		t.Errorf("a container whose limit is more than the offer: err = %v, want Forbidden by the LimitRange", err)
	}

	// A reconcile with nothing changed writes nothing: the stored
	// LimitRange, defaulted by the API server, is what the controller wants.
	var before corev1.LimitRange
	if err := e.c.Get(ctx, key(target, LimitRangeName), &before); err != nil {
		t.Fatal(err)
	}
	e.reconcile(rn)
	var after corev1.LimitRange
	if err := e.c.Get(ctx, key(target, LimitRangeName), &after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the LimitRange was rewritten with nothing changed: %+v", after.Spec)
	}

	// A provider that lets the tenant's containers run without limits
	// (UnlimitedContainers): a container without limits gets none, and
	// one above the offer is admitted; requests are still defaulted.
	e.get(e.tenant)
	patch = client.MergeFrom(e.tenant.DeepCopy())
	e.tenant.Spec.Policy.UnlimitedContainers = true
	if err := e.c.Patch(ctx, e.tenant, patch); err != nil {
		t.Fatal(err)
	}
	e.reconcile(rn)
	free := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "free", Namespace: target},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := framework.Poll(ctx, 100*time.Millisecond, 10*time.Second, func(ctx context.Context) (bool, string) {
		free.ResourceVersion = ""
		if err := e.c.Create(ctx, free); err != nil {
			return false, err.Error()
		}
		if free.Spec.Containers[0].Resources.Limits == nil {
			return true, ""
		}
		// The LimitRanger still had the old LimitRange: try again.
		_ = e.c.Delete(ctx, free, client.GracePeriodSeconds(0))
		return false, fmt.Sprintf("limits %v", free.Spec.Containers[0].Resources.Limits)
	}); err != nil {
		t.Fatal(err)
	}
	if free.Spec.Containers[0].Resources.Requests.Memory().Cmp(DefaultRequests[corev1.ResourceMemory]) != 0 {
		t.Errorf("a container without requests got requests %v, want the default ones", free.Spec.Containers[0].Resources.Requests)
	}
	greedy.ResourceVersion = ""
	if err := e.c.Create(ctx, greedy); err != nil {
		t.Errorf("a container whose limit is more than the offer, in a namespace of unlimited containers: %v", err)
	}
}

func TestAnOfferBelowTheDefaultRequestsSetsNoMaximum(t *testing.T) {
	spec := LimitRangeFor(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("1Gi")}, false)
	item := spec.Limits[0]
	if _, ok := item.Max[corev1.ResourceCPU]; ok {
		t.Errorf("max cpu %v is below the default request: the LimitRange would be invalid", item.Max)
	}
	if item.Max.Memory().Cmp(resource.MustParse("1Gi")) != 0 || item.Default.Memory().Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("max %v, default %v; want 1Gi of memory for both", item.Max, item.Default)
	}
}
