package gateway

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/ssa"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
)

// The gateway's in-cluster link, against a real API server, with the RBAC
// the chart gives a gateway: its own Tunnel, by name, and nothing else.
func TestTheGatewayReadsAndReportsOnlyItsOwnTunnel(t *testing.T) {
	cfg, admin, ns := tunnelEnv(t)
	ctx := t.Context()

	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{offloadv1alpha1.GroupVersion.Group}, Resources: []string{"tunnels"}, ResourceNames: []string{"provider"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{offloadv1alpha1.GroupVersion.Group}, Resources: []string{"tunnels/status"}, ResourceNames: []string{"provider"}, Verbs: []string{"get", "patch"}},
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "gateway", Namespace: ns}, Rules: rules}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "gateway"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "offload-gateway", Namespace: ns}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	asGateway := rest.CopyConfig(cfg)
	asGateway.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":offload-gateway"}
	framework.WaitAuthorized(t, asGateway,
		authorizationv1.ResourceAttributes{Namespace: ns, Verb: "watch", Group: offloadv1alpha1.GroupVersion.Group, Resource: "tunnels", Name: "provider"},
		authorizationv1.ResourceAttributes{Namespace: ns, Verb: "patch", Group: offloadv1alpha1.GroupVersion.Group, Resource: "tunnels", Subresource: "status", Name: "provider"})

	// Another peer's Tunnel in the same namespace stays out of its reach.
	other := &offloadv1alpha1.Tunnel{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns},
		Spec: offloadv1alpha1.TunnelSpec{ClusterID: "x", ClusterName: "other", Role: offloadv1alpha1.TunnelClient, LocalPodCIDRs: []string{"10.244.0.0/16"}}}
	tunnel := &offloadv1alpha1.Tunnel{ObjectMeta: metav1.ObjectMeta{Name: "provider", Namespace: ns},
		Spec: offloadv1alpha1.TunnelSpec{ClusterID: "y", ClusterName: "provider", Role: offloadv1alpha1.TunnelClient, LocalPodCIDRs: []string{"10.244.0.0/16"}}}
	for _, o := range []client.Object{other, tunnel} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	base := Config{Interface: "offload0", PrivateKeyFile: "/key"}
	ic, err := NewInCluster(asGateway, ns, "provider", base)
	if err != nil {
		t.Fatal(err)
	}
	if err := ic.Start(ctx); err != nil {
		t.Fatalf("the gateway cannot watch its own Tunnel: %v", err)
	}
	if _, err := ic.Load(ctx); err == nil || !strings.Contains(err.Error(), "the peer's public key is not known yet") {
		t.Errorf("an incomplete Tunnel: %v", err)
	}
	if err := envtest.NewClient(t, asGateway).Get(ctx, client.ObjectKeyFromObject(other), &offloadv1alpha1.Tunnel{}); err == nil {
		t.Error("the gateway read another peer's Tunnel")
	}

	// The controller fills it in: the gateway sees the change.
	key := validConfig(t).PeerPublicKey
	tunnel.Spec.PeerPublicKey, tunnel.Spec.Endpoint, tunnel.Spec.MTU = key, "192.0.2.1:31820", 1380
	tunnel.Spec.Mappings = []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.70.0.0/16"}}
	if err := admin.Update(ctx, tunnel); err != nil {
		t.Fatal(err)
	}
	var got *Config
	framework.Eventually(t, 10*time.Second, "the gateway sees its completed Tunnel", func(ctx context.Context) bool {
		got, err = ic.Load(ctx)
		return err == nil
	})
	if got.Role != RoleClient || got.PeerEndpoint != "192.0.2.1:31820" || got.MTU != 1380 || got.Peer[0].View.String() != "10.70.0.0/16" || got.Interface != "offload0" {
		t.Errorf("configuration from the Tunnel: %+v", got)
	}

	// It reports, and its report becomes the Tunnel's status.
	st := Status{Implementation: ImplementationUserspace, Endpoint: "192.0.2.1:31820", MTU: 1380, PathMTU: 1420,
		LastHandshake: time.Now(), RxBytes: 2048, TxBytes: 1024, RxPackets: 20, TxPackets: 10, Filtered: 3, Connected: true}
	if err := ic.Report(ctx, st); err != nil {
		t.Fatalf("the gateway cannot write its status: %v", err)
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(tunnel), tunnel); err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(tunnel.Status.Conditions, offloadv1alpha1.ConditionReady)
	if tunnel.Status.Implementation != "userspace" || !tunnel.Status.Connected || tunnel.Status.RxBytes != 2048 ||
		tunnel.Status.PathMTU != 1420 || tunnel.Status.LastHandshake == nil || ready == nil || ready.Status != metav1.ConditionTrue {
		t.Errorf("Tunnel status: %+v", tunnel.Status)
	}
	// The CRD keeps the packet counters (the API server prunes fields its
	// schema lacks).
	if tunnel.Status.RxPackets != 20 || tunnel.Status.TxPackets != 10 || tunnel.Status.FilteredPackets != 3 {
		t.Errorf("Tunnel status packets: rx %d, tx %d, filtered %d; want 20, 10, 3",
			tunnel.Status.RxPackets, tunnel.Status.TxPackets, tunnel.Status.FilteredPackets)
	}
	// Counters that grew are no change: they wait for the refresh.
	written := tunnel.ResourceVersion
	more := st
	more.RxBytes, more.TxBytes, more.RxPackets, more.TxPackets, more.Filtered = 4096, 2048, 40, 20, 5
	if err := ic.Report(ctx, more); err != nil {
		t.Fatal(err)
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(tunnel), tunnel); err != nil {
		t.Fatal(err)
	}
	if tunnel.ResourceVersion != written || tunnel.Status.RxPackets != 20 {
		t.Errorf("the counters alone were written at once: resource version %s then %s, rx packets %d",
			written, tunnel.ResourceVersion, tunnel.Status.RxPackets)
	}
	// The network controller's report on the same status (phase and
	// NetworkReady, its own fields) outlives the gateway's reports.
	network := offloadv1alpha1.TunnelStatus{Phase: offloadv1alpha1.PhaseEstablished, Conditions: []metav1.Condition{{
		Type: offloadv1alpha1.ConditionNetworkReady, Status: metav1.ConditionTrue, Reason: "TunnelConnected", LastTransitionTime: metav1.Now()}}}
	if err := ssa.ApplyStatus(ctx, admin, tunnel, network, "offload-network"); err != nil {
		t.Fatal(err)
	}
	st.Connected = false
	if err := ic.Report(ctx, st); err != nil {
		t.Fatal(err)
	}
	_ = admin.Get(ctx, client.ObjectKeyFromObject(tunnel), tunnel)
	if ready := meta.FindStatusCondition(tunnel.Status.Conditions, offloadv1alpha1.ConditionReady); ready == nil || ready.Reason != "Disconnected" {
		t.Errorf("a lost tunnel is reported at once: %+v", tunnel.Status.Conditions)
	}
	if !meta.IsStatusConditionTrue(tunnel.Status.Conditions, offloadv1alpha1.ConditionNetworkReady) || tunnel.Status.Phase != offloadv1alpha1.PhaseEstablished {
		t.Errorf("the gateway's report removed the network controller's: %+v", tunnel.Status)
	}

	// A gateway that replaces it (an upgrade) reports before its own first
	// handshake: the tunnel's last handshake stays on record.
	handshake := tunnel.Status.LastHandshake
	next, err := NewInCluster(asGateway, ns, "provider", base)
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// As the gateway does, it loads its configuration before it reports.
	if _, err := next.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := next.Report(ctx, Status{Implementation: ImplementationUserspace, Endpoint: "192.0.2.1:31820", MTU: 1380}); err != nil {
		t.Fatal(err)
	}
	_ = admin.Get(ctx, client.ObjectKeyFromObject(tunnel), tunnel)
	if tunnel.Status.Connected || tunnel.Status.LastHandshake == nil || !tunnel.Status.LastHandshake.Equal(handshake) {
		t.Errorf("after a new gateway's first report, connected %t and last handshake %v; want false and %v, its predecessor's",
			tunnel.Status.Connected, tunnel.Status.LastHandshake, handshake)
	}
}

