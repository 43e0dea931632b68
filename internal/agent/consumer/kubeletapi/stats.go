package kubeletapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

// ErrUnknownNode is wrapped by the errors a UsageSource returns for nodes
// that are not virtual nodes of this agent, or whose pods are not reflected
// yet; the Server answers 404.
var ErrUnknownNode = errors.New("not a running virtual node of this agent")

// UsageSource reads what the pods of a virtual node use where they really
// run: the provider's metrics API, with the consumer's credentials.
type UsageSource interface {
	// NodeUsage returns the usage of the pods of virtual node node as the
	// provider last measured it, or an error wrapping ErrUnknownNode.
	NodeUsage(ctx context.Context, node string) (NodeUsage, error)
}

// NodeUsage is what the pods of a virtual node use.
type NodeUsage struct {
	// StartTime is when the virtual node was created.
	StartTime time.Time
	// Pods are the consumer pods the provider has measured.
	Pods []PodUsage
}

// PodUsage is what one consumer pod uses on the provider.
type PodUsage struct {
	Namespace, Name string
	UID             types.UID
	// StartTime is when the pod started, as the consumer pod says.
	StartTime  time.Time
	Containers []ContainerUsage
}

// ContainerUsage is what one container uses on the provider.
type ContainerUsage struct {
	Name string
	// StartTime is when the running container started; its CPU counter
	// starts again when it changes.
	StartTime time.Time
	// NanoCores is the CPU the provider last measured, in billionths of a core.
	NanoCores uint64
	// WorkingSetBytes is the memory working set the provider last measured.
	WorkingSetBytes uint64
}

// The kubelet API's resource-metrics and summary routes.
const (
	metricsResourcePath = "/metrics/resource"
	statsSummaryPath    = "/stats/summary"
)

// minCoreSeconds is the smallest CPU counter served: metrics-server drops
// a container, or a node, whose counter reads zero.
const minCoreSeconds = 1e-6

// meter keeps cumulative CPU counters, in core-seconds, for the containers
// and the virtual nodes. The provider's metrics API gives the CPU used
// over its last window, while metrics-server and the summary API want
// counters that grow from the container's start: each read adds the last
// measure times the time since the previous read. metrics-server then
// computes back the rate the provider measured.
type meter struct {
	mu    sync.Mutex
	nodes map[string]*nodeMeter
}

type nodeMeter struct {
	at         time.Time
	coreSecs   float64
	containers map[containerKey]*counter
}

type containerKey struct {
	pod       types.UID
	container string
	started   time.Time
}

type counter struct {
	at       time.Time
	coreSecs float64
}

// reading is u with each container's and the node's CPU counter at at.
type reading struct {
	NodeUsage
	at       time.Time
	nodeSecs float64
	// secs are the containers' counters, in the order of u's pods and containers.
	secs [][]float64
}

// read advances the counters of node to now with u, forgets the
// containers u no longer has, and returns the reading.
func (m *meter) read(node string, u NodeUsage, now time.Time) reading {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.nodes == nil {
		m.nodes = map[string]*nodeMeter{}
	}
	nm := m.nodes[node]
	if nm == nil {
		nm = &nodeMeter{at: now, coreSecs: minCoreSeconds, containers: map[containerKey]*counter{}}
		m.nodes[node] = nm
	}
	if now.Before(nm.at) {
		now = nm.at
	}
	r := reading{NodeUsage: u, at: now, secs: make([][]float64, len(u.Pods))}
	var nanoCores uint64
	seen := map[containerKey]bool{}
	for i, p := range u.Pods {
		r.secs[i] = make([]float64, len(p.Containers))
		for j, c := range p.Containers {
			nanoCores += c.NanoCores
			key := containerKey{pod: p.UID, container: c.Name, started: c.StartTime}
			seen[key] = true
			ctr := nm.containers[key]
			if ctr == nil {
				// A container first seen: as if it had used the measured
				// CPU since it started.
				since := 0.0
				if !c.StartTime.IsZero() && c.StartTime.Before(now) {
					since = now.Sub(c.StartTime).Seconds()
				}
				ctr = &counter{at: now, coreSecs: max(cores(c.NanoCores)*since, minCoreSeconds)}
				nm.containers[key] = ctr
			}
			ctr.coreSecs += cores(c.NanoCores) * now.Sub(ctr.at).Seconds()
			ctr.at = now
			r.secs[i][j] = ctr.coreSecs
		}
	}
	for key := range nm.containers {
		if !seen[key] {
			delete(nm.containers, key)
		}
	}
	nm.coreSecs += cores(nanoCores) * now.Sub(nm.at).Seconds()
	nm.at = now
	r.nodeSecs = nm.coreSecs
	return r
}

