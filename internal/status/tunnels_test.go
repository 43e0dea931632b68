package status

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/status/statustest"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// The cluster IDs of the tunnel tests' peers.
const (
	idTunnelUp       = "a1111111-1111-4111-8111-111111111111"
	idTunnelExchange = "a2222222-2222-4222-8222-222222222222"
	idTunnelGateway  = "a3333333-3333-4333-8333-333333333333"
	idTunnelSilent   = "a4444444-4444-4444-8444-444444444444"
	idTunnelConsumer = "a5555555-5555-4555-8555-555555555555"
	idTunnelDeaf     = "a6666666-6666-4666-8666-666666666666"
)

// testTunnel is one end of a tunnel as the agent and its gateway would
// have recorded it.
type testTunnel struct {
	fc *offloadv1alpha1.ForeignCluster
	t  *offloadv1alpha1.Tunnel
	// available is the number of available gateway pods; nil means no Deployment.
	available *int32
	// served is the Ready condition of the consumer's NetworkPeering, on a server end.
	served *metav1.Condition
}

var testMappings = []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.64.0.0/16"}}

func clientTunnel(peer, id string, st offloadv1alpha1.TunnelStatus, exchanged bool) *offloadv1alpha1.Tunnel {
	t := &offloadv1alpha1.Tunnel{
		ObjectMeta: metav1.ObjectMeta{Namespace: statustest.Namespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, peer)},
		Spec: offloadv1alpha1.TunnelSpec{ClusterID: id, ClusterName: peer, Role: offloadv1alpha1.TunnelClient,
			LocalPodCIDRs: []string{"10.244.0.0/16"}},
		Status: st,
	}
	if exchanged {
		t.Spec.PeerPublicKey = "p6bUfS8JqfPH1tq3dPVz4b1mRdiYGbJ1k2tZqT7bJ1o="
		t.Spec.Endpoint = "172.18.0.3:31820"
		t.Spec.MTU = 1340
		t.Spec.Mappings = testMappings
		t.Spec.PeerViews = []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.80.0.0/16"}}
	}
	return t
}

func ready(status metav1.ConditionStatus, reason, message string) []metav1.Condition {
	return []metav1.Condition{condition(offloadv1alpha1.ConditionReady, status, reason, message)}
}

