package virtualnode

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/kubeletapi"
)

// NodeUsage implements kubeletapi.UsageSource: what the pods of virtual
// node node use, as the provider's metrics API measures their remote pods.
// It reads PodMetrics in the twin namespaces with the tenant's credentials,
// one list per twin namespace; pods the provider has not measured yet are
// left out.
func (r *Reconciler) NodeUsage(ctx context.Context, node string) (kubeletapi.NodeUsage, error) {
	rt, run := r.podsOf(node)
	if run == nil {
		return kubeletapi.NodeUsage{}, fmt.Errorf("node %s: %w", node, kubeletapi.ErrUnknownNode)
	}
	pods, err := run.pods.List(labels.Everything())
	if err != nil {
		return kubeletapi.NodeUsage{}, err
	}
	u := kubeletapi.NodeUsage{StartTime: rt.started}
	byTwin := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if twin, ok := run.handler.TwinNamespace(p.Namespace); ok && p.Status.Phase == corev1.PodRunning {
			byTwin[twin] = append(byTwin[twin], p)
		}
	}
	for _, twin := range slices.Sorted(maps.Keys(byTwin)) {
		list, err := rt.peer.metrics.MetricsV1beta1().PodMetricses(twin).List(ctx, metav1.ListOptions{})
		if err != nil {
			return kubeletapi.NodeUsage{}, fmt.Errorf("reading the provider's metrics of twin namespace %s: %w", twin, err)
		}
		measured := map[string]*metricsv1beta1.PodMetrics{}
		for i := range list.Items {
			measured[list.Items[i].Name] = &list.Items[i]
		}
		for _, p := range byTwin[twin] {
			if m := measured[p.Name]; m != nil {
				u.Pods = append(u.Pods, podUsage(p, m))
			}
		}
	}
	slices.SortFunc(u.Pods, func(a, b kubeletapi.PodUsage) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return u, nil
}

// podUsage is consumer pod p's usage, as PodMetrics m of its remote pod says.
func podUsage(p *corev1.Pod, m *metricsv1beta1.PodMetrics) kubeletapi.PodUsage {
	pu := kubeletapi.PodUsage{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
	if p.Status.StartTime != nil {
		pu.StartTime = p.Status.StartTime.Time
	}
	started := map[string]metav1.Time{}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil {
			started[cs.Name] = cs.State.Running.StartedAt
		}
	}
	for _, c := range m.Containers {
		cu := kubeletapi.ContainerUsage{Name: c.Name, StartTime: started[c.Name].Time}
		if cpu, ok := c.Usage[corev1.ResourceCPU]; ok && cpu.Sign() > 0 {
			cu.NanoCores = uint64(cpu.ScaledValue(-9)) //nolint:gosec // positive
		}
		if mem, ok := c.Usage[corev1.ResourceMemory]; ok && mem.Sign() > 0 {
			cu.WorkingSetBytes = uint64(mem.Value()) //nolint:gosec // positive
		}
		pu.Containers = append(pu.Containers, cu)
	}
	slices.SortFunc(pu.Containers, func(a, b kubeletapi.ContainerUsage) int { return strings.Compare(a.Name, b.Name) })
	return pu
}

// podsOf returns the runtime of virtual node node and its running pod
// reflection; run is nil when none runs.
func (r *Reconciler) podsOf(node string) (rt *peerRuntime, run *podsRun) {
	return r.runtimeWhere(func(p *peer) bool { return p.node() == node })
}

// runtimeWhere returns the runtime of the first peer that match selects,
// and its running pod reflection; run is nil when none runs.
func (r *Reconciler) runtimeWhere(match func(*peer) bool) (rt *peerRuntime, run *podsRun) {
	r.mu.Lock()
	for _, candidate := range r.peers {
		if match(candidate.peer) {
			rt = candidate
			break
		}
	}
	r.mu.Unlock()
	if rt == nil {
		return nil, nil
	}
	return rt, rt.running()
}
