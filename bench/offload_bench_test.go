package bench

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
)

// benchImage is never pulled: every benchmark pod runs on a kwok fake node.
const benchImage = "registry.local/offload/pause:test"

// schedulingEnv, webhook or policy, installs the agents with that
// webhook.mode, to compare the two; unset, install chooses (the policy where
// the API server serves it).
const schedulingEnv = "OFFLOAD_BENCH_SCHEDULING"

// defaultSizes are the Deployment sizes; OFFLOAD_BENCH_N="100,1000" overrides them.
var defaultSizes = []int{100, 1000, 5000}

// offloadResult holds the figures of one size.
type offloadResult struct {
	n                               int
	direct, offloaded               time.Duration
	overhead, createLeg, statusLeg  [2]float64 // p50 and p99, ms
	samples, notOffloaded           int
	consumerRSS, providerRSS, agent float64 // MiB, MiB, CPU seconds
	// consumerAnonRSS is the anonymous part of consumerRSS, in MiB: less
	// the resident pages of the agent's binary.
	consumerAnonRSS float64
	// consumerIdleRSS is the consumer agent's RSS, in MiB, before the
	// first benchmark pod: peered, with nothing offloaded.
	consumerIdleRSS float64
	// machineDirect and machineOffloaded are the CPU seconds the whole
	// machine (both clusters, the agents, this process) used in each run.
	machineDirect, machineOffloaded float64
	// stealDirect and stealOffloaded are the CPU seconds the hypervisor
	// gave to other machines during each run while this one had work
	// (steal): what competed for the cores from outside.
	stealDirect, stealOffloaded float64
	// requestsDirect is what the provider's API server served per pod in
	// the direct run; requestsConsumer and requestsProvider what each
	// served per pod in the offloaded one (apiserver_request_total).
	requestsDirect, requestsConsumer, requestsProvider float64
	// startupDirect and startupOffloaded are the pod startup SLI of each
	// run: p50, p90 and p99, in ms, of the time from a pod's creation to
	// Running, both as the bench's watch of the pod's own cluster saw them.
	startupDirect, startupOffloaded [3]float64
	// providerAgentsDirect is the CPU seconds the provider's agents (every
	// offload-agent process of the provider) used in the direct run, where
	// no pod is a tenant's.
	providerAgentsDirect float64
	// providerAgentsIdle is what the provider's agents used per second,
	// in CPU seconds, before the direct run, with no pod to handle.
	providerAgentsIdle float64
	// deleted is how long deleting the offloaded Deployment took, until
	// its consumer and remote pods were gone; deleteRestarts how many
	// times the consumer's agent restarted meanwhile (OOMKilled, say).
	deleted        time.Duration
	deleteRestarts int32
	// restartReady is how long the consumer's agent took, deleted with N
	// pods offloaded, until its replacement was Ready; restartRSS the
	// replacement's peak RSS in MiB over restartWindow after that, and
	// restartOOM how many times it restarted in that time.
	restartReady time.Duration
	restartRSS   float64
	restartOOM   int32
}

// idleWindow is how long measure reads the provider agents' idle CPU.
const idleWindow = 10 * time.Second

// ownPods is the CPU seconds the provider's own pods cost its agents in
// the direct run: what they used, less their idle rate for as long.
func (r offloadResult) ownPods() float64 {
	return r.providerAgentsDirect - r.providerAgentsIdle*r.direct.Seconds()
}

// BenchmarkOffload compares a Deployment of N replicas run directly on the
// provider with the same Deployment offloaded to it from the consumer, on
// one peered pair of clusters: the time until N pods are Running on each
// side (P1), the per-pod overhead of the reflection (P2), and the memory
// and CPU of the consumer's agent (P4). It prints figures and asserts
// nothing about speed.
func BenchmarkOffload(b *testing.B) {
	sizes, err := benchSizes(os.Getenv("OFFLOAD_BENCH_N"))
	if err != nil {
		b.Fatal(err)
	}
	runs, err := benchRuns(os.Getenv("OFFLOAD_BENCH_RUNS"), sizes)
	if err != nil {
		b.Fatal(err)
	}
	modes, err := cpuModes(os.Getenv("OFFLOAD_BENCH_CPUS"))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	sizes = selectedSizes(sizes)
	var summaries strings.Builder
	var all []modeResults
	for _, mode := range modes {
		// Each mode has its pair of clusters, gone when its sub-benchmark ends.
		b.Run(mode.name, func(b *testing.B) {
			setup, setupCancel := context.WithTimeout(ctx, 15*time.Minute)
			defer setupCancel()
			p := startPair(setup, b, slices.Max(append(sizes, sequentialPods)), mode)
			results := p.run(ctx, b, sizes, runs)
			status := p.statusTime(ctx, b)
			all = append(all, modeResults{mode: mode, results: results, peer: p.peerReturned, status: status, sequential: p.sequential, fakeNodes: p.fakeNodes, kubeletTokens: kubeletTokens()})
			b.ReportMetric(p.peerReturned.Seconds(), "s-P3-peer")
			b.ReportMetric(status.Seconds(), "s-P5-status")
			fmt.Fprintf(&summaries, "\n%s: %s%sP3 peer out-of-band to virtual node Ready: %s; P5 kubectl offload status: %s\n",
				mode.name, mode.describe(), summary(results), p.peerReturned.Round(time.Millisecond), status.Round(time.Millisecond))
		})
	}
	// A parent benchmark's log is dropped when its sub-benchmarks pass.
	fmt.Print(summaries.String())
	if path := os.Getenv("OFFLOAD_BENCH_REPORT"); path != "" && len(all) > 0 {
		command := fmt.Sprintf("OFFLOAD_BENCH_N=%s OFFLOAD_BENCH_CPUS=%s OFFLOAD_BENCH_RUNS=%s make bench-offload", joinInts(sizes), cpuModeNames(modes), runsArg(sizes, runs))
		for _, env := range []string{schedulingEnv, agentMemoryEnv, fakeNodesEnv, kubeletTokensEnv} {
			if m := os.Getenv(env); m != "" {
				command = env + "=" + m + " " + command
			}
		}
		if err := writeReport(path, command, all); err != nil {
			b.Fatalf("writing the report: %v", err)
		}
		fmt.Printf("report written to %s\n", path)
	}
}

