package network

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/summary"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestTheProvidersViewsMustBeOfThisClustersPodCIDRs(t *testing.T) {
	s := Settings{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	for _, tc := range []struct {
		name  string
		views []offloadv1alpha1.CIDRMapping
		ok    bool
	}{
		{"one view of the pod CIDR", []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.80.0.0/16"}}, true},
		{"no view", nil, false},
		{"a view of another range", []offloadv1alpha1.CIDRMapping{{Real: "10.96.0.0/16", View: "10.80.0.0/16"}}, false},
		{"a view of another size", []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.80.0.0/24"}}, false},
		{"two views of one CIDR", []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.80.0.0/16"}, {Real: "10.244.0.0/16", View: "10.81.0.0/16"}}, false},
		{"garbage", []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "x"}}, false},
	} {
		if bad := s.checkPeerViews(tc.views, "the provider"); (bad == nil) != tc.ok {
			t.Errorf("%s: checkPeerViews(%v) = %+v, want ok=%v", tc.name, tc.views, bad, tc.ok)
		}
	}
}

// providerAlone runs the provider's network controller for a tenant whose
// NetworkPeering the test writes itself, as a hostile consumer would.
type providerAlone struct {
	admin          client.Client
	pns, tenantNS  string
	consumer, id   string
	tunnel         client.ObjectKey
	nodeAddress    string
	consumerPubKey string
}

func newProviderAlone(t *testing.T) *providerAlone {
	t.Helper()
	cfg := envtest.APIServer(t)
	admin := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, admin)
	ctx := t.Context()
	suffix := rand.String(5)
	p := (&providerAlone{admin: admin, pns: envtest.NewNamespace(t, admin, "offload-p")}).tenantOf(t, "hostile-"+suffix)
	must(t, admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.GatewayTemplateConfigMap, Namespace: p.pns},
		Data: map[string]string{offloadv1alpha1.GatewayTemplateKey: template}}))
	// A node of the provider, on a private network a consumer could name.
	p.nodeAddress = "192.168.50.7"
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + suffix}}
	must(t, admin.Create(ctx, node))
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: p.nodeAddress}}
	must(t, admin.Status().Update(ctx, node))
	t.Cleanup(func() { _ = admin.Delete(context.Background(), node) })

	envtest.StartManager(t, cfg, func(mgr ctrlmanager.Manager) error {
		// The ForeignCluster's NetworkReady is the summary's mirror of
		// the server Tunnel's.
		if err := (&summary.Reconciler{Client: mgr.GetClient(), Namespace: p.pns}).SetupWithManager(mgr); err != nil {
			return err
		}
		return (&ProviderReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Settings: Settings{
			Namespace: p.pns, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
			ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")},
			// Views come from the first pool; the others cover the
			// provider's own ranges, which a mirror may not overlap
			// even inside a pool.
			Pools: []netip.Prefix{netip.MustParsePrefix("10.80.0.0/12"), netip.MustParsePrefix("10.96.0.0/12"),
				netip.MustParsePrefix("10.240.0.0/12"), netip.MustParsePrefix("192.168.0.0/16")},
			GatewayServiceType: corev1.ServiceTypeNodePort, GatewayAddress: "203.0.113.9",
		}}).SetupWithManager(mgr)
	})
	return p
}

// tenantOf is p for another consumer of the same provider: its Tenant and
// tenant namespace, which go with the test.
func (p *providerAlone) tenantOf(t *testing.T, consumer string) *providerAlone {
	t.Helper()
	q := *p
	q.consumer, q.id = consumer, string(uuid.NewUUID())
	q.tenantNS = offloadv1alpha1.TenantNamespace(q.consumer)
	q.tunnel = client.ObjectKey{Namespace: q.pns, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelServer, q.consumer)}
	key, err := wgtypes.GeneratePrivateKey()
	must(t, err)
	q.consumerPubKey = key.PublicKey().String()
	tenant := &offloadv1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: q.consumer},
		Spec: offloadv1alpha1.TenantSpec{ClusterID: q.id, ClusterName: q.consumer, TenantNamespace: q.tenantNS}}
	// Other tests' provider controllers answer every NetworkPeering of the
	// shared API server: the tenant goes with the test (see newWorldOf).
	t.Cleanup(func() { _ = q.admin.Delete(context.Background(), tenant) })
	must(t, q.admin.Create(t.Context(), tenant))
	must(t, q.admin.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: q.tenantNS, Labels: map[string]string{offloadv1alpha1.LabelTenant: q.id}}}))
	return &q
}