// TunnelStatus carries the gateway's counters into the Tunnel, and a status
// whose counters alone changed is not written before the refresh.
func TestTunnelStatusCarriesTheCountersThatAloneCauseNoWrite(t *testing.T) {
	st := Status{Implementation: ImplementationKernel, PublicKey: "key", Endpoint: "192.0.2.1:31820", MTU: 1380, PathMTU: 1420,
		LastHandshake: time.Now(), RxBytes: 2048, TxBytes: 1024, RxPackets: 20, TxPackets: 10, Filtered: 3, Connected: true}
	got := TunnelStatus(st, 1, offloadv1alpha1.TunnelStatus{})
	if got.RxBytes != 2048 || got.TxBytes != 1024 || got.RxPackets != 20 || got.TxPackets != 10 || got.FilteredPackets != 3 {
		t.Errorf("counters: rx %d bytes %d packets, tx %d bytes %d packets, filtered %d; want 2048 20, 1024 10, 3",
			got.RxBytes, got.RxPackets, got.TxBytes, got.TxPackets, got.FilteredPackets)
	}

	later := st
	later.RxBytes, later.TxBytes, later.RxPackets, later.TxPackets, later.Filtered = 4096, 2048, 40, 20, 5
	next := TunnelStatus(later, 1, got)
	if !sameExceptCounters(got, next) {
		t.Errorf("counters alone count as a change:\n%+v\n%+v", got, next)
	}
	for name, change := range map[string]func(*Status){
		"connected":      func(s *Status) { s.Connected = false },
		"endpoint":       func(s *Status) { s.Endpoint = "192.0.2.2:31820" },
		"implementation": func(s *Status) { s.Implementation = ImplementationUserspace },
		"path MTU":       func(s *Status) { s.PathMTU = 1400 },
	} {
		changed := later
		change(&changed)
		if sameExceptCounters(got, TunnelStatus(changed, 1, got)) {
			t.Errorf("a changed %s counts as no change", name)
		}
	}
}