// cpuModeNames lists the names of modes, comma-separated.
func cpuModeNames(modes []cpuMode) string {
	names := make([]string, len(modes))
	for i, m := range modes {
		names[i] = m.name
	}
	return strings.Join(names, ",")
}

// cpuMode is how the pair shares the host's CPUs.
type cpuMode struct {
	name string
	// consumer and provider are each cluster's CPUs; empty shares them all.
	consumer, provider string
}

// describe says which CPUs each cluster had.
func (m cpuMode) describe() string {
	if m.consumer == "" {
		return "both clusters share every CPU of the host (they compete, as they would not on two machines)\n"
	}
	return fmt.Sprintf("consumer on CPUs %s, provider on CPUs %s (control planes, nodes' daemons, agents and pods; the direct run uses the provider's only)\n", m.consumer, m.provider)
}

// cpuModes parses OFFLOAD_BENCH_CPUS: isolated (each cluster on half of
// the host's CPUs, as two machines), shared, or both comma-separated, the
// default.
func cpuModes(s string) ([]cpuMode, error) {
	if strings.TrimSpace(s) == "" {
		s = "isolated,shared"
	}
	var out []cpuMode
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(f) {
		case "isolated":
			consumer, provider, err := machine.SplitHostCPUs()
			if err != nil {
				return nil, fmt.Errorf("OFFLOAD_BENCH_CPUS=isolated: %w", err)
			}
			out = append(out, cpuMode{name: "isolated", consumer: consumer, provider: provider})
		case "shared":
			out = append(out, cpuMode{name: "shared"})
		default:
			return nil, fmt.Errorf("OFFLOAD_BENCH_CPUS=%q: want isolated, shared or both, comma-separated", s)
		}
	}
	return out, nil
}

// run measures P2 one pod at a time, then each size, runs[size] times, on p.
func (p *pair) run(ctx context.Context, b *testing.B, sizes []int, runs map[int]int) []offloadResult {
	if pid, err := machine.AgentPID(p.consumer.Name); err == nil {
		p.idleRSS, _ = machine.RSSMiB(pid)
	}
	// P2 on an idle pair: one pod at a time, so each figure is the
	// reflection's own latency, without the queueing a burst adds.
	b.Run("P2-one-at-a-time", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			overhead, createLeg, statusLeg, samples := p.oneAtATime(ctx, b, sequentialPods)
			p.sequential = sequentialP2{overhead: overhead, createLeg: createLeg, statusLeg: statusLeg, samples: samples}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(overhead[0], "ms-overhead-p50")
			b.ReportMetric(overhead[1], "ms-overhead-p99")
			b.ReportMetric(createLeg[0], "ms-create-leg-p50")
			b.ReportMetric(createLeg[1], "ms-create-leg-p99")
			b.ReportMetric(statusLeg[0], "ms-status-leg-p50")
			b.ReportMetric(statusLeg[1], "ms-status-leg-p99")
			b.ReportMetric(float64(samples), "pods")
			fmt.Printf("P2 one pod at a time (%d pods): overhead p50 %.0f ms p99 %.0f ms; create leg p50 %.0f p99 %.0f; status leg p50 %.0f p99 %.0f\n",
				samples, overhead[0], overhead[1], createLeg[0], createLeg[1], statusLeg[0], statusLeg[1])
		}
	})
	var results []offloadResult
	for _, n := range sizes {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				var these []offloadResult
				for range runs[n] {
					these = append(these, p.measure(ctx, b, n))
				}
				results = append(results, these...)
				// The metrics are the median run's, by P1 ratio.
				r := medianRun(these)
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(r.direct.Seconds(), "s-direct")
				b.ReportMetric(r.offloaded.Seconds(), "s-offloaded")
				b.ReportMetric(r.ratio(), "ratio")
				b.ReportMetric(r.overhead[0], "ms-overhead-p50")
				b.ReportMetric(r.overhead[1], "ms-overhead-p99")
				b.ReportMetric(r.createLeg[0], "ms-create-leg-p50")
				b.ReportMetric(r.createLeg[1], "ms-create-leg-p99")
				b.ReportMetric(r.statusLeg[0], "ms-status-leg-p50")
				b.ReportMetric(r.statusLeg[1], "ms-status-leg-p99")
				b.ReportMetric(r.consumerRSS, "MiB-agent-rss")
				b.ReportMetric(r.agent, "s-agent-cpu")
				b.ReportMetric(r.providerRSS, "MiB-provider-agent-rss")
				b.ReportMetric(float64(r.notOffloaded), "pods-not-offloaded")
				b.ReportMetric(r.machineDirect, "s-machine-cpu-direct")
				b.ReportMetric(r.machineOffloaded, "s-machine-cpu-offloaded")
				b.ReportMetric(r.requestsDirect, "req-per-pod-direct")
				b.ReportMetric(r.requestsConsumer, "req-per-pod-consumer")
				b.ReportMetric(r.requestsProvider, "req-per-pod-provider")
				b.ReportMetric(r.perPodKiB(), "KiB-agent-per-pod")
				b.ReportMetric(r.ownPods(), "s-provider-agents-cpu-own-pods")
				b.ReportMetric(r.startupDirect[0], "ms-startup-direct-p50")
				b.ReportMetric(r.startupDirect[2], "ms-startup-direct-p99")
				b.ReportMetric(r.startupOffloaded[0], "ms-startup-offloaded-p50")
				b.ReportMetric(r.startupOffloaded[2], "ms-startup-offloaded-p99")
			}
		})
	}
	return results
}