// announce writes the NetworkPeering's pod CIDRs and waits for the
// provider's answer to them: its Ready condition for this generation.
func (p *providerAlone) announce(t *testing.T, cidrs ...string) *metav1.Condition {
	t.Helper()
	return p.announceWith(t, nil, cidrs...)
}

// announceWith is announce with the consumer's views of the provider's
// pods.
func (p *providerAlone) announceWith(t *testing.T, views []offloadv1alpha1.CIDRMapping, cidrs ...string) *metav1.Condition {
	t.Helper()
	ctx := t.Context()
	np := &offloadv1alpha1.NetworkPeering{ObjectMeta: metav1.ObjectMeta{Namespace: p.tenantNS, Name: offloadv1alpha1.NetworkPeeringName}}
	spec := offloadv1alpha1.NetworkPeeringSpec{ClusterID: p.id, PublicKey: p.consumerPubKey, PodCIDRs: cidrs, ProviderViews: views}
	if err := p.admin.Get(ctx, client.ObjectKeyFromObject(np), np); apierrors.IsNotFound(err) {
		np.Spec = spec
		must(t, p.admin.Create(ctx, np))
	} else {
		update(t, p.admin, np, func() { np.Spec = spec })
	}
	var ready *metav1.Condition
	framework.Eventually(t, 20*time.Second, "the provider answers the announcement of "+strings.Join(cidrs, ","), func(ctx context.Context) bool {
		if p.admin.Get(ctx, client.ObjectKeyFromObject(np), np) != nil {
			return false
		}
		ready = meta.FindStatusCondition(np.Status.Conditions, offloadv1alpha1.ConditionReady)
		return ready != nil && ready.ObservedGeneration == np.Generation
	})
	return ready
}

func (p *providerAlone) mappings(t *testing.T) []offloadv1alpha1.CIDRMapping {
	t.Helper()
	var tn offloadv1alpha1.Tunnel
	if err := p.admin.Get(t.Context(), p.tunnel, &tn); err != nil {
		return nil
	}
	return tn.Spec.Mappings
}

