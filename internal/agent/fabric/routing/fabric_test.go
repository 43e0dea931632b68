package routing

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/nftexpr"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
)

func gatewayPod(tunnel, node, ip string, age time.Duration) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{offloadv1alpha1.LabelTunnel: tunnel}, CreationTimestamp: metav1.NewTime(time.Now().Add(-age))},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
}

func TestEachViewGoesToItsGatewayPodOrThroughItsNode(t *testing.T) {
	tunnels := []offloadv1alpha1.Tunnel{
		{ObjectMeta: metav1.ObjectMeta{Name: "out-a"}, Spec: offloadv1alpha1.TunnelSpec{LocalPodCIDRs: []string{"10.244.0.0/16"},
			Mappings: []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.64.0.0/16"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "out-b"}, Spec: offloadv1alpha1.TunnelSpec{LocalPodCIDRs: []string{"10.244.0.0/16"},
			Mappings: []offloadv1alpha1.CIDRMapping{{Real: "10.42.0.0/16", View: "10.42.0.0/16"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "out-c"}, Spec: offloadv1alpha1.TunnelSpec{LocalPodCIDRs: []string{"10.244.0.0/16"},
			Mappings: []offloadv1alpha1.CIDRMapping{{Real: "10.1.0.0/16", View: "10.65.0.0/16"}}}},
	}
	old := gatewayPod("out-a", "n2", "10.244.2.3", time.Hour)
	old.Status.PodIP = "10.244.2.2"
	pods := []corev1.Pod{
		gatewayPod("out-a", "n1", "10.244.1.5", time.Minute), old, // a restart: the newest wins
		gatewayPod("out-b", "n2", "10.244.2.9", time.Minute),
		// out-c's gateway is not running yet: no route.
		{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{offloadv1alpha1.LabelTunnel: "out-c"}}, Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodPending}},
	}
	ips := map[string]netip.Addr{"n1": netip.MustParseAddr("10.99.1.1"), "n2": netip.MustParseAddr("10.99.2.1")}
	for node, want := range map[string][]Route{
		"n1": {{netip.MustParsePrefix("10.42.0.0/16"), netip.MustParseAddr("10.99.2.1")}, {netip.MustParsePrefix("10.64.0.0/16"), netip.MustParseAddr("10.244.1.5")}},
		"n2": {{netip.MustParsePrefix("10.42.0.0/16"), netip.MustParseAddr("10.244.2.9")}, {netip.MustParsePrefix("10.64.0.0/16"), netip.MustParseAddr("10.99.1.1")}},
	} {
		p := PlanFor(node, tunnels, pods, ips)
		if !slices.Equal(p.Routes, want) || !slices.Equal(p.LocalPodCIDRs, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}) {
			t.Errorf("node %s: %+v, want routes %+v", node, p, want)
		}
	}
}

