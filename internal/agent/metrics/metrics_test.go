package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestReasonIsTheAPIStatusReasonOrWhyNoAnswerCame(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{apierrors.NewForbidden(pods, "p", errors.New("quota")), "Forbidden"},
		{fmt.Errorf("creating the remote pod: %w", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", nil)), "Invalid"},
		{apierrors.NewTooManyRequests("slow down", 1), "TooManyRequests"},
		{fmt.Errorf("dialing: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), "Unreachable"},
		{fmt.Errorf("reading: %w", context.DeadlineExceeded), "Unreachable"},
		{errors.New("the pod's DaemonSet keeps it off virtual nodes"), "Unknown"},
		// A provider's API server that makes up reasons does not make up
		// label values.
		{&apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: "Forbidden-" + metav1.StatusReason(rand.String(8))}}, "Unknown"},
	} {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

func TestReflectionCountsByOutcomeAndForgetsAnUnpeeredPeer(t *testing.T) {
	peer := "peer-" + rand.String(6)
	m := ForPeer(peer)
	m.Done(ToProvider, OperationCreate, nil)
	m.Done(ToProvider, OperationCreate, nil)
	m.Done(ToProvider, OperationCreate, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New("no")))
	m.Done(ToConsumer, OperationStatus, nil)
	m.Created(120 * time.Millisecond)
	m.StatusWritten(30 * time.Millisecond)
	if got := testutil.ToFloat64(reflections.WithLabelValues(peer, ToProvider, OperationCreate)); got != 2 {
		t.Errorf("creates counted %v, want 2: a failure is no reflection", got)
	}
	if got := testutil.ToFloat64(reflectionErrors.WithLabelValues(peer, ToProvider, "Forbidden")); got != 1 {
		t.Errorf("Forbidden errors counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(reflections.WithLabelValues(peer, ToConsumer, OperationStatus)); got != 1 {
		t.Errorf("statuses counted %v, want 1", got)
	}
	if n := testutil.CollectAndCount(createPropagation, "offload_pod_create_propagation_seconds"); n == 0 {
		t.Error("no create propagation series")
	}
	m.Forget()
	for _, c := range []prometheus.Collector{reflections, reflectionErrors, createPropagation, statusPropagation} {
		ch := make(chan prometheus.Metric, 100)
		c.Collect(ch)
		close(ch)
		for metric := range ch {
			if labelled(metric, peer) {
				t.Errorf("a series of unpeered %s is left: %s", peer, metric.Desc())
			}
		}
	}
}

// labelled says whether one of m's labels has value.
func labelled(m prometheus.Metric, value string) bool {
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		return false
	}
	for _, l := range pb.GetLabel() {
		if l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestTheCollectorReadsPeersAndTunnelsFromTheAPI reads ForeignClusters and
// Tunnels from a real API server, and the virtual nodes' stats from Peers.
func TestTheCollectorReadsPeersAndTunnelsFromTheAPI(t *testing.T) {
	ctx := context.Background()
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	ns := envtest.NewNamespace(t, c, "metrics")
	expiry, seen, handshake := time.Unix(1_900_000_000, 0), time.Unix(1_800_000_000, 0), time.Unix(1_800_000_100, 0)

	name := "prov-" + rand.String(6)
	fc := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: string(uuid.NewUUID()), ClusterName: name, OutgoingPeering: offloadv1alpha1.OutgoingPeering{Enabled: true}}}
	incomingOnly := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "cons-" + rand.String(6)},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: string(uuid.NewUUID()), ClusterName: "consumer"}}
	for _, o := range []*offloadv1alpha1.ForeignCluster{fc, incomingOnly} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), o) })
	}
	fc.Status = offloadv1alpha1.ForeignClusterStatus{
		Conditions:       []metav1.Condition{{Type: offloadv1alpha1.ConditionVirtualNodeReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}},
		CredentialExpiry: &metav1.Time{Time: expiry}, LastSeen: &metav1.Time{Time: seen},
	}
	if err := c.Status().Update(ctx, fc); err != nil {
		t.Fatal(err)
	}
	tunnel := &offloadv1alpha1.Tunnel{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, name), Namespace: ns},
		Spec: offloadv1alpha1.TunnelSpec{ClusterID: fc.Spec.ClusterID, ClusterName: name, Role: offloadv1alpha1.TunnelClient, LocalPodCIDRs: []string{"10.244.0.0/16"}}}
	if err := c.Create(ctx, tunnel); err != nil {
		t.Fatal(err)
	}
	tunnel.Status = offloadv1alpha1.TunnelStatus{Connected: true, LastHandshake: &metav1.Time{Time: handshake},
		RxBytes: 1000, TxBytes: 2000, RxPackets: 10, TxPackets: 20, FilteredPackets: 3}
	if err := c.Status().Update(ctx, tunnel); err != nil {
		t.Fatal(err)
	}

	collector := &Collector{Reader: c, Namespace: ns, Peers: func() []PeerStats {
		return []PeerStats{
			{Peer: name, Offered: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3500m"), corev1.ResourceMemory: resource.MustParse("2Gi"), corev1.ResourcePods: resource.MustParse("110")},
				Reflecting: true, Requested: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourcePods: resource.MustParse("2")},
				Reflected: 2},
			// A peer whose offer was not read yet and whose pods are not
			// reflected yet has no capacity series.
			{Peer: "starting"},
		}
	}}
	want := fmt.Sprintf(`
# HELP offload_peer_virtual_node_ready 1 when the peer's virtual node is Ready (the ForeignCluster's VirtualNodeReady condition), else 0.
# TYPE offload_peer_virtual_node_ready gauge
offload_peer_virtual_node_ready{peer="%[1]s"} 1
# HELP offload_peer_credential_expiry_timestamp_seconds When the credentials this cluster holds for the peer expire, as a Unix time; the agent rotates them before.
# TYPE offload_peer_credential_expiry_timestamp_seconds gauge
offload_peer_credential_expiry_timestamp_seconds{peer="%[1]s"} 1.9e+09
# HELP offload_peer_last_seen_timestamp_seconds When the peer's API server last answered, as a Unix time (30 s resolution).
# TYPE offload_peer_last_seen_timestamp_seconds gauge
offload_peer_last_seen_timestamp_seconds{peer="%[1]s"} 1.8e+09
# HELP offload_peer_offered_cpu_cores CPU the provider lends to this cluster: its virtual node's allocatable.
# TYPE offload_peer_offered_cpu_cores gauge
offload_peer_offered_cpu_cores{peer="%[1]s"} 3.5
# HELP offload_peer_offered_memory_bytes Memory the provider lends to this cluster: its virtual node's allocatable.
# TYPE offload_peer_offered_memory_bytes gauge
offload_peer_offered_memory_bytes{peer="%[1]s"} 2.147483648e+09
# HELP offload_peer_offered_pods Pods the provider lets this cluster run: its virtual node's allocatable.
# TYPE offload_peer_offered_pods gauge
offload_peer_offered_pods{peer="%[1]s"} 110
# HELP offload_peer_requested_cpu_cores CPU the pods bound to the peer's virtual node request.
# TYPE offload_peer_requested_cpu_cores gauge
offload_peer_requested_cpu_cores{peer="%[1]s"} 0.25
# HELP offload_peer_requested_memory_bytes Memory the pods bound to the peer's virtual node request.
# TYPE offload_peer_requested_memory_bytes gauge
offload_peer_requested_memory_bytes{peer="%[1]s"} 6.7108864e+07
# HELP offload_peer_requested_pods Pods bound to the peer's virtual node that have not ended.
# TYPE offload_peer_requested_pods gauge
offload_peer_requested_pods{peer="%[1]s"} 2
# HELP offload_reflected_pods Remote pods the agent reflects for the peer.
# TYPE offload_reflected_pods gauge
offload_reflected_pods{peer="%[1]s"} 2
# HELP offload_tunnel_connected 1 when the peer answers the gateway's liveness probe through the tunnel, else 0.
# TYPE offload_tunnel_connected gauge
offload_tunnel_connected{peer="%[1]s",role="client"} 1
# HELP offload_tunnel_last_handshake_timestamp_seconds When the tunnel's last WireGuard handshake completed, as a Unix time; its age is time() minus it.
# TYPE offload_tunnel_last_handshake_timestamp_seconds gauge
offload_tunnel_last_handshake_timestamp_seconds{peer="%[1]s",role="client"} 1.8000001e+09
# HELP offload_tunnel_receive_bytes_total Bytes received from the peer through the tunnel, as its gateway last reported.
# TYPE offload_tunnel_receive_bytes_total counter
offload_tunnel_receive_bytes_total{peer="%[1]s",role="client"} 1000
# HELP offload_tunnel_transmit_bytes_total Bytes sent to the peer through the tunnel, as its gateway last reported.
# TYPE offload_tunnel_transmit_bytes_total counter
offload_tunnel_transmit_bytes_total{peer="%[1]s",role="client"} 2000
# HELP offload_tunnel_receive_packets_total Packets received from the peer through the tunnel, as its gateway last reported.
# TYPE offload_tunnel_receive_packets_total counter
offload_tunnel_receive_packets_total{peer="%[1]s",role="client"} 10
# HELP offload_tunnel_transmit_packets_total Packets sent to the peer through the tunnel, as its gateway last reported.
# TYPE offload_tunnel_transmit_packets_total counter
offload_tunnel_transmit_packets_total{peer="%[1]s",role="client"} 20
# HELP offload_tunnel_filtered_packets_total Packets the tenant filter dropped: traffic through the tunnel that the peering does not allow.
# TYPE offload_tunnel_filtered_packets_total counter
offload_tunnel_filtered_packets_total{peer="%[1]s",role="client"} 3
`, name)
	// Other tests' ForeignClusters may share the API server: compare this
	// one's series.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(onlyPeer{collector, name})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Errorf("the metrics break Prometheus' naming conventions: %v %v", problems, err)
	}
}