// A consumer's NetworkPeering is hostile input: what it announces outside
// private ranges gets no Tunnel mapping (so no route, AllowedIP or rule),
// what overlaps the provider's own addresses is seen through a view of the
// pool, and, once agreed, its CIDRs change only with the admin's approval.
func TestAConsumerCannotSteerTheProvidersRoutes(t *testing.T) {
	p := newProviderAlone(t)
	// The provider's record of the consumer shows the refusal too.
	fc := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: p.consumer},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: p.id, ClusterName: p.consumer}}
	must(t, p.admin.Create(t.Context(), fc))
	t.Cleanup(func() { _ = p.admin.Delete(context.Background(), fc) })
	for _, cidrs := range [][]string{{"169.254.169.254/32"}, {"128.0.0.0/1"}, {"10.244.0.0/16", "8.8.8.0/24"}, {"10.0.0.0/8"}} {
		ready := p.announce(t, cidrs...)
		if ready.Status != metav1.ConditionFalse || ready.Reason != ReasonRefusedPodCIDRs || !strings.Contains(ready.Message, "nothing was routed") {
			t.Errorf("announcing %v: Ready %+v, want False %s", cidrs, ready, ReasonRefusedPodCIDRs)
		}
		if m := p.mappings(t); m != nil {
			t.Errorf("announcing %v left Tunnel mappings %v", cidrs, m)
		}
		p.waitNetworkReady(t, fc, ReasonRefusedPodCIDRs, cidrs[len(cidrs)-1])
	}

	// The provider node's own network: remapped, so the provider's nodes
	// route the view, never their own address, into the tunnel.
	nodeNet := netip.PrefixFrom(netip.MustParseAddr(p.nodeAddress), 24).Masked().String()
	ready := p.announce(t, nodeNet)
	if ready.Reason == ReasonRefusedPodCIDRs {
		t.Fatalf("a private CIDR was refused: %+v", ready)
	}
	var agreed []offloadv1alpha1.CIDRMapping
	framework.Eventually(t, 20*time.Second, "the Tunnel maps the consumer's CIDR", func(context.Context) bool {
		agreed = p.mappings(t)
		return len(agreed) == 1
	})
	if agreed[0].Real != nodeNet || netip.MustParsePrefix(agreed[0].View).Contains(netip.MustParseAddr(p.nodeAddress)) ||
		!netip.MustParsePrefix("10.80.0.0/12").Contains(netip.MustParsePrefix(agreed[0].View).Addr()) {
		t.Errorf("the consumer's %s covering node address %s is seen as %s, want a view from the pool 10.80.0.0/12", nodeNet, p.nodeAddress, agreed[0].View)
	}

	// Frozen: a change waits for the admin.
	ready = p.announce(t, "172.20.0.0/16")
	if ready.Status != metav1.ConditionFalse || ready.Reason != ReasonPodCIDRsChanged || !strings.Contains(ready.Message, "kubectl annotate tunnel") {
		t.Errorf("changing the CIDRs: Ready %+v, want False %s saying how to approve", ready, ReasonPodCIDRsChanged)
	}
	if m := p.mappings(t); !slices.Equal(m, agreed) {
		t.Errorf("the unapproved change moved the Tunnel's mappings from %v to %v", agreed, m)
	}
	tn := &offloadv1alpha1.Tunnel{ObjectMeta: metav1.ObjectMeta{Namespace: p.tunnel.Namespace, Name: p.tunnel.Name}}
	update(t, p.admin, tn, func() { tn.Annotations = map[string]string{AnnotationApprovedPodCIDRs: "172.20.0.0/16"} })
	framework.Eventually(t, 20*time.Second, "the approved change reaches the Tunnel", func(context.Context) bool {
		m := p.mappings(t)
		return len(m) == 1 && m[0].Real == "172.20.0.0/16"
	})

	// The consumer refusing the provider's announcement shows here, its
	// words cleaned of what a terminal would obey.
	np := &offloadv1alpha1.NetworkPeering{ObjectMeta: metav1.ObjectMeta{Namespace: p.tenantNS, Name: offloadv1alpha1.NetworkPeeringName}}
	update(t, p.admin, np, func() {
		np.Annotations = map[string]string{AnnotationRefusedAnnouncement: "RefusedPodCIDRs: your views\x1b[2J are wrong\x07"}
	})
	c := p.waitNetworkReady(t, fc, ReasonRefusedByConsumer, "your views")
	if strings.ContainsAny(c.Message, "\x1b\x07") || !strings.Contains(c.Message, "consumer "+p.consumer) {
		t.Errorf("NetworkReady %q: want the consumer named and no control character", c.Message)
	}
	update(t, p.admin, np, func() { delete(np.Annotations, AnnotationRefusedAnnouncement) })
	framework.Eventually(t, 20*time.Second, "the consumer's withdrawn refusal leaves the provider's record", func(ctx context.Context) bool {
		var got offloadv1alpha1.ForeignCluster
		if p.admin.Get(ctx, client.ObjectKeyFromObject(fc), &got) != nil {
			return false
		}
		c := meta.FindStatusCondition(got.Status.Conditions, offloadv1alpha1.ConditionNetworkReady)
		return c != nil && c.Reason != ReasonRefusedByConsumer
	})
}

