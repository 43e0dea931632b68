package bench

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/charts"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

const (
	installNS = "offload-system"
	// offloadedNS is the consumer namespace offloaded with the Remote strategy.
	offloadedNS = "work"
	// directNS is the plain provider namespace of the direct runs.
	directNS = "direct"
	// virtualNodeLabel marks the consumer's virtual nodes.
	virtualNodeLabel = offloadv1alpha1.LabelType + "=" + offloadv1alpha1.TypeVirtualNode
	// agentCPULimit replaces the chart's default CPU limit of the
	// controller-manager, so that it does not shape the figures. Its memory
	// limit stays the chart's (chartMemoryLimit): P4 holds under it, unless
	// OFFLOAD_BENCH_AGENT_MEMORY replaces it (to try a smaller N against a
	// proportionally smaller limit).
	agentCPULimit = "2"
	// agentMemoryEnv replaces the chart's memory limit of the
	// controller-manager.
	agentMemoryEnv = "OFFLOAD_BENCH_AGENT_MEMORY"
	// fakeNodesEnv sets how many kwok nodes the provider has, to measure
	// a smaller N on as many nodes as a run up to a larger one
	// (benchFakeNodes).
	fakeNodesEnv = "OFFLOAD_BENCH_FAKE_NODES"
	// consumerName and providerName are the clusters' names.
	consumerName, providerName = "bench-consumer", "bench-provider"
	// providerAgents is componentCPU's key of the provider's agents: every
	// offload-agent process of the provider.
	providerAgents = providerName + "/offload-agent"
)

// pair is a consumer peered with a provider, with a namespace offloaded.
type pair struct {
	consumer, provider *localcluster.Cluster
	bin                string
	// twin is the provider namespace that mirrors offloadedNS.
	twin string
	// virtualNode is the consumer's node for the provider.
	virtualNode string
	// peerReturned and peerReady are how long peer out-of-band took to
	// return, and until the virtual node offered every pod (P3).
	peerReturned, peerReady time.Duration
	// idleRSS is the consumer agent's RSS in MiB, peered, before the
	// first benchmark pod.
	idleRSS float64
	// sequential is P2 one pod at a time, on the idle pair.
	sequential sequentialP2
	// fakeNodes is how many kwok nodes the provider has, for every size.
	fakeNodes int
}

// sequentialP2 is P2 measured one pod at a time: p50 and p99 in ms of the
// overhead and of its two legs, over samples pods.
type sequentialP2 struct {
	overhead, createLeg, statusLeg [2]float64
	samples                        int
}

// statusTime runs kubectl offload status on the consumer, as a user does,
// and returns its wall time (P5).
func (p *pair) statusTime(ctx context.Context, b *testing.B) time.Duration {
	b.Helper()
	start := time.Now()
	if out, err := p.offload(ctx, p.consumer, "status"); err != nil {
		b.Fatalf("kubectl offload status: %v\n%s", err, out)
	}
	return time.Since(start)
}