// benchRuns parses OFFLOAD_BENCH_RUNS, how many times each of sizes runs
// on the same pair, by size: one number for every size, or one per size
// in the order of sizes (3,3,1); empty is once each.
func benchRuns(s string, sizes []int) (map[int]int, error) {
	fields := []string{"1"}
	if strings.TrimSpace(s) != "" {
		fields = strings.Split(s, ",")
	}
	if len(fields) != 1 && len(fields) != len(sizes) {
		return nil, fmt.Errorf("OFFLOAD_BENCH_RUNS=%q: want one number of runs, or one for each of the %d sizes (%s)", s, len(sizes), joinInts(sizes))
	}
	out := make(map[int]int, len(sizes))
	for i, n := range sizes {
		f := fields[min(i, len(fields)-1)]
		runs, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || runs <= 0 {
			return nil, fmt.Errorf("OFFLOAD_BENCH_RUNS=%q: %q is not a positive number of runs", s, f)
		}
		out[n] = runs
	}
	return out, nil
}

// runsArg is OFFLOAD_BENCH_RUNS for runs of sizes: one number when every
// size runs as often.
func runsArg(sizes []int, runs map[int]int) string {
	each := make([]int, len(sizes))
	for i, n := range sizes {
		each[i] = runs[n]
	}
	if len(slices.Compact(slices.Clone(each))) == 1 {
		return strconv.Itoa(each[0])
	}
	return joinInts(each)
}

// joinInts writes ns comma-separated.
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// perPodKiB is the consumer agent's memory per offloaded pod: its RSS with
// the N pods, less its RSS before any benchmark pod, ÷ N, in KiB.
func (r offloadResult) perPodKiB() float64 {
	return (r.consumerRSS - r.consumerIdleRSS) * 1024 / float64(r.n)
}

// ratio is P1 of r: offloaded time ÷ direct time.
func (r offloadResult) ratio() float64 { return r.offloaded.Seconds() / r.direct.Seconds() }

// medianRun returns the run of rs with the median P1 ratio (the lower
// middle one of an even number).
func medianRun(rs []offloadResult) offloadResult {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b offloadResult) int { return cmp.Compare(a.ratio(), b.ratio()) })
	return sorted[(len(sorted)-1)/2]
}

// spread is the median, minimum and maximum of f over rs.
type spread struct{ median, min, max float64 }

func spreadOf(rs []offloadResult, f func(offloadResult) float64) spread {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return spread{median: v[(len(v)-1)/2], min: v[0], max: v[len(v)-1]}
}

// format renders s with prec decimals, as "median [min–max]" when the runs
// differ.
func (s spread) format(prec int) string {
	if s.min == s.max {
		return strconv.FormatFloat(s.median, 'f', prec, 64)
	}
	return fmt.Sprintf("%s [%s–%s]", strconv.FormatFloat(s.median, 'f', prec, 64), strconv.FormatFloat(s.min, 'f', prec, 64), strconv.FormatFloat(s.max, 'f', prec, 64))
}

// bySize groups results by N, in increasing N.
func bySize(results []offloadResult) [][]offloadResult {
	var sizes []int
	groups := map[int][]offloadResult{}
	for _, r := range results {
		if _, ok := groups[r.n]; !ok {
			sizes = append(sizes, r.n)
		}
		groups[r.n] = append(groups[r.n], r)
	}
	slices.Sort(sizes)
	out := make([][]offloadResult, len(sizes))
	for i, n := range sizes {
		out[i] = groups[n]
	}
	return out
}