// The consumer's views of the provider's pods become routes on every
// provider node and addresses its gateway translates: the provider
// mirrors them only when they are views of its pod CIDRs that overlap
// nothing it uses, and says why not otherwise.
func TestAConsumerCannotSteerTheProvidersMirror(t *testing.T) {
	p := newProviderAlone(t)
	view := func(real, view string) []offloadv1alpha1.CIDRMapping {
		return []offloadv1alpha1.CIDRMapping{{Real: real, View: view}}
	}
	// Another consumer's mirror, which no view may overlap.
	other := p.tenantOf(t, "other-"+rand.String(5))
	if ready := other.announceWith(t, view("10.244.0.0/16", "10.87.0.0/16"), "10.1.0.0/16"); !strings.Contains(ready.Message, "10.87.0.0/16 for 10.244.0.0/16") {
		t.Fatalf("the other consumer is not mirrored: %+v", ready)
	}
	mirrored := func(t *testing.T) []offloadv1alpha1.CIDRMapping {
		var tn offloadv1alpha1.Tunnel
		must(t, p.admin.Get(t.Context(), p.tunnel, &tn))
		return tn.Spec.PeerViews
	}
	good := view("10.244.0.0/16", "10.86.0.0/16")
	if ready := p.announceWith(t, good, "10.244.0.0/16"); ready.Status != metav1.ConditionTrue || !strings.Contains(ready.Message, "reach each other at the consumer's addresses of them, 10.86.0.0/16 for 10.244.0.0/16") {
		t.Errorf("a good view: Ready %+v", ready)
	}
	if m := mirrored(t); !slices.Equal(m, good) {
		t.Fatalf("the server Tunnel mirrors %v, want %v", m, good)
	}
	own := p.mappings(t)[0].View // the provider's view of the consumer
	for _, tc := range []struct {
		name  string
		views []offloadv1alpha1.CIDRMapping
		says  string
	}{
		{"none", nil, "announced no view"},
		{"a view of another range", view("10.1.0.0/16", "10.66.0.0/16"), "not a view of one of this cluster's pod CIDRs"},
		{"a view of another size", view("10.244.0.0/16", "10.66.0.0/24"), "not a view of one of this cluster's pod CIDRs"},
		{"two views of one CIDR", append(view("10.244.0.0/16", "10.66.0.0/16"), view("10.244.0.0/16", "10.68.0.0/16")...), "exactly one"},
		{"a public range", view("10.244.0.0/16", "8.8.0.0/16"), "outside the private ranges"},
		{"a private range outside the remap pools", view("10.244.0.0/16", "10.66.0.0/16"), "outside this cluster's remap pools (10.80.0.0/12, 10.96"},
		{"the provider's pods", view("10.244.0.0/16", "10.244.0.0/16"), "overlaps 10.244.0.0/16"},
		{"the provider's Services", view("10.244.0.0/16", "10.96.0.0/16"), "overlaps 10.96.0.0/12"},
		{"the provider's nodes", view("10.244.0.0/16", "192.168.0.0/16"), "overlaps 192.168."},
		{"the provider's view of the consumer", view("10.244.0.0/16", own), "overlaps " + own},
		{"another consumer's mirror", view("10.244.0.0/16", "10.87.0.0/16"), "overlaps 10.87.0.0/16"},
	} {
		ready := p.announceWith(t, tc.views, "10.244.0.0/16")
		if !strings.Contains(ready.Message, "do not reach each other at the consumer's addresses") || !strings.Contains(ready.Message, tc.says) {
			t.Errorf("%s: Ready %q, want it to say %q", tc.name, ready.Message, tc.says)
		}
		if m := mirrored(t); m != nil {
			t.Errorf("%s: the server Tunnel mirrors %v", tc.name, m)
		}
	}
}