// startPair starts a consumer and a provider with the agent on each one's
// real node, the provider's real node cordoned and fake nodes enough for
// maxPods, peers them and offloads offloadedNS with the Remote strategy.
func startPair(ctx context.Context, b *testing.B, maxPods int, mode cpuMode) *pair {
	b.Helper()
	fakeNodes, err := benchFakeNodes(os.Getenv(fakeNodesEnv), maxPods)
	if err != nil {
		b.Fatal(err)
	}
	if err := tools.EnsureTools(ctx); err != nil {
		b.Fatal(err)
	}
	bin, err := tools.BuildBinaries(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// The binaries serve every benchmark of the process: TestMain removes
	// them at the end.
	start := time.Now()
	clusters := localcluster.StartClusters(b,
		localcluster.ClusterOptions{Name: consumerName, RealNode: true, DisableQPSLimits: true, CPUs: mode.consumer},
		localcluster.ClusterOptions{Name: providerName, FakeNodes: fakeNodes, TaintFakeNodes: true, RealNode: true, DisableQPSLimits: true, CPUs: mode.provider},
	)
	p := &pair{consumer: clusters[0], provider: clusters[1], bin: bin, fakeNodes: fakeNodes}
	fmt.Printf("BenchmarkOffload %s: clusters up with %d fake provider nodes: %s; %s", mode.name, fakeNodes, time.Since(start).Round(time.Millisecond), mode.describe())

	// P1-P5 measure the control plane as before the fabric existed; P6
	// (make bench-network) measures the fabric.
	install := []string{"--network=false"}
	for _, v := range []string{
		"sharingPercentage=100",
		"controllerManager.resources.limits.cpu=" + agentCPULimit,
	} {
		install = append(install, "--set", v)
	}
	if m := os.Getenv(schedulingEnv); m != "" {
		install = append(install, "--set", "webhook.mode="+m)
	}
	if m := os.Getenv(agentMemoryEnv); m != "" {
		install = append(install, "--set", "controllerManager.resources.limits.memory="+m)
	}
	if os.Getenv("OFFLOAD_BENCH_PROFILE") != "" {
		install = append(install, "--set", "controllerManager.pprofBindAddress=:"+strconv.Itoa(agentPprofPort))
	}
	// The peered-pair fixture, in two halves: the provider's real node is
	// cordoned between them.
	if err := localcluster.InstallPair(ctx, p.consumer, p.provider, localcluster.PairOptions{Bin: bin, Install: install}); err != nil {
		b.Fatal(err)
	}
	// Every benchmark pod, direct or remote, goes to a fake node.
	cordon := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := p.provider.Kube.CoreV1().Nodes().Patch(ctx, p.provider.Node.Name, types.MergePatchType, cordon, metav1.PatchOptions{}); err != nil {
		b.Fatalf("cordoning the provider's real node: %v", err)
	}
	p.peer(ctx, b, maxPods)
	p.namespaces(ctx, b)
	fmt.Printf("BenchmarkOffload: pair peered and %s offloaded: %s\n", offloadedNS, time.Since(start).Round(time.Millisecond))
	return p
}

// peer runs peer generate on the provider and the printed command on the
// consumer, and waits until the virtual node is Ready for maxPods pods.
func (p *pair) peer(ctx context.Context, b *testing.B, maxPods int) {
	b.Helper()
	// The provider lends its fake nodes, which are tainted as the local
	// clusters' are, to the consumer.
	pp, err := localcluster.PeerPair(ctx, p.consumer, p.provider, localcluster.PairOptions{Bin: p.bin, Generate: []string{"--toleration", localcluster.FakeNodeTolerationFlag}})
	if err != nil {
		b.Fatal(err)
	}
	// P3 counts from the start of peer out-of-band, not of peer generate.
	returned := pp.OutOfBand
	start := time.Now().Add(-returned)
	if err := poll(ctx, 3*time.Minute, func(ctx context.Context) (bool, string) {
		nodes, err := p.consumer.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: virtualNodeLabel})
		if err != nil || len(nodes.Items) != 1 {
			return false, fmt.Sprintf("virtual nodes: %d, %v", len(nodes.Items), err)
		}
		n := nodes.Items[0]
		p.virtualNode = n.Name
		pods := n.Status.Allocatable.Pods().Value()
		return nodeReady(&n) && pods >= int64(maxPods), fmt.Sprintf("node %s ready=%t allocatable pods %d", n.Name, nodeReady(&n), pods)
	}); err != nil {
		b.Fatalf("waiting for a Ready virtual node offering %d pods: %v", maxPods, err)
	}
	// The command waits for the virtual node to be Ready; the poll above
	// also waits for the whole offer.
	p.peerReady, p.peerReturned = time.Since(start), returned
	fmt.Printf("P3 peer out-of-band: returned (virtual node Ready) in %s; the offer for %d pods in %s\n",
		returned.Round(time.Millisecond), maxPods, p.peerReady.Round(time.Millisecond))
}