func TestAServerTunnelsMirroredViewsGoToItsGatewayAndAClientsPeerViewsNowhere(t *testing.T) {
	views := []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.65.0.0/16"}}
	tunnels := []offloadv1alpha1.Tunnel{
		{ObjectMeta: metav1.ObjectMeta{Name: "in-a"}, Spec: offloadv1alpha1.TunnelSpec{Role: offloadv1alpha1.TunnelServer, LocalPodCIDRs: []string{"10.244.0.0/16"},
			Mappings: []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.64.0.0/16"}}, PeerViews: views}},
		// A client's peer views are the provider's addresses: not routed here.
		{ObjectMeta: metav1.ObjectMeta{Name: "out-b"}, Spec: offloadv1alpha1.TunnelSpec{Role: offloadv1alpha1.TunnelClient, LocalPodCIDRs: []string{"10.244.0.0/16"},
			Mappings: []offloadv1alpha1.CIDRMapping{{Real: "10.42.0.0/16", View: "10.66.0.0/16"}}, PeerViews: []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.67.0.0/16"}}}},
	}
	pods := []corev1.Pod{gatewayPod("in-a", "n1", "10.244.1.5", time.Minute), gatewayPod("out-b", "n1", "10.244.1.6", time.Minute)}
	want := []Route{
		{netip.MustParsePrefix("10.64.0.0/16"), netip.MustParseAddr("10.244.1.5")},
		{netip.MustParsePrefix("10.65.0.0/16"), netip.MustParseAddr("10.244.1.5")},
		{netip.MustParsePrefix("10.66.0.0/16"), netip.MustParseAddr("10.244.1.6")},
	}
	if p := PlanFor("n1", tunnels, pods, nil); !slices.Equal(p.Routes, want) {
		t.Errorf("routes %+v, want %+v", p.Routes, want)
	}
}

// A node with a pod and a CNI that masquerades pods' traffic leaving the
// node's pod range, as the bridge plugin, kindnet and flannel do, and a
// "gateway" behind a veth that answers on a view address.
func TestTheFabricRoutesViewsKeepsPodSourcesAndLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	l := netlab.NewNetLab(t, "fab")
	node := l.Node("node")
	pod := l.Pod(node, "pod", "10.244.1.5", 1500)
	gw := l.Pod(node, "gw", "10.244.1.9", 1500)
	outside := l.Pod(node, "ext", "192.168.50.2", 1500)
	l.Sh("ip", "-n", gw, "addr", "add", "10.64.1.6/32", "dev", "lo") // the view's pod, as the gateway delivers it
	l.Serve(gw, "remote")
	l.NFT(node, func(c *nftables.Conn, tb *nftables.Table) {
		post := netlab.NATChain(c, tb, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
		c.AddRule(&nftables.Rule{Table: tb, Chain: post, Exprs: nftexpr.Rule(
			nftexpr.MatchPrefix(nftexpr.Source, netip.MustParsePrefix("10.244.1.0/24")), nftexpr.Masquerade())})
	})
	p := Plan{
		Routes:        []Route{{View: netip.MustParsePrefix("10.64.0.0/16"), Via: netip.MustParseAddr("10.244.1.9")}},
		LocalPodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
	}

	if out, err := netlab.Call(pod, "10.64.1.6:8080", 0); err == nil {
		t.Fatalf("without the fabric a pod reached the view: %q", out)
	}
	// Routes only (no rules): the CNI's masquerade hides the pod.
	if err := netlab.InNetNS(node, func() error { return Apply(Plan{Routes: p.Routes}) }); err != nil {
		t.Fatal(err)
	}
	if out, err := netlab.Call(pod, "10.64.1.6:8080", 0); err != nil || out != "remote 169.254.1.1" {
		t.Fatalf("routes without the rule: %q, %v; want the masqueraded node address", out, err)
	}
	// With the fabric's rule the gateway sees the pod.
	if err := netlab.InNetNS(node, func() error { return errors.Join(Apply(p), Apply(p)) }); err != nil {
		t.Fatal(err)
	}
	if out, err := netlab.Call(pod, "10.64.1.6:8080", 0); err != nil || out != "remote 10.244.1.5" {
		t.Errorf("with the fabric: %q, %v; want the pod's own address 10.244.1.5", out, err)
	}
	// The views are in the fabric's own table: traffic the node forwards
	// (a NodePort client's, here a host outside the pod CIDRs behind the
	// node) reaches them; the node's own traffic never does, and its main
	// table holds no route of the fabric.
	if out, err := netlab.Call(outside, "10.64.1.6:8080", 0); err != nil || out != "remote 192.168.50.2" {
		t.Errorf("forwarded from outside the pod CIDRs: %q, %v; want the caller's own address 192.168.50.2", out, err)
	}
	if out, err := netlab.Call(node, "10.64.1.6:8080", 0); err == nil {
		t.Errorf("the node's own connection reached a view: %q", out)
	}
	if main, err := exec.Command("ip", "-n", node, "route", "show", "table", "main", "proto", "0x6f").CombinedOutput(); err != nil || len(main) != 0 {
		t.Errorf("the main table holds fabric routes: %q, %v", main, err)
	}
	// With strict reverse-path filtering, answers to pods still pass: the
	// source rule gives the reverse-path lookup the fabric's table.
	l.Sysctl(node, "net.ipv4.conf.all.rp_filter", "1")
	if out, err := netlab.Call(pod, "10.64.1.6:8080", 0); err != nil || out != "remote 10.244.1.5" {
		t.Errorf("with strict rp_filter: %q, %v; want the pod's own address 10.244.1.5", out, err)
	}
	// A view that went is routed no more; removal leaves nothing.
	if err := netlab.InNetNS(node, func() error {
		if err := Apply(Plan{LocalPodCIDRs: p.LocalPodCIDRs}); err != nil {
			return err
		}
		if have, err := Routes(); err != nil || len(have) != 0 {
			t.Errorf("routes left after their view went: %v %v", have, err)
		}
		if rules, err := policyRules(); err != nil || len(rules) != 0 {
			t.Errorf("rules left after the last view went: %v %v", rules, err)
		}
		if tables, _ := (&nftables.Conn{}).ListTables(); slices.ContainsFunc(tables, func(tb *nftables.Table) bool { return tb.Name == tableName }) {
			t.Errorf("table %s left after the last view went", tableName)
		}
		if err := Apply(p); err != nil {
			return err
		}
		if err := Remove(); err != nil {
			return err
		}
		if have, err := Routes(); err != nil || len(have) != 0 {
			t.Errorf("routes left after Remove: %v %v", have, err)
		}
		if rules, err := policyRules(); err != nil || len(rules) != 0 {
			t.Errorf("rules left after Remove: %v %v", rules, err)
		}
		tables, err := (&nftables.Conn{}).ListTables()
		for _, tb := range tables {
			if tb.Name == tableName {
				t.Errorf("table %s left after Remove", tableName)
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
