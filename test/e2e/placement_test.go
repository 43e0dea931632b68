package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// The chapters of this file run in
// TestOffloadedPodsRunInTheProvidersTwinNamespace (offload_test.go).

// shownIPs records every pod IP the consumer's pods in ns with label
// selector show, in every status the API server stored, from before they
// exist. It stops with ctx.
type shownIPs struct {
	mu  sync.Mutex
	ips map[string][]string // by pod name, in order
}

func watchShownIPs(ctx context.Context, t *testing.T, c *localcluster.Cluster, ns, selector string) *shownIPs {
	t.Helper()
	w, err := c.Kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	s := &shownIPs{ips: map[string][]string{}}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			s.mu.Lock()
			for _, ip := range p.Status.PodIPs {
				s.ips[p.Name] = append(s.ips[p.Name], ip.IP)
			}
			s.mu.Unlock()
		}
	}()
	return s
}

// outside returns the IPs shown that the consumer's views of the
// provider's pods (views) do not hold: addresses borrowed from the
// provider, which on the consumer may be another pod's.
func (s *shownIPs) outside(views []reflection.Mapping) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for pod, ips := range s.ips {
		for _, ip := range ips {
			a, err := netip.ParseAddr(ip)
			held := false
			for _, m := range views {
				held = held || (err == nil && m.View.Contains(a))
			}
			if !held {
				out = append(out, pod+" showed "+ip)
			}
		}
	}
	return out
}

// expectNoBorrowedAddress checks that the offloaded pods watched by shown
// never showed an address outside the consumer's view of the provider's
// pods: not before the tunnel's translation was known, not after.
func expectNoBorrowedAddress(ctx context.Context, t *testing.T, consumer *localcluster.Cluster, shown *shownIPs) {
	t.Helper()
	var tunnel offloadv1alpha1.Tunnel
	key := client.ObjectKey{Namespace: localcluster.InstallNamespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, "provider")}
	if err := ctrlClient(t, consumer).Get(ctx, key, &tunnel); err != nil {
		t.Fatal(err)
	}
	views := reflection.AddressesOf(&tunnel).Provider
	for _, m := range views {
		if m.Real == m.View {
			t.Fatalf("the consumer's view of the provider's pods %s is their real CIDR: this test needs both clusters on the same pod CIDR", m.View)
		}
	}
	if bad := shown.outside(views); len(bad) > 0 {
		t.Errorf("the consumer showed offloaded pods with addresses outside its view %v of the provider's pods, borrowed from the provider: %s",
			views, strings.Join(bad, "; "))
	}
}