// namespaces offloads offloadedNS on the consumer and creates directNS on
// the provider, and waits for their default ServiceAccounts.
func (p *pair) namespaces(ctx context.Context, b *testing.B) {
	b.Helper()
	for _, n := range []struct {
		c  *localcluster.Cluster
		ns string
	}{{p.consumer, offloadedNS}, {p.provider, directNS}} {
		if _, err := n.c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := p.offload(ctx, p.consumer, "namespace", offloadedNS, "--pod-offloading-strategy", "Remote", "--timeout", "2m"); err != nil {
		b.Fatal(err)
	}
	cm, err := p.consumer.Kube.CoreV1().ConfigMaps(installNS).Get(ctx, offloadv1alpha1.IdentityConfigMap, metav1.GetOptions{})
	if err != nil {
		b.Fatalf("the consumer's identity: %v", err)
	}
	p.twin = offloadv1alpha1.TwinNamespace(offloadedNS, p.consumer.Name, cm.Data["clusterID"])
	// Pods are rejected until a namespace has its default ServiceAccount.
	for _, n := range []struct {
		c  *localcluster.Cluster
		ns string
	}{{p.consumer, offloadedNS}, {p.provider, directNS}, {p.provider, p.twin}} {
		if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, string) {
			_, err := n.c.Kube.CoreV1().ServiceAccounts(n.ns).Get(ctx, "default", metav1.GetOptions{})
			return err == nil, fmt.Sprint(err)
		}); err != nil {
			b.Fatalf("waiting for the default ServiceAccount of %s in %s: %v", n.ns, n.c.Name, err)
		}
	}
}

// offload runs the built kubectl-offload binary against c.
func (p *pair) offload(ctx context.Context, c *localcluster.Cluster, args ...string) (string, error) {
	return localcluster.Offload(ctx, p.bin, c, args...)
}

// poll checks cond every 250 ms until it holds or timeout passes; the
// error carries why it last did not hold.
func poll(ctx context.Context, timeout time.Duration, cond func(ctx context.Context) (bool, string)) error {
	_, err := framework.Poll(ctx, 250*time.Millisecond, timeout, cond)
	return err
}