// A gateway that starts while its API server is unreachable waits for it:
// it used to exit on discovery ("failed to get server groups"), which the
// lifecycle e2e test counted as a restart during an outage. Load waits a
// bounded time, so the gateway's loop keeps beating meanwhile.
func TestTheGatewayStartsWhileItsAPIServerIsUnreachable(t *testing.T) {
	cfg, admin, ns := tunnelEnv(t)
	ctx := t.Context()
	tunnel := &offloadv1alpha1.Tunnel{ObjectMeta: metav1.ObjectMeta{Name: "provider", Namespace: ns},
		Spec: offloadv1alpha1.TunnelSpec{ClusterID: "y", ClusterName: "provider", Role: offloadv1alpha1.TunnelClient, LocalPodCIDRs: []string{"10.244.0.0/16"}}}
	if err := admin.Create(ctx, tunnel); err != nil {
		t.Fatal(err)
	}
	apiServer, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { loadTimeout = d }(loadTimeout)
	loadTimeout = 2 * time.Second

	// Nothing listens on the port the gateway is given, yet.
	port, err := netlab.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(apiServer.Hostname(), strconv.Itoa(port))
	down := rest.CopyConfig(cfg)
	down.Host = "https://" + addr
	ic, err := NewInCluster(down, ns, "provider", Config{Interface: "offload0", PrivateKeyFile: "/key"})
	if err != nil {
		t.Fatalf("the gateway cannot start while its API server is unreachable: %v", err)
	}
	if err := ic.Start(ctx); err != nil {
		t.Fatalf("the gateway cannot start while its API server is unreachable: %v", err)
	}
	start := time.Now()
	if _, err := ic.Load(ctx); err == nil {
		t.Fatal("the gateway read its Tunnel from no API server")
	} else if waited := time.Since(start); waited > loadTimeout+5*time.Second {
		t.Errorf("Load waited %s for an unreachable API server, want at most about %s", waited, loadTimeout)
	}

	// The API server answers on that port: the gateway reads its Tunnel.
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go netlab.Forward(l, apiServer.Host)
	framework.Eventually(t, 30*time.Second, "the gateway reads its Tunnel once its API server answers", func(ctx context.Context) bool {
		_, err := ic.Load(ctx)
		return err != nil && strings.Contains(err.Error(), "the peer's public key is not known yet")
	})
}

// tunnelEnv returns the test API server with the CRDs, an admin client and
// a new namespace for a gateway's Tunnel.
func tunnelEnv(t *testing.T) (*rest.Config, client.Client, string) {
	t.Helper()
	cfg := envtest.APIServer(t)
	admin := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, admin)
	return cfg, admin, envtest.NewNamespace(t, admin, "gateway")
}