// onlyPeer is c with only the series of peer.
type onlyPeer struct {
	c    prometheus.Collector
	peer string
}

func (o onlyPeer) Describe(ch chan<- *prometheus.Desc) { o.c.Describe(ch) }

func (o onlyPeer) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() {
		o.c.Collect(all)
		close(all)
	}()
	for m := range all {
		if labelled(m, o.peer) {
			ch <- m
		}
	}
}

// TestTheDocsAndTheDashboardNameEveryMetricThereIs keeps docs/metrics.md
// and the Grafana dashboard true: each names every metric of this
// package, and none that is not.
func TestTheDocsAndTheDashboardNameEveryMetricThereIs(t *testing.T) {
	have := map[string]bool{}
	descs := make(chan *prometheus.Desc, 100)
	(&Collector{}).Describe(descs)
	for _, v := range []prometheus.Collector{reflections, reflectionErrors, createPropagation, statusPropagation} {
		v.Describe(descs)
	}
	close(descs)
	fqName := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range descs {
		have[fqName.FindStringSubmatch(d.String())[1]] = true
	}
	named := regexp.MustCompile(`\boffload_[a-z_]+`)
	for _, doc := range []string{"../../../docs/metrics.md", "../../../docs/grafana/kubectl-offload.json"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, name := range named.FindAllString(string(b), -1) {
			name = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
			seen[name] = true
			if !have[name] {
				t.Errorf("%s names %s, which the agent does not serve", doc, name)
			}
		}
		for name := range have {
			if !seen[name] {
				t.Errorf("%s does not name %s", doc, name)
			}
		}
	}
}