// benchSizes parses a comma-separated list of positive sizes; empty gives defaultSizes.
func benchSizes(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return defaultSizes, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("OFFLOAD_BENCH_N=%q: %q is not a positive number", s, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// selectedSizes keeps the sizes whose sub-benchmark N=<n> matches the
// third element of -test.bench (Offload/MODE/N=<n>), so that the clusters
// are sized for what runs. A pattern with a '/' inside brackets is taken
// as it is.
func selectedSizes(sizes []int) []int {
	f := flag.Lookup("test.bench")
	if f == nil {
		return sizes
	}
	parts := strings.Split(f.Value.String(), "/")
	if len(parts) < 3 {
		return sizes
	}
	re, err := regexp.Compile(parts[2])
	if err != nil {
		return sizes
	}
	var out []int
	for _, n := range sizes {
		if re.MatchString(fmt.Sprintf("N=%d", n)) {
			out = append(out, n)
		}
	}
	return out
}

// measure runs N replicas directly on the provider, then offloaded from
// the consumer, and cleans up after each.
func (p *pair) measure(ctx context.Context, b *testing.B, n int) offloadResult {
	b.Helper()
	timeout := 5*time.Minute + time.Duration(n)*100*time.Millisecond
	r := offloadResult{n: n, consumerIdleRSS: p.idleRSS}
	name := fmt.Sprintf("bench-%d", n)

	// What the provider's agents use with nothing to do, for as long as
	// idleWindow: the direct run's figure less this rate is what the
	// provider's own pods cost them.
	idle0 := componentCPU()
	time.Sleep(idleWindow)
	r.providerAgentsIdle = (agentsCPU(componentCPU()) - agentsCPU(idle0)) / idleWindow.Seconds()

	// Direct: the provider's own controllers, scheduler and kwok.
	direct := newTracker(n)
	stop := direct.watch(ctx, b, p.provider.Kube, directNS, name, local)
	busy0, steal0 := machineCPU()
	parts0 := componentCPU()
	requests := p.mustStartRequests(ctx, b)
	var minter *tokenMinter
	if kubeletTokens() {
		minter = startTokenMinter(ctx, b, p.provider.Kube, directNS, name, n)
	}
	profiledDirect := p.profileAPIServers(ctx, b, name+"-direct", profileWindow(b))
	begin := time.Now()
	r.direct = p.runDeployment(ctx, b, p.provider, directNS, name, n, direct, timeout)
	if minter != nil {
		// On a real node a pod runs once its token is there.
		if last := minter.wait(ctx, b, n, timeout).Sub(begin); last > r.direct {
			r.direct = last
		}
		fmt.Printf("N=%d direct: a service-account token requested for each pod, as kubelets do\n", n)
	}
	profiledDirect()
	busy1, steal1 := machineCPU()
	r.machineDirect, r.stealDirect = busy1-busy0, steal1-steal0
	parts1 := componentCPU()
	r.providerAgentsDirect = agentsCPU(parts1) - agentsCPU(parts0)
	r.startupDirect = direct.startup()
	fmt.Printf("N=%d direct, CPU seconds by process: %s; the machine %.1f, and %.1f stolen by the hypervisor\n", n, cpuDelta(parts0, parts1), r.machineDirect, r.stealDirect)
	fmt.Printf("N=%d direct, the provider's agents: %.2f CPU s, %.2f of it beyond their idle %.3f CPU s/s\n", n, r.providerAgentsDirect, r.ownPods(), r.providerAgentsIdle)
	if _, perPod, line, err := requests.perPod(ctx, n); err == nil {
		r.requestsDirect = perPod
		fmt.Printf("N=%d direct, API requests: %s\n", n, line)
	} else {
		b.Log(err)
	}
	p.deleteDeployment(ctx, b, p.provider, directNS, name, timeout)
	stop()
	// kwok goes on deleting the pods it already deleted for a while: that
	// work must not count against the offloaded run on the same CPUs.
	waitDeletesSettled(ctx, b, p.provider)
	b.Logf("N=%d direct: %d pods Running in %s", n, n, r.direct.Round(time.Millisecond))

	// Offloaded: the consumer's controllers and scheduler, the agent, and
	// the provider's kwok.
	p.waitCapacity(ctx, b, n)
	offloaded := newTracker(n)
	offloaded.node = p.virtualNode
	stopLocal := offloaded.watch(ctx, b, p.consumer.Kube, offloadedNS, name, local)
	stopRemote := offloaded.watch(ctx, b, p.provider.Kube, p.twin, name, remote)
	pid, err := machine.AgentPID(p.consumer.Name)
	if err != nil {
		b.Fatal(err)
	}
	restarts, _ := agentRestarts(ctx, p.consumer)
	cpu0, err := machine.CPUSeconds(pid)
	if err != nil {
		b.Fatal(err)
	}
	busy0, steal0 = machineCPU()
	parts0 = componentCPU()
	requests = p.mustStartRequests(ctx, b)
	profiled := p.profileAPIServers(ctx, b, name, profileWindow(b))
	r.offloaded = p.runDeployment(ctx, b, p.consumer, offloadedNS, name, n, offloaded, timeout)
	profiled()
	busy1, steal1 = machineCPU()
	r.machineOffloaded, r.stealOffloaded = busy1-busy0, steal1-steal0
	fmt.Printf("N=%d offloaded, CPU seconds by process: %s; the machine %.1f, and %.1f stolen by the hypervisor\n", n, cpuDelta(parts0, componentCPU()), r.machineOffloaded, r.stealOffloaded)
	r.agent = p.agentFigures(ctx, b, &r, pid, cpu0, restarts)
	// After agentFigures' pause: the requests of the last status updates count.
	if c, pr, line, err := requests.perPod(ctx, n); err == nil {
		r.requestsConsumer, r.requestsProvider = c, pr
		fmt.Printf("N=%d offloaded, API requests: %s\n", n, line)
	} else {
		b.Log(err)
	}
	r.overhead, r.createLeg, r.statusLeg, r.samples = offloaded.propagation()
	r.startupOffloaded = offloaded.startup()
	if r.notOffloaded = offloaded.elsewhere(); r.notOffloaded > 0 {
		b.Logf("N=%d: %d consumer pods were bound to a node other than %s (the webhook missed them?): the offloaded figures include them", n, r.notOffloaded, p.virtualNode)
	}
	// The burst's figures now: the deletion that follows may fail the run.
	fmt.Printf("N=%d, this run before its deletion:%s", n, summary([]offloadResult{r}))
	r.restartReady, r.restartRSS, r.restartOOM = p.restartAgent(ctx, b)
	fmt.Printf("N=%d offloaded, the consumer's agent deleted: its replacement Ready in %s; over the %s after, RSS peak %.0f MiB, restarts %d\n",
		n, r.restartReady.Round(time.Millisecond), restartWindow, r.restartRSS, r.restartOOM)
	profileAgent(ctx, b, p.consumer, name+"-restarted", "heap", "gc=1")
	restarts, _ = agentRestarts(ctx, p.consumer)
	profiling := p.profileAgentEvery(ctx, b, name+"-deleting", 20*time.Second)
	start := time.Now()
	p.deleteDeployment(ctx, b, p.consumer, offloadedNS, name, timeout)
	r.deleted = time.Since(start)
	profiling()
	if now, err := agentRestarts(ctx, p.consumer); err == nil {
		r.deleteRestarts = now - restarts
	}
	fmt.Printf("N=%d offloaded, deleting the Deployment: %s, consumer agent restarts meanwhile: %d\n", n, r.deleted.Round(time.Millisecond), r.deleteRestarts)
	stopLocal()
	stopRemote()
	waitDeletesSettled(ctx, b, p.provider)
	b.Logf("N=%d offloaded: %d pods Running on the consumer in %s; %d pods with every timestamp", n, n, r.offloaded.Round(time.Millisecond), r.samples)
	return r
}

// restartWindow is how long restartAgent watches a replacement agent once
// it is Ready: the time it takes to go through every pod again.
const restartWindow = 60 * time.Second

// restartAgent deletes the consumer's agent pod and returns how long its
// replacement took to be Ready, then its peak RSS (MiB) and its restarts
// over restartWindow: a restarted agent lists every pod of both sides and
// goes through each once.
func (p *pair) restartAgent(ctx context.Context, b *testing.B) (ready time.Duration, rss float64, restarts int32) {
	b.Helper()
	list, err := agentPods(ctx, p.consumer)
	if err != nil || len(list.Items) != 1 {
		b.Fatalf("the consumer's controller-manager pod: %v (%d pods)", err, len(list.Items))
	}
	old := list.Items[0].Name
	start := time.Now()
	if err := p.consumer.Kube.CoreV1().Pods(installNS).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	var current *corev1.Pod
	if err := poll(ctx, 5*time.Minute, func(ctx context.Context) (bool, string) {
		list, err := agentPods(ctx, p.consumer)
		if err != nil {
			return false, err.Error()
		}
		for i := range list.Items {
			if q := &list.Items[i]; q.Name != old && q.DeletionTimestamp == nil && podutils.IsPodReady(q) {
				current = q
				return true, ""
			}
		}
		return false, "no replacement Ready"
	}); err != nil {
		b.Fatalf("the consumer's agent after its deletion: %v", err)
	}
	ready = time.Since(start)
	end := time.Now().Add(restartWindow)
	for time.Now().Before(end) {
		if pid, err := machine.AgentPID(p.consumer.Name); err == nil {
			if m, err := machine.RSSMiB(pid); err == nil {
				rss = max(rss, m)
			}
		}
		time.Sleep(time.Second) // a sampling interval, not a wait for a state
	}
	if q, err := p.consumer.Kube.CoreV1().Pods(installNS).Get(ctx, current.Name, metav1.GetOptions{}); err == nil {
		for _, st := range q.Status.ContainerStatuses {
			restarts += st.RestartCount
		}
	}
	return ready, rss, restarts
}

// profileAgentEvery, when the benchmark profiles, takes a heap profile of
// the consumer's agent every interval in the background, as
// NAME-NN-CLUSTER-offload-agent-heap.pprof; stop stops it.
func (p *pair) profileAgentEvery(ctx context.Context, b *testing.B, name string, interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for i := 1; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				profileAgent(ctx, b, p.consumer, fmt.Sprintf("%s-%02d", name, i), "heap", "gc=1")
			}
		}
	}()
	return func() { cancel(); <-done }
}

