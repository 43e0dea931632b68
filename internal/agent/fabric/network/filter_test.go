package network

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// The consumer's filter follows its pods: the providers' pods may reach
// the pods of offloaded (or opted-in) namespaces on this cluster, not the
// others, not the pods of virtual nodes (a provider's own), and nothing at
// all when there are none.
func TestTheConsumersFilterListsThePodsOfOffloadedNamespacesOnly(t *testing.T) {
	cfg := envtest.APIServer(t)
	admin := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, admin)
	ctx := t.Context()
	cns := envtest.NewNamespace(t, admin, "offload-c")
	settings := Settings{Namespace: cns, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	envtest.StartManager(t, cfg, func(mgr ctrlmanager.Manager) error {
		return (&ConsumerFilterReconciler{Client: mgr.GetClient(), Settings: settings, skipNameValidation: true}).SetupWithManager(mgr)
	})
	tunnel := &offloadv1alpha1.Tunnel{ObjectMeta: metav1.ObjectMeta{Name: "client-p", Namespace: cns},
		Spec: offloadv1alpha1.TunnelSpec{ClusterID: "1c8f3d0f-2b3c-4d4e-9f0a-123456789abc", ClusterName: "p", Role: offloadv1alpha1.TunnelClient, LocalPodCIDRs: []string{"10.244.0.0/16"}}}
	must(t, admin.Create(ctx, tunnel))

	namespace := func(labels map[string]string) string {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "filter-", Labels: labels}}
		must(t, admin.Create(ctx, ns))
		return ns.Name
	}
	pod := func(ns, name, ip string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		must(t, admin.Create(ctx, p))
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		must(t, admin.Status().Update(ctx, p))
		return p
	}
	offloaded := namespace(map[string]string{offloadv1alpha1.LabelOffloaded: "true"})
	optedIn := namespace(map[string]string{LabelPeerReachable: "true"})
	private := namespace(nil)
	expect := func(what string, want ...string) {
		t.Helper()
		_, err := framework.Poll(ctx, 50*time.Millisecond, 10*time.Second, func(ctx context.Context) (bool, string) {
			var got offloadv1alpha1.Tunnel
			if err := admin.Get(ctx, client.ObjectKeyFromObject(tunnel), &got); err != nil {
				return false, err.Error()
			}
			return slices.Equal(got.Spec.AllowedDestinations, want), fmt.Sprintf("allowed %v, want %v", got.Spec.AllowedDestinations, want)
		})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	expect("with no pod, the network address: nothing is let in", "10.244.0.0/32")

	pod(offloaded, "web", "10.244.1.5")
	pod(offloaded, "remote", "10.71.0.3") // on a virtual node: a view of the provider's
	pod(private, "agent", "10.244.1.6")
	pod(optedIn, "metrics", "10.244.1.7")
	expect("the pods of the offloaded and opted-in namespaces", "10.244.1.5/32", "10.244.1.7/32")

	var ns corev1.Namespace
	must(t, admin.Get(ctx, client.ObjectKey{Name: optedIn}, &ns))
	patch := client.MergeFrom(ns.DeepCopy())
	delete(ns.Labels, LabelPeerReachable)
	must(t, admin.Patch(ctx, &ns, patch))
	expect("a namespace that opts out", "10.244.1.5/32")

	must(t, admin.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: offloaded}}, client.GracePeriodSeconds(0)))
	expect("the last reachable pod gone", "10.244.0.0/32")
}

// A cluster that only provides never watches its own pods: the provider's
// answers read the consumers' pods (label LabelOriginPodUID) and the
// gateways' only, and the consumer's filter watches the cluster's pods
// from its first client Tunnel on.
func TestAClusterThatOnlyProvidesNeverWatchesItsOwnPods(t *testing.T) {
	cfg := envtest.APIServer(t)
	admin := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, admin)
	ctx := t.Context()
	ns := envtest.NewNamespace(t, admin, "offload-p")
	counted, unselected := envtest.CountRequests(cfg, func(req *http.Request) bool {
		return slices.Contains(strings.Split(req.URL.Path, "/"), "pods") && req.URL.Query().Get("labelSelector") == ""
	})
	settings := Settings{Namespace: ns, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	provider := &ProviderReconciler{Settings: settings}
	envtest.StartManager(t, counted, func(mgr ctrlmanager.Manager) error {
		provider.Client, provider.Reader = mgr.GetClient(), mgr.GetAPIReader()
		if err := provider.SetupWithManager(mgr); err != nil {
			return err
		}
		return (&ConsumerFilterReconciler{Client: mgr.GetClient(), Settings: settings, skipNameValidation: true}).SetupWithManager(mgr)
	})

	// The provider's own pod, bound and given an address, and a consumer's.
	own := envtest.NewNamespace(t, admin, "own")
	twin := envtest.NewNamespace(t, admin, "twin")
	for i, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "own", Namespace: own}},
		{ObjectMeta: metav1.ObjectMeta{Name: "sent", Namespace: twin, Labels: map[string]string{offloadv1alpha1.LabelOriginPodUID: "uid"}}},
	} {
		p.Spec = corev1.PodSpec{NodeName: "node", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}
		must(t, admin.Create(ctx, p))
		p.Status.PodIP, p.Status.PodIPs = fmt.Sprintf("10.244.0.%d", 10+i), []corev1.PodIP{{IP: fmt.Sprintf("10.244.0.%d", 10+i)}}
		must(t, admin.Status().Update(ctx, p))
	}
	framework.Eventually(t, 10*time.Second, "the provider to see the consumer's pod", func(ctx context.Context) bool {
		var pods corev1.PodList
		return provider.pods.List(ctx, &pods, client.InNamespace(twin)) == nil && len(pods.Items) == 1 && pods.Items[0].Status.PodIP == "10.244.0.11"
	})
	var owns corev1.PodList
	must(t, provider.pods.List(ctx, &owns, client.InNamespace(own)))
	if len(owns.Items) != 0 || unselected.Load() != 0 {
		t.Errorf("a cluster that only provides holds %d of its own pods and made %d requests for pods of no label; want none", len(owns.Items), unselected.Load())
	}

	// A client Tunnel makes it a consumer too: its filter watches its pods.
	must(t, admin.Create(ctx, &offloadv1alpha1.Tunnel{ObjectMeta: metav1.ObjectMeta{Name: "client-p", Namespace: ns},
		Spec: offloadv1alpha1.TunnelSpec{ClusterID: "1c8f3d0f-2b3c-4d4e-9f0a-123456789abc", ClusterName: "p", Role: offloadv1alpha1.TunnelClient, LocalPodCIDRs: []string{"10.244.0.0/16"}}}))
	framework.Eventually(t, 10*time.Second, "the consumer's filter to watch this cluster's pods", func(context.Context) bool {
		return unselected.Load() > 0
	})
}