// forget drops the counters of node.
func (m *meter) forget(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.nodes, node)
}

func cores(nanoCores uint64) float64 { return float64(nanoCores) / 1e9 }

// workingSet is the node's memory working set: its pods'. A node with no
// measured pod reports a byte, as metrics-server drops a node whose memory
// reads zero and kubectl top node would show it unknown.
func (r reading) workingSet() uint64 {
	var sum uint64
	for _, p := range r.Pods {
		for _, c := range p.Containers {
			sum += c.WorkingSetBytes
		}
	}
	return max(sum, 1)
}

// usage reads the usage of node from the UsageSource and advances the
// counters; errors map to the HTTP statuses of the virtual-kubelet handlers.
func (s *Server) usage(ctx context.Context) (reading, error) {
	node, _ := ctx.Value(nodeKey{}).(string)
	if s.opts.Usage == nil || node == "" {
		return reading{}, errdefs.NotFound("this virtual kubelet serves no resource metrics")
	}
	u, err := s.opts.Usage.NodeUsage(ctx, node)
	if errors.Is(err, ErrUnknownNode) {
		return reading{}, errdefs.AsNotFound(err)
	}
	if err != nil {
		return reading{}, fmt.Errorf("reading what the pods of virtual node %s use on the provider: %w", node, err)
	}
	return s.meter.read(node, u, time.Now()), nil
}

// metricsResource serves /metrics/resource, the kubelet's resource metrics,
// which metrics-server scrapes.
func (s *Server) metricsResource(ctx context.Context) ([]*dto.MetricFamily, error) {
	r, err := s.usage(ctx)
	if err != nil {
		return nil, err
	}
	return resourceMetrics(r), nil
}

// resourceMetrics are the families of the kubelet's /metrics/resource for r.
func resourceMetrics(r reading) []*dto.MetricFamily {
	ts := r.at.UnixMilli()
	family := func(name, help string, t dto.MetricType) *dto.MetricFamily {
		return &dto.MetricFamily{Name: ptr.To(name), Help: ptr.To(help), Type: t.Enum()}
	}
	sample := func(t dto.MetricType, v float64, labels ...string) *dto.Metric {
		m := &dto.Metric{TimestampMs: ptr.To(ts)}
		for i := 0; i+1 < len(labels); i += 2 {
			m.Label = append(m.Label, &dto.LabelPair{Name: ptr.To(labels[i]), Value: ptr.To(labels[i+1])})
		}
		if t == dto.MetricType_COUNTER {
			m.Counter = &dto.Counter{Value: ptr.To(v)}
		} else {
			m.Gauge = &dto.Gauge{Value: ptr.To(v)}
		}
		return m
	}
	nodeCPU := family("node_cpu_usage_seconds_total", "Cumulative cpu time consumed by the node in core-seconds", dto.MetricType_COUNTER)
	nodeCPU.Metric = []*dto.Metric{sample(dto.MetricType_COUNTER, r.nodeSecs)}
	nodeMem := family("node_memory_working_set_bytes", "Current working set of the node in bytes", dto.MetricType_GAUGE)
	nodeMem.Metric = []*dto.Metric{sample(dto.MetricType_GAUGE, float64(r.workingSet()))}
	ctrCPU := family("container_cpu_usage_seconds_total", "Cumulative cpu time consumed by the container in core-seconds", dto.MetricType_COUNTER)
	ctrMem := family("container_memory_working_set_bytes", "Current working set of the container in bytes", dto.MetricType_GAUGE)
	ctrStart := family("container_start_time_seconds", "Start time of the container since unix epoch in seconds", dto.MetricType_GAUGE)
	podCPU := family("pod_cpu_usage_seconds_total", "Cumulative cpu time consumed by the pod in core-seconds", dto.MetricType_COUNTER)
	podMem := family("pod_memory_working_set_bytes", "Current working set of the pod in bytes", dto.MetricType_GAUGE)
	for i, p := range r.Pods {
		var podSecs float64
		var podBytes uint64
		for j, c := range p.Containers {
			labels := []string{"container", c.Name, "namespace", p.Namespace, "pod", p.Name}
			ctrCPU.Metric = append(ctrCPU.Metric, sample(dto.MetricType_COUNTER, r.secs[i][j], labels...))
			ctrMem.Metric = append(ctrMem.Metric, sample(dto.MetricType_GAUGE, float64(c.WorkingSetBytes), labels...))
			if !c.StartTime.IsZero() {
				ctrStart.Metric = append(ctrStart.Metric, sample(dto.MetricType_GAUGE, float64(c.StartTime.UnixNano())/1e9, labels...))
			}
			podSecs += r.secs[i][j]
			podBytes += c.WorkingSetBytes
		}
		podCPU.Metric = append(podCPU.Metric, sample(dto.MetricType_COUNTER, podSecs, "namespace", p.Namespace, "pod", p.Name))
		podMem.Metric = append(podMem.Metric, sample(dto.MetricType_GAUGE, float64(podBytes), "namespace", p.Namespace, "pod", p.Name))
	}
	// The text encoder refuses a family without samples: a node with no
	// measured pod has node families only.
	var families []*dto.MetricFamily
	for _, f := range []*dto.MetricFamily{ctrCPU, ctrMem, ctrStart, nodeCPU, nodeMem, podCPU, podMem} {
		if len(f.Metric) > 0 {
			families = append(families, f)
		}
	}
	sort.Slice(families, func(i, j int) bool { return families[i].GetName() < families[j].GetName() })
	return families
}