// mustStartRequests reads both API servers' request counts, or fails b.
func (p *pair) mustStartRequests(ctx context.Context, b *testing.B) *requestMeter {
	b.Helper()
	m, err := p.startRequests(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// agentFigures reads the agents' RSS with N pods reflected and returns the
// CPU seconds the consumer's agent used since cpu0; NaN when it restarted.
func (p *pair) agentFigures(ctx context.Context, b *testing.B, r *offloadResult, pid int, cpu0 float64, restarts int32) float64 {
	b.Helper()
	cpu1, err := machine.CPUSeconds(pid)
	if err != nil {
		b.Logf("the consumer's agent (pid %d) is gone: %v", pid, err)
		cpu1 = math.NaN()
	}
	// Steady state: the status updates of the last pods have settled.
	time.Sleep(5 * time.Second)
	if now, _ := agentRestarts(ctx, p.consumer); now != restarts {
		b.Logf("the consumer's agent restarted during the run (%d restarts before, %d after): its figures are not valid", restarts, now)
		cpu1 = math.NaN()
	}
	if cur, err := machine.AgentPID(p.consumer.Name); err == nil {
		r.consumerRSS, _ = machine.RSSMiB(cur)
		r.consumerAnonRSS, _ = machine.AnonRSSMiB(cur)
	}
	profileAgent(ctx, b, p.consumer, fmt.Sprintf("bench-%d", r.n), "heap", "gc=1")
	if prov, err := machine.AgentPID(p.provider.Name); err == nil {
		r.providerRSS, _ = machine.RSSMiB(prov)
	}
	return cpu1 - cpu0
}

// runDeployment creates the Deployment and returns the time until the
// tracker has seen n of its pods Running.
func (p *pair) runDeployment(ctx context.Context, b *testing.B, c *localcluster.Cluster, ns, name string, n int, t *tracker, timeout time.Duration) time.Duration {
	b.Helper()
	start := time.Now()
	if _, err := c.Kube.AppsV1().Deployments(ns).Create(ctx, benchDeployment(name, n), metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating Deployment %s/%s in %s: %v", ns, name, c.Name, err)
	}
	select {
	case <-t.done:
	case <-time.After(timeout):
		b.Fatalf("%s: %d of %d pods of %s/%s Running after %s", c.Name, t.runningCount(), n, ns, name, timeout)
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	}
	return t.doneAt.Sub(start)
}

// deleteDeployment deletes the Deployment name from ns of c and waits until
// its pods are gone, and for the offloaded one also the remote pods.
func (p *pair) deleteDeployment(ctx context.Context, b *testing.B, c *localcluster.Cluster, ns, name string, timeout time.Duration) {
	b.Helper()
	err := c.Kube.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if err := ignoreNotFound(err); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := waitNoPods(ctx, c, ns, "app="+name, timeout); err != nil {
		b.Fatal(err)
	}
	if c == p.consumer {
		if err := waitNoPods(ctx, p.provider, p.twin, "app="+name, timeout); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("deleting %s/%s and its pods: %s", ns, name, time.Since(start).Round(time.Millisecond))
}

// benchDeployment is a Deployment of n replicas with tiny requests.
func benchDeployment(name string, n int) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(n)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					// The provider's fake nodes are tainted: the direct run
					// tolerates it explicitly, the offloaded one through the
					// peering (the consumer's own tolerations stay home).
					Tolerations: []corev1.Toleration{localcluster.FakeNodeToleration},
					Containers: []corev1.Container{{
						Name:            "pause",
						Image:           benchImage,
						ImagePullPolicy: corev1.PullNever,
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU:    resource.MustParse("1m"),
							corev1.ResourceMemory: resource.MustParse("1Mi"),
						}},
					}},
				},
			},
		},
	}
}