// tunnelWorld is a cluster with a tunnel end broken at every hop.
func tunnelWorld() []testTunnel {
	consumer := func(network offloadv1alpha1.PeeringPhase, cond metav1.Condition) offloadv1alpha1.ForeignClusterStatus {
		st := consumerOf(at(23 * time.Hour))
		st.Network = network
		st.Conditions = append(st.Conditions, cond)
		return st
	}
	up := offloadv1alpha1.TunnelStatus{Implementation: "userspace", Endpoint: "172.18.0.3:31820", LastHandshake: at(-40 * time.Second),
		RxBytes: 1536, TxBytes: 3 << 20, Connected: true, PathMTU: 1420, MTU: 1340,
		Conditions: ready(metav1.ConditionTrue, "Connected", "the peer answers through the tunnel")}
	silent := offloadv1alpha1.TunnelStatus{Implementation: "userspace", PathMTU: 1420, MTU: 1340,
		Conditions: ready(metav1.ConditionFalse, "Disconnected", "the peer does not answer the liveness probe through the tunnel")}
	// The session renews, but nothing answers inside it.
	deaf := *silent.DeepCopy()
	deaf.LastHandshake = at(-10 * time.Second)
	server := &offloadv1alpha1.Tunnel{
		ObjectMeta: metav1.ObjectMeta{Namespace: statustest.Namespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelServer, "consumer-t5")},
		Spec: offloadv1alpha1.TunnelSpec{ClusterID: idTunnelConsumer, ClusterName: "consumer-t5", Role: offloadv1alpha1.TunnelServer,
			PeerPublicKey: "p6bUfS8JqfPH1tq3dPVz4b1mRdiYGbJ1k2tZqT7bJ1o=", LocalPodCIDRs: []string{"10.244.0.0/16"}, Mappings: testMappings},
		Status: offloadv1alpha1.TunnelStatus{Implementation: "kernel", Conditions: ready(metav1.ConditionFalse, "Disconnected", "the peer does not answer")},
	}
	noEndpoint := condition(offloadv1alpha1.ConditionReady, metav1.ConditionFalse, "NoEndpoint",
		"service offload-gateway-in-consumer-t5 has no LoadBalancer address yet: set network.gateway.address")
	return []testTunnel{
		{
			fc: statustest.ForeignCluster("provider-t1", idTunnelUp, true, consumer(offloadv1alpha1.PhaseEstablished,
				condition(offloadv1alpha1.ConditionNetworkReady, metav1.ConditionTrue, "Connected", "tunnel up"))),
			t: clientTunnel("provider-t1", idTunnelUp, up, true), available: ptr.To[int32](1),
		},
		{
			fc: statustest.ForeignCluster("provider-t2", idTunnelExchange, true, consumer(offloadv1alpha1.PhaseFailed,
				condition(offloadv1alpha1.ConditionNetworkReady, metav1.ConditionFalse, "NoFreeView",
					"no free /16 in the remap pools 10.64.0.0/12 for the provider's pods 10.244.0.0/16: add a pool with kubectl offload upgrade --set 'network.remapPools={...}'"))),
			t: clientTunnel("provider-t2", idTunnelExchange, offloadv1alpha1.TunnelStatus{}, false), available: ptr.To[int32](1),
		},
		{
			fc: statustest.ForeignCluster("provider-t3", idTunnelGateway, true, consumer(offloadv1alpha1.PhasePending,
				condition(offloadv1alpha1.ConditionNetworkReady, metav1.ConditionFalse, "GatewayStarting", "waiting for gateway offload-gateway-out-provider-t3 to report"))),
			t: clientTunnel("provider-t3", idTunnelGateway, offloadv1alpha1.TunnelStatus{}, true), available: ptr.To[int32](0),
		},
		{
			fc: statustest.ForeignCluster("provider-t4", idTunnelSilent, true, consumer(offloadv1alpha1.PhaseDisconnected,
				condition(offloadv1alpha1.ConditionNetworkReady, metav1.ConditionFalse, "Disconnected", "the provider's gateway does not answer"))),
			t: clientTunnel("provider-t4", idTunnelSilent, silent, true), available: ptr.To[int32](1),
		},
		{
			fc: statustest.ForeignCluster("provider-t6", idTunnelDeaf, true, consumer(offloadv1alpha1.PhaseDisconnected,
				condition(offloadv1alpha1.ConditionNetworkReady, metav1.ConditionFalse, "Disconnected", "the provider's gateway does not answer"))),
			t: clientTunnel("provider-t6", idTunnelDeaf, deaf, true), available: ptr.To[int32](1),
		},
		{
			fc: statustest.ForeignCluster("consumer-t5", idTunnelConsumer, false, offloadv1alpha1.ForeignClusterStatus{Role: offloadv1alpha1.RoleProvider}),
			t:  server, available: ptr.To[int32](1), served: &noEndpoint,
		},
	}
}

// createTunnel stores tt, and removes it when the test ends.
func (a apiServer) createTunnel(t *testing.T, tt testTunnel) {
	t.Helper()
	ctx := context.Background()
	a.Create(t, statustest.Peer{FC: tt.fc})
	tun := tt.t.DeepCopy()
	statustest.Create(t, a.Client, tun)
	tun.Status = tt.t.Status
	if err := a.Client.Status().Update(ctx, tun); err != nil {
		t.Fatalf("setting the status of Tunnel %s: %v", tun.Name, err)
	}
	if tt.available != nil {
		name := offloadv1alpha1.GatewayName(tun.Name)
		labels := map[string]string{offloadv1alpha1.LabelTunnel: tun.Name}
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: statustest.Namespace, Name: name},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "gateway", Image: "offload-agent"}}},
			}},
		}
		statustest.Create(t, a.Client, dep)
		dep.Status = appsv1.DeploymentStatus{Replicas: 1, AvailableReplicas: *tt.available, ReadyReplicas: *tt.available}
		if err := a.Client.Status().Update(ctx, dep); err != nil {
			t.Fatal(err)
		}
	}
	if tt.served != nil {
		ns := offloadv1alpha1.TenantNamespace(tt.t.Spec.ClusterName)
		statustest.Create(t, a.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		np := &offloadv1alpha1.NetworkPeering{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: offloadv1alpha1.NetworkPeeringName},
			Spec: offloadv1alpha1.NetworkPeeringSpec{ClusterID: tt.t.Spec.ClusterID, PublicKey: tt.t.Spec.PeerPublicKey,
				PodCIDRs: []string{"10.244.0.0/16"}},
		}
		statustest.Create(t, a.Client, np)
		np.Status.Conditions = []metav1.Condition{*tt.served}
		if err := a.Client.Status().Update(ctx, np); err != nil {
			t.Fatal(err)
		}
	}
}