// expectTheProviderChoosesItsNodes has the provider's admin choose, in the
// Tenant's policy, which of its nodes run the consumer's pods: a fake node
// labelled pool=tenants and tainted dedicated=tenants:NoSchedule, of two
// new ones. The offer then counts that node only, both sides' status says
// so, a spread Deployment whose replicas the consumer's scheduler all put
// on the virtual node runs there whole, and the consumer's own identity
// cannot create a pod in its twin namespace that does not select it.
func expectTheProviderChoosesItsNodes(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, twin, consumerID string) {
	t.Helper()
	const chosenCPU, otherCPU = "8", "64" // the real node has 2
	taint := corev1.Taint{Key: "dedicated", Value: "tenants", Effect: corev1.TaintEffectNoSchedule}
	if err := provider.AddFakeNodes(ctx, 1, localcluster.Capacity{CPU: chosenCPU, Memory: "16Gi", Pods: "20"}, taint); err != nil {
		t.Fatal(err)
	}
	if err := provider.AddFakeNodes(ctx, 1, localcluster.Capacity{CPU: otherCPU, Memory: "256Gi", Pods: "110"}); err != nil {
		t.Fatal(err)
	}
	chosen, other := localcluster.FakeNodeName(provider.Name, 0), localcluster.FakeNodeName(provider.Name, 1)
	// A merge patch, not Get and Update: kwok writes the new node's status
	// at the same time, and an Update would conflict with it.
	label := []byte(`{"metadata":{"labels":{"pool":"tenants"}}}`)
	if _, err := provider.Kube.CoreV1().Nodes().Patch(ctx, chosen, types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// The provider's admin sets the choice on the consumer's Tenant.
	pc := ctrlClient(t, provider)
	var tenant offloadv1alpha1.Tenant
	if err := pc.Get(ctx, client.ObjectKey{Name: consumer.Name}, &tenant); err != nil {
		t.Fatal(err)
	}
	before := tenant.Spec.Policy
	patch := client.MergeFrom(tenant.DeepCopy())
	tenant.Spec.Policy.NodeSelector = map[string]string{"pool": "tenants"}
	tenant.Spec.Policy.Tolerations = []corev1.Toleration{{Key: taint.Key, Operator: corev1.TolerationOpEqual, Value: taint.Value, Effect: taint.Effect}}
	if err := pc.Patch(ctx, &tenant, patch); err != nil {
		t.Fatal(err)
	}
	// What follows this in the test runs on the provider's real node again.
	defer func() {
		_ = consumer.Kube.AppsV1().Deployments("work").Delete(ctx, "spread", metav1.DeleteOptions{})
		waitFor(ctx, t, 2*time.Minute, "the spread replicas to go on both sides", func(ctx context.Context) (bool, string) {
			local, err1 := consumer.Kube.CoreV1().Pods("work").List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
			remote, err2 := provider.Kube.CoreV1().Pods(twin).List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
			if err1 != nil || err2 != nil {
				return false, fmt.Sprint(err1, err2)
			}
			return len(local.Items)+len(remote.Items) == 0, fmt.Sprintf("%d consumer and %d remote pods left", len(local.Items), len(remote.Items))
		})
		var tn offloadv1alpha1.Tenant
		if err := pc.Get(ctx, client.ObjectKey{Name: consumer.Name}, &tn); err != nil {
			t.Fatal(err)
		}
		p := client.MergeFrom(tn.DeepCopy())
		tn.Spec.Policy = before
		if err := pc.Patch(ctx, &tn, p); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{chosen, other} {
			if err := provider.Kube.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Error(err)
			}
		}
		waitFor(ctx, t, time.Minute, "the consumer to know the provider's policy without a node choice", func(ctx context.Context) (bool, string) {
			var fc offloadv1alpha1.ForeignCluster
			if err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: "provider"}, &fc); err != nil {
				return false, err.Error()
			}
			pol := fc.Status.ProviderPolicy
			return pol != nil && len(pol.NodeSelector) == 0 && len(pol.Tolerations) == 0, fmt.Sprintf("%+v", pol)
		})
	}()

	// The offer counts the chosen node only (the chart lends 50% of its
	// allocatable: 4 cpu, whatever the DaemonSet pods there request), not
	// the other fake node (64 cpu) nor the real node, and the consumer's
	// agent and both sides' status learn the choice.
	half := resource.MustParse("4")
	waitFor(ctx, t, time.Minute, "the offer to count the chosen node only, and the consumer to know the choice", func(ctx context.Context) (bool, string) {
		var offers offloadv1alpha1.ResourceOfferList
		if err := pc.List(ctx, &offers, client.InNamespace(tenant.Spec.TenantNamespace)); err != nil || len(offers.Items) != 1 {
			return false, fmt.Sprintf("offers %d, %v", len(offers.Items), err)
		}
		if got := offers.Items[0].Spec.Resources[corev1.ResourceCPU]; got.Cmp(half) != 0 {
			return false, "offer cpu " + got.String() + ", want half the chosen node's allocatable cpu, 4"
		}
		var fc offloadv1alpha1.ForeignCluster
		if err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: "provider"}, &fc); err != nil {
			return false, err.Error()
		}
		if pol := fc.Status.ProviderPolicy; pol == nil || pol.NodeSelector["pool"] != "tenants" || len(pol.Tolerations) != 1 {
			return false, fmt.Sprintf("the consumer knows the policy %+v", fc.Status.ProviderPolicy)
		}
		return true, ""
	})
	if got, want := peerFields(t, consumer, "provider")["nodes"], "nodes labelled pool=tenants, tolerating dedicated=tenants:NoSchedule"; got != want {
		t.Errorf("the consumer's status peer provider shows the nodes there as %q, want %q", got, want)
	}
	if got, want := peerFields(t, provider, consumer.Name)["tenantNodes"], "nodes labelled pool=tenants, tolerating dedicated=tenants:NoSchedule"; got != want {
		t.Errorf("the provider's status peer %s shows the tenant's nodes as %q, want %q", consumer.Name, got, want)
	}

	// Three replicas spread at most one apart over hostnames: the consumer's
	// scheduler puts them all on the virtual node, its only node for them;
	// the provider, lending one node, runs all three there.
	d := offloadedApp("spread", 3)
	d.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}},
	}}
	if _, err := consumer.Kube.AppsV1().Deployments("work").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 2*time.Minute, "the three spread replicas to run on the chosen node", func(ctx context.Context) (bool, string) {
		pods, err := provider.Kube.CoreV1().Pods(twin).List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
		if err != nil || len(pods.Items) != 3 {
			return false, fmt.Sprintf("%d remote pods, %v", len(pods.Items), err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != chosen || p.Status.Phase != corev1.PodRunning {
				return false, fmt.Sprintf("remote pod %s on %q, %s", p.Name, p.Spec.NodeName, p.Status.Phase)
			}
			if c := p.Spec.TopologySpreadConstraints; len(c) != 1 || c[0].WhenUnsatisfiable != corev1.ScheduleAnyway {
				return false, fmt.Sprintf("remote pod %s spreads %+v, want the consumer's spread as a preference", p.Name, c)
			}
		}
		local, err := consumer.Kube.CoreV1().Pods("work").List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range local.Items {
			if p.Spec.NodeName != "offload-provider" || p.Status.Phase != corev1.PodRunning {
				return false, fmt.Sprintf("consumer pod %s on %q, %s", p.Name, p.Spec.NodeName, p.Status.Phase)
			}
		}
		return len(local.Items) == 3, fmt.Sprintf("%d consumer pods", len(local.Items))
	})

	// The provider's API server holds the choice against the consumer's own
	// credentials: a pod that does not select the chosen node is refused.
	_, tenantKube := tenantClient(ctx, t, consumer)
	rogue := harmlessPod("rogue", twin)
	rogue.Labels = map[string]string{offloadv1alpha1.LabelOriginClusterID: consumerID}
	waitFor(ctx, t, 30*time.Second, "the provider to refuse the tenant's pod that selects no chosen node", func(ctx context.Context) (bool, string) {
		_, err := tenantKube.CoreV1().Pods(twin).Create(ctx, rogue, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), offloadv1alpha1.PodNodesPolicyName) && strings.Contains(err.Error(), "pool=tenants"),
			fmt.Sprint(err)
	})
	rogue.Spec.NodeSelector = map[string]string{"pool": "tenants"}
	if _, err := tenantKube.CoreV1().Pods(twin).Create(ctx, rogue, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("the tenant's pod that selects the chosen node is refused: %v", err)
	}
}