// side says which cluster a tracker's watch observes.
type side int

const (
	// local is where the Deployment was created.
	local side = iota
	// remote is the provider's twin namespace.
	remote
)

// podTimes are when the bench process first saw each step of one pod.
type podTimes struct {
	created, bound, remoteCreated, remoteRunning, running time.Time
}

// tracker records pod events from watches on both sides, and closes done
// when want local pods are Running.
type tracker struct {
	want int
	// node, when set, is the node the local pods should be bound to.
	node   string
	done   chan struct{}
	doneAt time.Time

	mu      sync.Mutex
	pods    map[string]*podTimes
	running map[string]bool
	// misplaced are the local pods bound to a node other than node.
	misplaced map[string]bool
}

func newTracker(want int) *tracker {
	return &tracker{want: want, done: make(chan struct{}), pods: map[string]*podTimes{}, running: map[string]bool{}, misplaced: map[string]bool{}}
}

// watch starts an informer on the pods app=name in ns and feeds the tracker;
// the returned func stops it.
func (t *tracker) watch(ctx context.Context, b *testing.B, kube kubernetes.Interface, ns, name string, s side) func() {
	b.Helper()
	ctx, cancel := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=" + name }))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observe(s, obj, false) },
		UpdateFunc: func(_, obj any) { t.observe(s, obj, false) },
		DeleteFunc: func(obj any) { t.observe(s, obj, true) },
	})
	if err != nil {
		b.Fatal(err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		b.Fatalf("watching pods in %s: the cache did not sync", ns)
	}
	return func() {
		cancel()
		f.Shutdown()
	}
}

func (t *tracker) observe(s side, obj any, deleted bool) {
	now := time.Now()
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	pt := t.pods[pod.Name]
	if pt == nil {
		pt = &podTimes{}
		t.pods[pod.Name] = pt
	}
	isRunning := !deleted && pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning
	switch s {
	case local:
		if pt.created.IsZero() && !deleted {
			pt.created = now
		}
		if pt.bound.IsZero() && pod.Spec.NodeName != "" {
			pt.bound = now
			if t.node != "" && pod.Spec.NodeName != t.node {
				t.misplaced[pod.Name] = true
			}
		}
		if isRunning && pt.running.IsZero() {
			pt.running = now
		}
		if isRunning {
			t.running[pod.Name] = true
		} else {
			delete(t.running, pod.Name)
		}
		if t.doneAt.IsZero() && len(t.running) >= t.want {
			t.doneAt = now
			close(t.done)
		}
	case remote:
		if pt.remoteCreated.IsZero() && !deleted {
			pt.remoteCreated = now
		}
		if isRunning && pt.remoteRunning.IsZero() {
			pt.remoteRunning = now
		}
	}
}

func (t *tracker) runningCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.running)
}

// elsewhere returns how many local pods were bound to a node other than node.
func (t *tracker) elsewhere() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.misplaced)
}

// propagation returns p50 and p99, in ms, of the per-pod overhead
// (running - bound) - (remoteRunning - remoteCreated), of the create leg
// remoteCreated - bound and of the status leg running - remoteRunning,
// over the pods seen at every step, and their number.
func (t *tracker) propagation() (overhead, createLeg, statusLeg [2]float64, samples int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var o, c, s []time.Duration
	for _, p := range t.pods {
		if p.bound.IsZero() || p.remoteCreated.IsZero() || p.remoteRunning.IsZero() || p.running.IsZero() {
			continue
		}
		o = append(o, p.running.Sub(p.bound)-p.remoteRunning.Sub(p.remoteCreated))
		c = append(c, p.remoteCreated.Sub(p.bound))
		s = append(s, p.running.Sub(p.remoteRunning))
	}
	return percentiles(o), percentiles(c), percentiles(s), len(o)
}

