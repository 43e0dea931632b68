package kubeletapi

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

var started = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

// oneWebPod is a node whose one pod uses nanoCores of CPU and 64 MiB.
func oneWebPod(nanoCores uint64, containerStart time.Time) NodeUsage {
	return NodeUsage{StartTime: started, Pods: []PodUsage{{
		Namespace: consumerNamespace, Name: consumerPod, UID: "uid-web", StartTime: started,
		Containers: []ContainerUsage{{Name: container, StartTime: containerStart, NanoCores: nanoCores, WorkingSetBytes: 64 << 20}},
	}}}
}

func TestTheMeterGivesCountersWhoseRateIsTheMeasuredUse(t *testing.T) {
	var m meter
	start := started.Add(time.Minute)
	now := start.Add(10 * time.Second)

	r := m.read("vn", oneWebPod(250_000_000, start), now)
	if got := r.secs[0][0]; math.Abs(got-2.5) > 1e-9 {
		t.Errorf("first counter = %v core-seconds, want 2.5: a quarter core for the 10 s since the container started", got)
	}
	first, node := r.secs[0][0], r.nodeSecs

	now = now.Add(15 * time.Second)
	r = m.read("vn", oneWebPod(500_000_000, start), now)
	if rate := (r.secs[0][0] - first) / 15; math.Abs(rate-0.5) > 1e-9 {
		t.Errorf("container rate between reads = %v cores, want the 0.5 last measured", rate)
	}
	if rate := (r.nodeSecs - node) / 15; math.Abs(rate-0.5) > 1e-9 {
		t.Errorf("node rate between reads = %v cores, want 0.5", rate)
	}

	// A read at the same instant adds nothing, and time never goes back.
	again := m.read("vn", oneWebPod(900_000_000, start), now.Add(-time.Second))
	if again.secs[0][0] != r.secs[0][0] || again.nodeSecs != r.nodeSecs || !again.at.Equal(now) {
		t.Errorf("a read back in time moved the counters: %v, %v at %v", again.secs[0][0], again.nodeSecs, again.at)
	}

	// A restarted container starts a new counter; the node's keeps growing.
	restart := now.Add(5 * time.Second)
	now = now.Add(20 * time.Second)
	r2 := m.read("vn", oneWebPod(100_000_000, restart), now)
	if got := r2.secs[0][0]; math.Abs(got-1.5) > 1e-9 {
		t.Errorf("counter of the restarted container = %v, want 1.5 (0.1 core for 15 s)", got)
	}
	if r2.nodeSecs < r.nodeSecs {
		t.Errorf("the node counter went down: %v after %v", r2.nodeSecs, r.nodeSecs)
	}
}

func TestAnIdleContainerAndAnEmptyNodeStillReadAboveZero(t *testing.T) {
	// metrics-server drops a container or node whose CPU or memory reads 0.
	var m meter
	r := m.read("vn", oneWebPod(0, started), started.Add(time.Hour))
	if r.secs[0][0] <= 0 || r.nodeSecs <= 0 {
		t.Errorf("idle counters: container %v, node %v; want above zero", r.secs[0][0], r.nodeSecs)
	}
	empty := m.read("empty", NodeUsage{StartTime: started}, started.Add(time.Hour))
	if empty.nodeSecs <= 0 || empty.workingSet() == 0 {
		t.Errorf("empty node: CPU %v, memory %d; want above zero", empty.nodeSecs, empty.workingSet())
	}
}

func TestResourceMetricsAreWhatMetricsServerParses(t *testing.T) {
	var m meter
	at := started.Add(time.Minute)
	u := oneWebPod(250_000_000, started)
	u.Pods = append(u.Pods, PodUsage{Namespace: "shop", Name: "db", UID: "uid-db", StartTime: started, Containers: []ContainerUsage{
		{Name: "db", StartTime: started, NanoCores: 10_000_000, WorkingSetBytes: 100 << 20},
		{Name: "sidecar", StartTime: started, NanoCores: 1_000_000, WorkingSetBytes: 10 << 20},
	}})
	text, families := encodeMetrics(t, resourceMetrics(m.read("vn", u, at)))
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		for _, m := range families[name].GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if fmt.Sprint(got) != fmt.Sprint(labels) {
				continue
			}
			if m.GetTimestampMs() != at.UnixMilli() {
				t.Errorf("%s%v stamped %d, want %d", name, labels, m.GetTimestampMs(), at.UnixMilli())
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
		t.Fatalf("no %s%v in\n%s", name, labels, text)
		return 0
	}
	web := map[string]string{"container": container, "namespace": "shop", "pod": consumerPod}
	if got := value("container_cpu_usage_seconds_total", web); math.Abs(got-15) > 1e-6 {
		t.Errorf("web's CPU counter = %v, want 15 (a quarter core for a minute)", got)
	}
	if got := value("container_memory_working_set_bytes", web); got != 64<<20 {
		t.Errorf("web's working set = %v", got)
	}
	if got := value("container_start_time_seconds", web); got != float64(started.Unix()) {
		t.Errorf("web's start time = %v, want %d", got, started.Unix())
	}
	if got := value("pod_memory_working_set_bytes", map[string]string{"namespace": "shop", "pod": "db"}); got != 110<<20 {
		t.Errorf("db's working set = %v, want both containers'", got)
	}
	if got := value("node_memory_working_set_bytes", map[string]string{}); got != 174<<20 {
		t.Errorf("node working set = %v, want its pods' 174 MiB", got)
	}
	if got := value("node_cpu_usage_seconds_total", map[string]string{}); got <= 0 {
		t.Errorf("node CPU counter = %v, want above zero", got)
	}
}