// createFabric stores the fabric DaemonSet with available of desired pods.
func (a apiServer) createFabric(t *testing.T, available, desired int32) {
	t.Helper()
	labels := map[string]string{offloadv1alpha1.LabelComponent: "fabric"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: statustest.Namespace, Name: offloadv1alpha1.Fabric},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "fabric", Image: "offload-agent"}}},
		}},
	}
	statustest.Create(t, a.Client, ds)
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, CurrentNumberScheduled: desired, NumberReady: available, NumberAvailable: available}
	if err := a.Client.Status().Update(context.Background(), ds); err != nil {
		t.Fatal(err)
	}
}

// runTunnels runs `status` with the tunnels checker alone, or `status peer`
// when args start with peer.
func runTunnels(t *testing.T, a apiServer, clock func() time.Time, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	o := NewOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	o.Checkers = []Checker{tunnelsChecker{}}
	o.now = clock
	err := statustest.Execute(newCmdStatus(a.Factory(), o), &out, &errOut, args...)
	if errOut.Len() > 0 {
		t.Errorf("stderr = %q, want nothing", errOut.String())
	}
	return out.String(), err
}

func TestStatusTunnels(t *testing.T) {
	a := newAPIServer(t)
	for _, tt := range tunnelWorld() {
		a.createTunnel(t, tt)
	}

	t.Run("without the fabric DaemonSet every pod is cut off from the peers", func(t *testing.T) {
		out, err := runTunnels(t, a, testClock, "-o", "json")
		statustest.AssertResult(t, err, "6 checks failed: tunnels")
		var r Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if c := findCheck(r.Sections[0], "fabric"); c == nil || c.Status != StatusFailed || !strings.Contains(c.Message, "daemonset offload-fabric not found") {
			t.Errorf("fabric check = %+v", c)
		}
	})

	a.createFabric(t, 1, 2)
	t.Run("the table shows every tunnel and names each broken hop", func(t *testing.T) {
		out, err := runTunnels(t, a, testClock)
		statustest.AssertResult(t, err, "6 checks failed: tunnels")
		framework.Golden(t, "tunnels.txt", out)
	})

	t.Run("the JSON has each tunnel's facts and failing hop", func(t *testing.T) {
		out, err := runTunnels(t, a, testClock, "-o", "json")
		statustest.AssertResult(t, err, "6 checks failed: tunnels")
		var r Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("-o json is not JSON: %v\n%s", err, out)
		}
		s := r.Sections[0]
		if s.Name != "tunnels" || len(s.Tunnels) != 6 {
			t.Fatalf("section %s with %d tunnels, want tunnels with 6", s.Name, len(s.Tunnels))
		}
		hops := map[string]string{}
		for _, tn := range s.Tunnels {
			hops[tn.Name] = tn.Hop
		}
		want := map[string]string{"out-provider-t1": "", "out-provider-t2": HopExchange, "out-provider-t3": HopGateway,
			"out-provider-t4": HopTunnel, "in-consumer-t5": HopExchange, "out-provider-t6": HopTunnel}
		for name, hop := range want {
			if hops[name] != hop {
				t.Errorf("hop of %s = %q, want %q", name, hops[name], hop)
			}
		}
		up := s.Tunnels[slicesIndex(s.Tunnels, "out-provider-t1")]
		if up.Peer != "provider-t1" || up.Endpoint != "172.18.0.3:31820" || up.Implementation != "userspace" || up.MTU != 1340 ||
			up.RxBytes != 1536 || up.TxBytes != 3<<20 || !up.Connected || !up.GatewayAvailable ||
			len(up.PeerPods) != 1 || up.PeerPods[0].View != "10.64.0.0/16" || len(up.LocalPods) != 1 || up.LocalPods[0].View != "10.80.0.0/16" {
			t.Errorf("tunnel out-provider-t1 = %+v", up)
		}
		if c := findCheck(s, "tunnel/out-provider-t1"); c == nil || c.Status != StatusOK {
			t.Errorf("check of the tunnel that is up = %+v, want ok", c)
		}
	})

	t.Run("a tunnel still coming up is a warning, not a failure", func(t *testing.T) {
		// By the real clock the tunnels were just created.
		out, err := runTunnels(t, a, time.Now, "-o", "json")
		statustest.AssertResult(t, err, "5 checks failed: tunnels")
		var r Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if c := findCheck(r.Sections[0], "tunnel/out-provider-t3"); c == nil || c.Status != StatusWarning {
			t.Errorf("check of a gateway still starting = %+v, want a warning", c)
		}
	})

	t.Run("status peer shows the peer's tunnel and the hop that fails", func(t *testing.T) {
		out, err := runTunnels(t, a, testClock, "peer", "provider-t4")
		statustest.AssertResult(t, err, "3 checks failed: peer provider-t4")
		framework.Golden(t, "peer-tunnel-down.txt", out)
	})

	t.Run("a tunnel that went down seconds ago is a warning while the gateways reconnect", func(t *testing.T) {
		// The tunnel's Ready went False at testNow-1h; look 5 s later, then 30 s later.
		for _, tc := range []struct {
			after time.Duration
			want  Status
		}{{5 * time.Second, StatusWarning}, {30 * time.Second, StatusFailed}} {
			clock := func() time.Time { return testNow.Add(-time.Hour + tc.after) }
			out, _ := runTunnels(t, a, clock, "peer", "provider-t4", "-o", "json")
			var r Report
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatal(err)
			}
			c := findCheck(r.Sections[0], "tunnel/out-provider-t4")
			if c == nil || c.Status != tc.want {
				t.Errorf("%s after the tunnel went down: check = %+v, want %s", tc.after, c, tc.want)
			}
			if tc.want == StatusWarning && (c == nil || !strings.Contains(c.Message, "went down 5s ago") || !strings.Contains(c.Message, "reconnect")) {
				t.Errorf("message = %+v, want the time it went down and that the gateways reconnect", c)
			}
		}
	})

	t.Run("status peer of a healthy tunnel passes, but the fabric missing on a node fails it", func(t *testing.T) {
		out, err := runTunnels(t, a, testClock, "peer", "provider-t1", "-o", "json")
		statustest.AssertResult(t, err, "1 check failed: peer provider-t1")
		var r Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		s := r.Sections[0]
		if len(s.Tunnels) != 1 || s.Tunnels[0].Name != "out-provider-t1" {
			t.Fatalf("tunnels = %+v, want out-provider-t1", s.Tunnels)
		}
		f := fieldValues(s)
		if f["tunnel/out-provider-t1/endpoint"] != "172.18.0.3:31820" || f["tunnel/out-provider-t1/peerPods"] != "10.244.0.0/16 as 10.64.0.0/16" ||
			f["tunnel/out-provider-t1/traffic"] != "1.5Ki in, 3.0Mi out" {
			t.Errorf("fields = %v", f)
		}
		for name, want := range map[string]Status{"condition/NetworkReady": StatusOK, "tunnel/out-provider-t1": StatusOK, "fabric": StatusFailed} {
			if c := findCheck(s, name); c == nil || c.Status != want {
				t.Errorf("check %s = %+v, want %s", name, c, want)
			}
		}
	})
}

func slicesIndex(tunnels []Tunnel, name string) int {
	for i, tn := range tunnels {
		if tn.Name == name {
			return i
		}
	}
	return 0
}

func TestByteText(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1023: "1023", 1024: "1.0Ki", 1536: "1.5Ki", 5 << 30: "5.0Gi"} {
		if got := byteText(n); got != want {
			t.Errorf("byteText(%d) = %q, want %q", n, got, want)
		}
	}
}