// startup returns the pod startup SLI of the local pods: p50, p90 and p99,
// in ms, of running - created, over the pods that reached Running. As
// Kubernetes' own pod startup SLI (sig-scalability's pod_startup_latency),
// it is measured from the pod's creation to Running as a watch observed
// them; the image is never pulled (kwok). Creation is when the watch first
// saw the pod, not its creationTimestamp, which has only whole seconds.
func (t *tracker) startup() [3]float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var d []time.Duration
	for _, p := range t.pods {
		if !p.created.IsZero() && !p.running.IsZero() {
			d = append(d, p.running.Sub(p.created))
		}
	}
	q := quantiles(d, 0.50, 0.90, 0.99)
	return [3]float64{q[0], q[1], q[2]}
}

// percentiles returns the nearest-rank p50 and p99 of d in ms; NaN when empty.
func percentiles(d []time.Duration) [2]float64 {
	q := quantiles(d, 0.50, 0.99)
	return [2]float64{q[0], q[1]}
}

// quantiles returns the nearest-rank quantiles qs of d in ms; NaN when d
// is empty. It sorts d.
func quantiles(d []time.Duration, qs ...float64) []float64 {
	out := make([]float64, len(qs))
	slices.Sort(d)
	for i, q := range qs {
		if len(d) == 0 {
			out[i] = math.NaN()
			continue
		}
		k := int(math.Ceil(q*float64(len(d)))) - 1
		out[i] = float64(d[max(k, 0)]) / float64(time.Millisecond)
	}
	return out
}

// summary renders the results as a table.
func summary(results []offloadResult) string {
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "\nN\tdirect s\toffloaded s\tratio\toverhead p50/p99 ms\tcreate leg p50/p99 ms\tstatus leg p50/p99 ms\tpods timed\tnot offloaded\tagent RSS (anonymous) MiB\tKiB/pod\tagent CPU s\tprovider agent RSS MiB\tprovider agents CPU s direct (beyond idle)\tmachine CPU s direct/offloaded (stolen)\tAPI requests/pod direct, consumer/provider\t\n")
	for _, r := range results {
		fmt.Fprintf(w, "%d\t%.1f\t%.1f\t%.2f\t%.0f/%.0f\t%.0f/%.0f\t%.0f/%.0f\t%d\t%d\t%.0f (%.0f)\t%.1f\t%.1f\t%.0f\t%.2f (%.2f)\t%.1f/%.1f (%.1f/%.1f)\t%.1f, %.1f/%.1f\t\n",
			r.n, r.direct.Seconds(), r.offloaded.Seconds(), r.ratio(),
			r.overhead[0], r.overhead[1], r.createLeg[0], r.createLeg[1], r.statusLeg[0], r.statusLeg[1],
			r.samples, r.notOffloaded, r.consumerRSS, r.consumerAnonRSS, r.perPodKiB(), r.agent, r.providerRSS, r.providerAgentsDirect, r.ownPods(), r.machineDirect, r.machineOffloaded, r.stealDirect, r.stealOffloaded,
			r.requestsDirect, r.requestsConsumer, r.requestsProvider)
	}
	_ = w.Flush()
	sb.WriteString("\npod startup SLI, creation to Running as watched, ms:\n")
	w = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "N\tdirect p50\tp90\tp99\toffloaded p50\tp90\tp99\t\n")
	for _, r := range results {
		fmt.Fprintf(w, "%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", r.n,
			r.startupDirect[0], r.startupDirect[1], r.startupDirect[2], r.startupOffloaded[0], r.startupOffloaded[1], r.startupOffloaded[2])
	}
	_ = w.Flush()
	for _, r := range results {
		if r.restartReady > 0 {
			fmt.Fprintf(&sb, "N=%d: the consumer's agent, deleted with the pods offloaded, was Ready again in %s; over the %s after, RSS peak %.0f MiB, %d restarts\n",
				r.n, r.restartReady.Round(100*time.Millisecond), restartWindow, r.restartRSS, r.restartOOM)
		}
		if r.deleted > 0 {
			fmt.Fprintf(&sb, "N=%d: deleting the offloaded Deployment took %s; the consumer's agent restarted %d times meanwhile\n", r.n, r.deleted.Round(time.Second), r.deleteRestarts)
		}
	}
	for _, rs := range bySize(results) {
		if len(rs) < 2 {
			continue
		}
		fmt.Fprintf(&sb, "N=%d over %d runs, median [min–max]: P1 %s; direct %s s; offloaded %s s; P2 overhead p50 %s ms, p99 %s ms; consumer agent RSS %s MiB\n",
			rs[0].n, len(rs), spreadOf(rs, offloadResult.ratio).format(2),
			spreadOf(rs, func(r offloadResult) float64 { return r.direct.Seconds() }).format(1),
			spreadOf(rs, func(r offloadResult) float64 { return r.offloaded.Seconds() }).format(1),
			spreadOf(rs, func(r offloadResult) float64 { return r.overhead[0] }).format(0),
			spreadOf(rs, func(r offloadResult) float64 { return r.overhead[1] }).format(0),
			spreadOf(rs, func(r offloadResult) float64 { return r.consumerRSS }).format(0))
	}
	fmt.Fprintf(&sb, "agent controller-manager limits: memory %s, cpu %s\n", chartMemoryLimit(), agentCPULimit)
	return sb.String()
}