// statsSummary serves /stats/summary, the kubelet's Summary API, with the
// CPU and memory of the node and its pods.
func (s *Server) statsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	r, err := s.usage(ctx)
	if err != nil {
		return nil, err
	}
	node, _ := ctx.Value(nodeKey{}).(string)
	return summary(node, r), nil
}

// summary is the Summary of node for r.
func summary(node string, r reading) *statsv1alpha1.Summary {
	at := metav1.NewTime(r.at)
	cpu := func(nanoCores uint64, secs float64) *statsv1alpha1.CPUStats {
		return &statsv1alpha1.CPUStats{Time: at, UsageNanoCores: ptr.To(nanoCores), UsageCoreNanoSeconds: ptr.To(uint64(secs * 1e9))}
	}
	memory := func(bytes uint64) *statsv1alpha1.MemoryStats {
		return &statsv1alpha1.MemoryStats{Time: at, WorkingSetBytes: ptr.To(bytes), UsageBytes: ptr.To(bytes)}
	}
	out := &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: node, StartTime: metav1.NewTime(r.StartTime)}}
	var nodeNanoCores uint64
	for i, p := range r.Pods {
		ps := statsv1alpha1.PodStats{
			PodRef:    statsv1alpha1.PodReference{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)},
			StartTime: metav1.NewTime(p.StartTime),
		}
		var podNanoCores, podBytes uint64
		var podSecs float64
		for j, c := range p.Containers {
			ps.Containers = append(ps.Containers, statsv1alpha1.ContainerStats{
				Name: c.Name, StartTime: metav1.NewTime(c.StartTime),
				CPU: cpu(c.NanoCores, r.secs[i][j]), Memory: memory(c.WorkingSetBytes),
			})
			podNanoCores += c.NanoCores
			podBytes += c.WorkingSetBytes
			podSecs += r.secs[i][j]
		}
		ps.CPU, ps.Memory = cpu(podNanoCores, podSecs), memory(podBytes)
		nodeNanoCores += podNanoCores
		out.Pods = append(out.Pods, ps)
	}
	out.Node.CPU, out.Node.Memory = cpu(nodeNanoCores, r.nodeSecs), memory(r.workingSet())
	return out
}

// attachNodeRoutes adds the node-level routes to mux.
func (s *Server) attachNodeRoutes(mux *http.ServeMux) {
	mux.Handle(metricsResourcePath, api.HandlePodMetricsResource(s.metricsResource))
	mux.Handle(statsSummaryPath, api.HandlePodStatsSummary(s.statsSummary))
}