// waitNetworkReady waits for NetworkReady False with reason on the
// provider's ForeignCluster fc of the consumer, its message saying says.
func (p *providerAlone) waitNetworkReady(t *testing.T, fc *offloadv1alpha1.ForeignCluster, reason, says string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	framework.Eventually(t, 20*time.Second, "NetworkReady "+reason+" on the provider's record of the consumer", func(ctx context.Context) bool {
		var got offloadv1alpha1.ForeignCluster
		if p.admin.Get(ctx, client.ObjectKeyFromObject(fc), &got) != nil {
			return false
		}
		c = meta.FindStatusCondition(got.Status.Conditions, offloadv1alpha1.ConditionNetworkReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason && strings.Contains(c.Message, says) &&
			got.Status.Network == offloadv1alpha1.PhaseFailed
	})
	return c
}

// A provider's NetworkPeering status is hostile input for the consumer:
// pod CIDRs outside private ranges, or views that are not of the
// consumer's own pod CIDRs, get no mapping on the consumer (so no route),
// and NetworkReady says why; agreed CIDRs change only with approval.
func TestAProviderCannotSteerTheConsumersRoutes(t *testing.T) {
	w := newWorldOf(t, "10.64.0.0/12", "10.80.0.0/12", "", false)
	ctx := t.Context()
	key, err := wgtypes.GeneratePrivateKey()
	must(t, err)
	np := &offloadv1alpha1.NetworkPeering{}
	framework.Eventually(t, 20*time.Second, "the consumer asks for the tunnel", func(ctx context.Context) bool {
		return w.admin.Get(ctx, client.ObjectKey{Namespace: w.tenantNS, Name: offloadv1alpha1.NetworkPeeringName}, np) == nil
	})
	clientTunnel := client.ObjectKey{Namespace: w.cns, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, w.providerName)}
	good := []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.80.0.0/16"}}
	answer := func(podCIDRs []string, views []offloadv1alpha1.CIDRMapping) {
		t.Helper()
		// The consumer writes the NetworkPeering meanwhile, as against a
		// real provider: a conflict is retried.
		updateStatus(t, w.admin, np, func() {
			np.Status.PublicKey, np.Status.Endpoint, np.Status.PodCIDRs, np.Status.ConsumerViews = key.PublicKey().String(), "203.0.113.9:4500", podCIDRs, views
			meta.SetStatusCondition(&np.Status.Conditions, metav1.Condition{Type: offloadv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Served", Message: "served"})
		})
	}
	networkReady := func(reason string) *metav1.Condition {
		t.Helper()
		var c *metav1.Condition
		framework.Eventually(t, 30*time.Second, "NetworkReady "+reason+" on the consumer", func(ctx context.Context) bool {
			var fc offloadv1alpha1.ForeignCluster
			if w.admin.Get(ctx, client.ObjectKeyFromObject(w.fc), &fc) != nil {
				return false
			}
			c = meta.FindStatusCondition(fc.Status.Conditions, offloadv1alpha1.ConditionNetworkReady)
			return c != nil && c.Reason == reason
		})
		return c
	}
	mappings := func() []offloadv1alpha1.CIDRMapping {
		var tn offloadv1alpha1.Tunnel
		must(t, w.admin.Get(ctx, clientTunnel, &tn))
		return tn.Spec.Mappings
	}
	// told waits until the consumer told the provider, on the
	// NetworkPeering, of its refusal (starting with prefix), or that it
	// refuses nothing (prefix empty).
	told := func(what, prefix string) {
		t.Helper()
		framework.Eventually(t, 30*time.Second, what+": the provider is told", func(ctx context.Context) bool {
			if w.admin.Get(ctx, client.ObjectKeyFromObject(np), np) != nil {
				return false
			}
			v, ok := np.Annotations[AnnotationRefusedAnnouncement]
			if prefix == "" {
				return !ok
			}
			return strings.HasPrefix(v, prefix)
		})
	}

	for _, tc := range []struct {
		name     string
		podCIDRs []string
		views    []offloadv1alpha1.CIDRMapping
	}{
		{"cloud metadata as a pod CIDR", []string{"169.254.169.254/32"}, good},
		{"half the internet as a pod CIDR", []string{"128.0.0.0/1"}, good},
		{"a view of the consumer's service CIDR", []string{"10.42.0.0/16"}, []offloadv1alpha1.CIDRMapping{{Real: "10.96.0.0/16", View: "10.80.0.0/16"}}},
	} {
		answer(tc.podCIDRs, tc.views)
		if c := networkReady(ReasonRefusedPodCIDRs); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "nothing was routed") {
			t.Errorf("%s: NetworkReady %+v", tc.name, c)
		}
		told(tc.name, ReasonRefusedPodCIDRs+": ")
		if m := mappings(); len(m) != 0 {
			t.Errorf("%s: the consumer's Tunnel maps %v", tc.name, m)
		}
	}

	answer([]string{"10.42.0.0/16"}, good)
	framework.Eventually(t, 30*time.Second, "the consumer maps the provider's pod CIDR", func(context.Context) bool {
		m := mappings()
		return len(m) == 1 && m[0].Real == "10.42.0.0/16"
	})
	told("an accepted announcement", "")
	agreed := mappings()
	answer([]string{"10.43.0.0/16"}, good)
	if c := networkReady(ReasonPodCIDRsChanged); !strings.Contains(c.Message, AnnotationApprovedPodCIDRs+"=10.43.0.0/16") {
		t.Errorf("NetworkReady %+v does not say how to approve", c)
	}
	if m := mappings(); !slices.Equal(m, agreed) {
		t.Errorf("an unapproved change moved the consumer's mappings from %v to %v", agreed, m)
	}
}