// sequentialPods is how many pods P2-one-at-a-time offloads.
const sequentialPods = 50

// oneAtATime scales an offloaded Deployment from 0 to m one replica at a
// time, each once the previous one is Running on the consumer, and returns
// the propagation figures of its pods.
func (p *pair) oneAtATime(ctx context.Context, b *testing.B, m int) (overhead, createLeg, statusLeg [2]float64, samples int) {
	b.Helper()
	const name = "one-at-a-time"
	p.waitCapacity(ctx, b, m)
	t := newTracker(m)
	t.node = p.virtualNode
	stopLocal := t.watch(ctx, b, p.consumer.Kube, offloadedNS, name, local)
	stopRemote := t.watch(ctx, b, p.provider.Kube, p.twin, name, remote)
	deployments := p.consumer.Kube.AppsV1().Deployments(offloadedNS)
	if _, err := deployments.Create(ctx, benchDeployment(name, 0), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	for i := 1; i <= m; i++ {
		patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, i)
		if _, err := deployments.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := poll(ctx, time.Minute, func(context.Context) (bool, string) {
			n := t.runningCount()
			return n >= i, fmt.Sprintf("%d of %d Running", n, i)
		}); err != nil {
			b.Fatalf("one pod at a time: %v", err)
		}
	}
	overhead, createLeg, statusLeg, samples = t.propagation()
	stopLocal()
	stopRemote()
	p.deleteDeployment(ctx, b, p.consumer, offloadedNS, name, 5*time.Minute)
	return overhead, createLeg, statusLeg, samples
}

// machineCPU is the CPU time the machine has spent busy since boot (user,
// nice, system, irq and softirq: not idle, waiting for I/O or stolen),
// and the time the hypervisor ran other machines while this one had work
// (steal), from /proc/stat; NaN when unreadable.
func machineCPU() (busy, steal float64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return math.NaN(), math.NaN()
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return math.NaN(), math.NaN()
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice],
	// guest time being counted in user already.
	for i, f := range fields[1:8] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return math.NaN(), math.NaN()
		}
		switch i {
		case 3, 4: // idle, iowait
			continue
		case 7:
			steal = v
		default:
			busy += v
		}
	}
	return busy / machine.ClockTicks, steal / machine.ClockTicks
}

func TestRunsAreOneNumberForEverySizeOrOneForEach(t *testing.T) {
	sizes := []int{1000, 5000, 10000}
	for _, tc := range []struct {
		env  string
		want map[int]int
		arg  string
	}{
		{"", map[int]int{1000: 1, 5000: 1, 10000: 1}, "1"},
		{"3", map[int]int{1000: 3, 5000: 3, 10000: 3}, "3"},
		{"3, 3,1", map[int]int{1000: 3, 5000: 3, 10000: 1}, "3,3,1"},
	} {
		got, err := benchRuns(tc.env, sizes)
		if err != nil {
			t.Fatalf("OFFLOAD_BENCH_RUNS=%q: %v", tc.env, err)
		}
		if !maps.Equal(got, tc.want) {
			t.Errorf("OFFLOAD_BENCH_RUNS=%q gave %v, want %v", tc.env, got, tc.want)
		}
		if arg := runsArg(sizes, got); arg != tc.arg {
			t.Errorf("OFFLOAD_BENCH_RUNS=%q is reported as %q, want %q", tc.env, arg, tc.arg)
		}
	}
	for env, want := range map[string]string{
		"3,1":   "want one number of runs, or one for each of the 3 sizes (1000,5000,10000)",
		"3,0,1": `"0" is not a positive number of runs`,
		"x":     `"x" is not a positive number of runs`,
	} {
		if _, err := benchRuns(env, sizes); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("OFFLOAD_BENCH_RUNS=%q: error %v, want one saying %s", env, err, want)
		}
	}
}

func TestTheProviderHasNodesForTheLargestNUnlessMoreAreAskedFor(t *testing.T) {
	for env, want := range map[string]int{"": 21, "21": 21, " 201 ": 201} {
		got, err := benchFakeNodes(env, 1000)
		if err != nil || got != want {
			t.Errorf("%s=%q for 1000 pods: %d nodes (%v), want %d", fakeNodesEnv, env, got, err, want)
		}
	}
	for _, env := range []string{"20", "x", "-1"} {
		if _, err := benchFakeNodes(env, 1000); err == nil || !strings.Contains(err.Error(), "want a number of nodes of at least 21, enough for 1000 pods") {
			t.Errorf("%s=%q for 1000 pods: error %v, want one saying at least 21", fakeNodesEnv, env, err)
		}
	}
}

func TestTheMachineCPUAndWhatTheHypervisorStoleAreRead(t *testing.T) {
	busy0, steal0 := machineCPU()
	if math.IsNaN(busy0) || math.IsNaN(steal0) || busy0 <= 0 || steal0 < 0 {
		t.Fatalf("machineCPU() = %v busy, %v stolen: want the seconds since boot", busy0, steal0)
	}
	deadline := time.Now().Add(10 * time.Second)
	for busy1, _ := machineCPU(); busy1 <= busy0; busy1, _ = machineCPU() {
		if time.Now().After(deadline) {
			t.Fatalf("the machine's busy CPU time stayed %v while this test spun", busy0)
		}
		for i := 0; i < 1e6; i++ {
			_ = math.Sqrt(float64(i))
		}
	}
	if _, steal1 := machineCPU(); steal1 < steal0 {
		t.Errorf("the stolen CPU time went back from %v to %v", steal0, steal1)
	}
}