// waitNoPods waits until no pod matching selector is left in ns.
func waitNoPods(ctx context.Context, c *localcluster.Cluster, ns, selector string, timeout time.Duration) error {
	err := poll(ctx, timeout, func(ctx context.Context) (bool, string) {
		list, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: 1})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("pods left, remaining count %v", list.RemainingItemCount)
	})
	if err != nil {
		return fmt.Errorf("%s: waiting for the pods %s in %s to go: %w", c.Name, selector, ns, err)
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// agentPods lists the controller-manager pods of c.
func agentPods(ctx context.Context, c *localcluster.Cluster) (*corev1.PodList, error) {
	return c.Kube.CoreV1().Pods(installNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=controller-manager"})
}

// agentRestarts returns the restart count of the controller-manager container of c.
func agentRestarts(ctx context.Context, c *localcluster.Cluster) (int32, error) {
	list, err := agentPods(ctx, c)
	if err != nil {
		return 0, err
	}
	var n int32
	for _, p := range list.Items {
		for _, s := range p.Status.ContainerStatuses {
			n += s.RestartCount
		}
	}
	return n, nil
}

// ignoreNotFound returns nil for a NotFound error.
func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// waitCapacity waits until the virtual node offers n pods and the twin
// namespace's quota admits n pods, as the offer follows the provider's
// free resources with some delay.
func (p *pair) waitCapacity(ctx context.Context, b *testing.B, n int) {
	b.Helper()
	if err := poll(ctx, 3*time.Minute, func(ctx context.Context) (bool, string) {
		node, err := p.consumer.Kube.CoreV1().Nodes().Get(ctx, p.virtualNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		quotas, err := p.provider.Kube.CoreV1().ResourceQuotas(p.twin).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		quota := int64(-1)
		for _, q := range quotas.Items {
			if v, ok := q.Spec.Hard[corev1.ResourcePods]; ok {
				quota = v.Value()
			}
		}
		offered := node.Status.Allocatable.Pods().Value()
		return offered >= int64(n) && (quota < 0 || quota >= int64(n)), fmt.Sprintf("virtual node offers %d pods, twin quota %d", offered, quota)
	}); err != nil {
		b.Fatalf("waiting for room for %d offloaded pods: %v", n, err)
	}
}

// componentCPU returns the CPU seconds used so far by each control-plane
// and node process of the benchmark clusters, keyed "cluster/component"
// (component = binary name); the agents are "cluster/offload-agent", and
// the provider's "providerAgents SUBCOMMAND" (agentsCPU sums them).
func componentCPU() map[string]float64 {
	out := map[string]float64{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		args := string(cmdline)
		cluster := ""
		for _, c := range []string{consumerName, providerName} {
			if strings.Contains(args, "/"+c+"/") {
				cluster = c
			}
		}
		argv := strings.Split(strings.TrimRight(args, "\x00"), "\x00")
		if cluster == "" && filepath.Base(argv[0]) == "offload-agent" {
			if environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err == nil {
				for _, c := range []string{consumerName, providerName} {
					if strings.Contains("\x00"+string(environ)+"\x00", "\x00OFFLOAD_CLUSTER_NAME="+c+"\x00") {
						cluster = c
					}
				}
			}
		}
		if cluster == "" {
			continue
		}
		name := cluster + "/" + filepath.Base(argv[0])
		if name == providerAgents && len(argv) > 1 {
			// The provider's agents one by one: controller-manager, auth,
			// fabric, gateway.
			name += " " + argv[1]
		}
		if cpu, err := machine.CPUSeconds(pid); err == nil {
			out[name] += cpu
		}
	}
	return out
}

// agentsCPU is the CPU seconds of the provider's agents in a componentCPU
// reading.
func agentsCPU(parts map[string]float64) float64 {
	var sum float64
	for k, v := range parts {
		if k == providerAgents || strings.HasPrefix(k, providerAgents+" ") {
			sum += v
		}
	}
	return sum
}

// cpuDelta renders the CPU seconds each component used between two
// componentCPU readings, largest first.
func cpuDelta(before, after map[string]float64) string {
	type use struct {
		name string
		s    float64
	}
	var uses []use
	for k, v := range after {
		if d := v - before[k]; d >= 0.05 {
			uses = append(uses, use{k, d})
		}
	}
	sort.Slice(uses, func(i, j int) bool { return uses[i].s > uses[j].s })
	var parts []string
	for _, u := range uses {
		parts = append(parts, fmt.Sprintf("%s %.1f", u.name, u.s))
	}
	return strings.Join(parts, ", ")
}

// chartMemoryLimit is the controller-manager's memory limit as the chart
// sets it by default, or "unknown"; OFFLOAD_BENCH_AGENT_MEMORY when set.
func chartMemoryLimit() string {
	if m := os.Getenv(agentMemoryEnv); m != "" {
		return m + " (" + agentMemoryEnv + ")"
	}
	data, err := fs.ReadFile(charts.Offload(), "values.yaml")
	if err != nil {
		return "unknown"
	}
	var v struct {
		ControllerManager struct {
			Resources struct {
				Limits struct {
					Memory string `json:"memory"`
				} `json:"limits"`
			} `json:"resources"`
		} `json:"controllerManager"`
	}
	if yaml.Unmarshal(data, &v) != nil || v.ControllerManager.Resources.Limits.Memory == "" {
		return "unknown"
	}
	return v.ControllerManager.Resources.Limits.Memory + " (the chart's)"
}

// benchFakeNodes is how many kwok nodes the provider needs for maxPods
// pods: room for the direct and the offloaded Deployment at once, two
// nodes per 100 pods and one (the offer, and so the twin namespace's quota,
// may follow the provider's free pods, which the direct run uses up for a
// while). s (OFFLOAD_BENCH_FAKE_NODES), if set, asks for more: the
// provider's scheduler works more per pod on more nodes, so a P1 measured
// alone at N=1000 compares with one of a run up to N=10000 only on as
// many nodes (201).
func benchFakeNodes(s string, maxPods int) (int, error) {
	need := (2*maxPods+99)/100 + 1
	if strings.TrimSpace(s) == "" {
		return need, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < need {
		return 0, fmt.Errorf("%s=%q: want a number of nodes of at least %d, enough for %d pods directly and offloaded at once", fakeNodesEnv, s, need, maxPods)
	}
	return n, nil
}