func TestANodeWithoutMeasuredPodsServesItsNodeMetrics(t *testing.T) {
	// metrics-server shows the node, with no pod, rather than an error.
	var m meter
	_, families := encodeMetrics(t, resourceMetrics(m.read("vn", NodeUsage{StartTime: started}, started.Add(time.Minute))))
	if len(families) != 2 || families["node_cpu_usage_seconds_total"] == nil || families["node_memory_working_set_bytes"] == nil {
		t.Errorf("families %v; want the node's CPU and memory", slices.Collect(maps.Keys(families)))
	}
}

// encodeMetrics writes families as the kubelet's /metrics/resource does,
// and parses the text back.
func encodeMetrics(t *testing.T, families []*dto.MetricFamily) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	var text strings.Builder
	enc := expfmt.NewEncoder(&text, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range families {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(strings.NewReader(text.String()))
	if err != nil {
		t.Fatalf("parsing the metrics: %v\n%s", err, text.String())
	}
	return text.String(), parsed
}

// fakeUsage serves the usage of one node, and counts the calls.
type fakeUsage struct {
	node string
	mu   sync.Mutex
	u    NodeUsage
}

func (f *fakeUsage) NodeUsage(_ context.Context, node string) (NodeUsage, error) {
	if node != f.node {
		return NodeUsage{}, fmt.Errorf("node %s: %w", node, ErrUnknownNode)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.u, nil
}

func TestTheNodeRoutesServeTheirNodeToThoseAllowedItsStatsOrMetrics(t *testing.T) {
	e := newEnv(t)
	usage := &fakeUsage{node: e.node, u: oneWebPod(250_000_000, started)}
	s := e.startServer(t, Options{Usage: usage})
	port, err := s.NodePort(e.node, 0)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := s.NodePort(e.node, 0); err != nil || again != port {
		t.Errorf("NodePort again = %d, %v; want the same port %d", again, err, port)
	}
	other, err := s.NodePort("offload-other", 0)
	if err != nil || other == port {
		t.Fatalf("the port of another node = %d, %v; want its own", other, err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
	otherAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(other)))
	c := httpClient()
	metrics := e.nodeServiceAccount(t, "metrics", "get")
	stats := e.nodeServiceAccount(t, "stats", "get")
	proxy := e.serviceAccount(t, "get", "create")

	tests := []struct {
		name, addr, path, token string
		want                    int
		body                    string
	}{
		{name: "nodes/metrics reads the resource metrics", addr: addr, path: metricsResourcePath, token: metrics, want: http.StatusOK,
			body: `container_cpu_usage_seconds_total{container="app",namespace="shop",pod="web"}`},
		{name: "nodes/stats reads the summary", addr: addr, path: statsSummaryPath, token: stats, want: http.StatusOK, body: `"nodeName":"` + e.node + `"`},
		{name: "nodes/proxy does not read the metrics", addr: addr, path: metricsResourcePath, token: proxy, want: http.StatusForbidden, body: "subresource=metrics"},
		{name: "nodes/metrics does not read the summary", addr: addr, path: statsSummaryPath, token: metrics, want: http.StatusForbidden, body: "subresource=stats"},
		{name: "nodes/stats does not read the logs", addr: addr, path: logsPath, token: stats, want: http.StatusForbidden, body: "subresource=proxy"},
		{name: "the metrics need credentials", addr: addr, path: metricsResourcePath, want: http.StatusUnauthorized},
		{name: "another node's port is another node: forbidden to one allowed on this node only", addr: otherAddr, path: metricsResourcePath, token: metrics, want: http.StatusForbidden},
		{name: "a pod is served on its node's port only", addr: otherAddr, path: logsPath, token: proxy, want: http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, c, tt.addr, tt.path, tt.token)
			if code != tt.want || !strings.Contains(body, tt.body) {
				t.Errorf("status %d, body %q; want %d with %q", code, body, tt.want, tt.body)
			}
		})
	}

	t.Run("the summary holds the node's and its pods' CPU and memory", func(t *testing.T) {
		code, body := get(t, c, addr, statsSummaryPath, stats)
		var sum statsv1alpha1.Summary
		if err := json.Unmarshal([]byte(body), &sum); code != http.StatusOK || err != nil {
			t.Fatalf("status %d, %v: %s", code, err, body)
		}
		if len(sum.Pods) != 1 || sum.Pods[0].PodRef != (statsv1alpha1.PodReference{Namespace: "shop", Name: consumerPod, UID: "uid-web"}) {
			t.Fatalf("pods %+v, want the consumer pod", sum.Pods)
		}
		if got := *sum.Pods[0].Containers[0].CPU.UsageNanoCores; got != 250_000_000 {
			t.Errorf("container CPU %d nanocores, want 250000000", got)
		}
		if got := *sum.Node.Memory.WorkingSetBytes; got != 64<<20 {
			t.Errorf("node working set %d, want its pod's", got)
		}
		if got := *sum.Node.CPU.UsageNanoCores; got != 250_000_000 {
			t.Errorf("node CPU %d nanocores, want its pod's", got)
		}
	})

	t.Run("a node the agent does not run is not found", func(t *testing.T) {
		everywhere := e.everywhereNodeServiceAccount(t, "metrics", "get")
		if code, body := get(t, c, otherAddr, metricsResourcePath, everywhere); code != http.StatusNotFound {
			t.Errorf("status %d, body %q; want 404", code, body)
		}
	})

	t.Run("a forgotten node's port is closed", func(t *testing.T) {
		s.ForgetNode("offload-other")
		if conn, err := net.DialTimeout("tcp", otherAddr, time.Second); err == nil {
			_ = conn.Close()
			t.Errorf("port %d still accepts connections", other)
		}
	})
}
