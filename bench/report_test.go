package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

// modeResults are the results of one CPU mode.
type modeResults struct {
	mode    cpuMode
	results []offloadResult
	// peer and status are P3 and P5.
	peer, status time.Duration
	// sequential is P2 one pod at a time, on the idle pair.
	sequential sequentialP2
	// fakeNodes is how many kwok nodes the provider had, for every size.
	fakeNodes int
	// kubeletTokens says the direct run requested its pods' tokens as
	// kubelets do (kubeletTokens).
	kubeletTokens bool
}

// writeReport writes path, a Markdown page with the machine, the versions,
// the command, two tables per CPU mode (the figures, the pod startup SLI)
// and three charts drawn with gonum/plot next to it (<path without
// .md>/time.svg, rss.svg and startup.svg): the time until N pods are
// Running, direct and offloaded, the agents' RSS, and the startup SLI's
// p50 and p99, against N.
func writeReport(path, command string, all []modeResults) error {
	dir := strings.TrimSuffix(path, filepath.Ext(path))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	timeChart, rssChart := filepath.Join(dir, "time.svg"), filepath.Join(dir, "rss.svg")
	if err := drawChart(timeChart, "Time until N pods are Running", "seconds", all, func(r offloadResult) map[string]float64 {
		return map[string]float64{"direct": r.direct.Seconds(), "offloaded": r.offloaded.Seconds()}
	}); err != nil {
		return err
	}
	if err := drawChart(rssChart, "Agent memory (RSS) after N pods", "MiB", all, func(r offloadResult) map[string]float64 {
		return map[string]float64{"consumer agent": r.consumerRSS, "provider agent": r.providerRSS}
	}); err != nil {
		return err
	}
	sliChart := filepath.Join(dir, "startup.svg")
	if err := drawChart(sliChart, "Pod startup SLI: creation to Running, p50 and p99", "ms", all, func(r offloadResult) map[string]float64 {
		return map[string]float64{"direct p50": r.startupDirect[0], "direct p99": r.startupDirect[2],
			"offloaded p50": r.startupOffloaded[0], "offloaded p99": r.startupOffloaded[2]}
	}); err != nil {
		return err
	}

	var b strings.Builder
	versions, _ := tools.Versions()
	cpus, _ := machine.HostCPUs()
	fmt.Fprintf(&b, "# Benchmarks\n\nWritten by `BenchmarkOffload` (bench/offload_bench_test.go) on %s; do not edit by hand.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- Command: `%s`\n", command)
	fmt.Fprintf(&b, "- Machine: %s/%s, CPUs %s (%d), Kubernetes %s, kwok %s, Go %s\n", runtime.GOOS, runtime.GOARCH, cpus, runtime.NumCPU(), versions["KUBE_VERSION"], versions["KWOK_VERSION"], runtime.Version())
	b.WriteString("- P1: time until N pods of one Deployment are Running, offloaded from the consumer ÷ created directly on the provider; P2: per-pod overhead (consumer Running − bound, minus remote Running − remote created); P3: `peer out-of-band` until the virtual node is Ready; P4: agent RSS (VmRSS; anonymous: less the resident pages of the agent's binary); P5: `kubectl offload status` wall time.\n")
	b.WriteString("- Pod startup SLI: p50, p90 and p99 of each pod's time from creation to Running, as a watch of its cluster observed both (Kubernetes' pod startup SLI, without image pulls: kwok runs no image); direct pods on the provider, offloaded ones on the consumer.\n")
	b.WriteString("- KiB per pod: the consumer agent's RSS with the N pods, less its RSS before the first benchmark pod, ÷ N. Provider agents CPU s: what every offload-agent process of the provider used during the direct run, where no pod is a tenant's, and in brackets what is left of it once their idle rate (measured for 10 s before the run) is taken out: what the provider's own pods cost them.\n")
	b.WriteString("- Every benchmark pod runs on a kwok fake node of the provider; the agents run on real nodes.\n\n")
	base := filepath.Base(dir)
	fmt.Fprintf(&b, "![%s](%s)\n![%s](%s)\n![%s](%s)\n", "time until Running", filepath.Join(base, "time.svg"), "agent RSS", filepath.Join(base, "rss.svg"),
		"pod startup SLI", filepath.Join(base, "startup.svg"))
	for _, m := range all {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n", m.mode.name, m.mode.describe())
		if m.fakeNodes > 0 {
			why := "two per 100 pods of the largest N, and one"
			if os.Getenv(fakeNodesEnv) != "" {
				why = "`" + fakeNodesEnv + "`"
			}
			fmt.Fprintf(&b, "The provider has %d kwok nodes for every N below (%s): its scheduler's work per pod grows with them, and so does the direct time. Compare a P1 only with one measured on as many nodes.\n\n", m.fakeNodes, why)
		}
		if m.kubeletTokens {
			b.WriteString("The direct run requested a service-account token for each pod, as a kubelet does before it starts a pod (kwok's nodes request none), as the offloaded run does through the consumer's agent. Compare a P1 only with one measured the same way; `OFFLOAD_BENCH_KUBELET_TOKENS=0` measures without them.\n\n")
		} else {
			b.WriteString("The direct run requested no service-account token (`OFFLOAD_BENCH_KUBELET_TOKENS=0`): kwok's nodes request none, while the offloaded run requests each pod's through the consumer's agent, as a real node's kubelet would. Compare a P1 only with one measured the same way.\n\n")
		}
		b.WriteString("| N | runs | direct s | offloaded s | P1 ratio | P2 overhead p50 ms | P2 overhead p99 ms | consumer agent RSS MiB | anonymous MiB | KiB per pod | agent CPU s | provider agent RSS MiB | provider agents CPU s, direct run (beyond idle) | machine CPU s direct/offloaded (stolen by the hypervisor) | API requests per pod: direct, consumer/provider |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, rs := range bySize(m.results) {
			med := func(f func(offloadResult) float64) float64 { return spreadOf(rs, f).median }
			fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %s | %s | %s | %.0f | %.1f | %.1f | %.0f | %.2f (%.2f) | %.1f/%.1f (%.1f/%.1f) | %.1f, %.1f/%.1f |\n", rs[0].n, len(rs),
				spreadOf(rs, func(r offloadResult) float64 { return r.direct.Seconds() }).format(1),
				spreadOf(rs, func(r offloadResult) float64 { return r.offloaded.Seconds() }).format(1),
				spreadOf(rs, offloadResult.ratio).format(2),
				spreadOf(rs, func(r offloadResult) float64 { return r.overhead[0] }).format(0),
				spreadOf(rs, func(r offloadResult) float64 { return r.overhead[1] }).format(0),
				spreadOf(rs, func(r offloadResult) float64 { return r.consumerRSS }).format(0),
				med(func(r offloadResult) float64 { return r.consumerAnonRSS }), med(offloadResult.perPodKiB),
				med(func(r offloadResult) float64 { return r.agent }), med(func(r offloadResult) float64 { return r.providerRSS }),
				med(func(r offloadResult) float64 { return r.providerAgentsDirect }), med(offloadResult.ownPods),
				med(func(r offloadResult) float64 { return r.machineDirect }), med(func(r offloadResult) float64 { return r.machineOffloaded }),
				med(func(r offloadResult) float64 { return r.stealDirect }), med(func(r offloadResult) float64 { return r.stealOffloaded }),
				med(func(r offloadResult) float64 { return r.requestsDirect }), med(func(r offloadResult) float64 { return r.requestsConsumer }),
				med(func(r offloadResult) float64 { return r.requestsProvider }))
		}
		b.WriteString("\nWith several runs a cell is the median [minimum–maximum]; the columns without a range are medians.\n")
		b.WriteString("\nPod startup SLI, creation to Running, ms:\n\n| N | direct p50 | direct p90 | direct p99 | offloaded p50 | offloaded p90 | offloaded p99 |\n|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, rs := range bySize(m.results) {
			fmt.Fprintf(&b, "| %d |", rs[0].n)
			for _, f := range []func(offloadResult) float64{
				func(r offloadResult) float64 { return r.startupDirect[0] }, func(r offloadResult) float64 { return r.startupDirect[1] },
				func(r offloadResult) float64 { return r.startupDirect[2] }, func(r offloadResult) float64 { return r.startupOffloaded[0] },
				func(r offloadResult) float64 { return r.startupOffloaded[1] }, func(r offloadResult) float64 { return r.startupOffloaded[2] },
			} {
				fmt.Fprintf(&b, " %s |", spreadOf(rs, f).format(0))
			}
			b.WriteString("\n")
		}
		b.WriteString("\nThe consumer's agent with the N pods offloaded: deleted, until its replacement is Ready, then that replacement's peak RSS and restarts over the next " + restartWindow.String() + "; then the offloaded Deployment deleted, until its pods are gone on both sides, and the agent's restarts meanwhile (an OOM kill, say):\n\n| N | restart: Ready s | peak RSS MiB | restarts | deletion s | restarts |\n|---:|---:|---:|---:|---:|---:|\n")
		for _, rs := range bySize(m.results) {
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s |\n", rs[0].n,
				spreadOf(rs, func(r offloadResult) float64 { return r.restartReady.Seconds() }).format(1),
				spreadOf(rs, func(r offloadResult) float64 { return r.restartRSS }).format(0),
				spreadOf(rs, func(r offloadResult) float64 { return float64(r.restartOOM) }).format(0),
				spreadOf(rs, func(r offloadResult) float64 { return r.deleted.Seconds() }).format(0),
				spreadOf(rs, func(r offloadResult) float64 { return float64(r.deleteRestarts) }).format(0))
		}
		if q := m.sequential; q.samples > 0 {
			fmt.Fprintf(&b, "\nP2 one pod at a time, on the idle pair (%d pods, each once the previous one is Running): overhead p50 %.0f ms, p99 %.0f ms; create leg p50 %.0f, p99 %.0f ms; status leg p50 %.0f, p99 %.0f ms.\n",
				q.samples, q.overhead[0], q.overhead[1], q.createLeg[0], q.createLeg[1], q.statusLeg[0], q.statusLeg[1])
		}
		fmt.Fprintf(&b, "\nP3 peer out-of-band to a Ready virtual node: %s. P5 `kubectl offload status`: %s.\n", m.peer.Round(time.Millisecond), m.status.Round(time.Millisecond))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// drawChart draws one line per mode and series that values gives, against N.
func drawChart(path, title, unit string, all []modeResults, values func(offloadResult) map[string]float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "N (pods)"
	p.Y.Label.Text = unit
	p.Legend.Top = true
	var lines []any
	for _, m := range all {
		series := map[string]plotter.XYs{}
		var names []string
		// One point per N: the median of its runs.
		for _, rs := range bySize(m.results) {
			for name := range values(rs[0]) {
				if _, ok := series[name]; !ok {
					names = append(names, name)
				}
				v := spreadOf(rs, func(r offloadResult) float64 { return values(r)[name] }).median
				series[name] = append(series[name], plotter.XY{X: float64(rs[0].n), Y: v})
			}
		}
		slices.Sort(names)
		for _, name := range names {
			lines = append(lines, m.mode.name+" "+name, series[name])
		}
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return fmt.Errorf("drawing %s: %w", path, err)
	}
	return p.Save(16*vg.Centimeter, 10*vg.Centimeter, path)
}

func TestTheReportHasTheTablesAndTheCharts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	results := []offloadResult{
		{n: 100, direct: 2 * time.Second, offloaded: 3 * time.Second, consumerRSS: 80, consumerAnonRSS: 50, consumerIdleRSS: 70, providerRSS: 60,
			startupDirect: [3]float64{400, 700, 900}, startupOffloaded: [3]float64{600, 900, 1200}, providerAgentsDirect: 0.4, providerAgentsIdle: 0.05,
			restartReady: 2300 * time.Millisecond, restartRSS: 95, deleted: 40 * time.Second,
			machineDirect: 3, machineOffloaded: 5, stealDirect: 0.5, stealOffloaded: 1.5},
		{n: 1000, direct: 10 * time.Second, offloaded: 11 * time.Second, consumerRSS: 130, providerRSS: 70},
		{n: 1000, direct: 10 * time.Second, offloaded: 13 * time.Second, consumerRSS: 140, providerRSS: 70},
		{n: 1000, direct: 10 * time.Second, offloaded: 12 * time.Second, consumerRSS: 120, providerRSS: 70},
	}
	all := []modeResults{
		{mode: cpuMode{name: "isolated", consumer: "0", provider: "1"}, results: results, peer: time.Second, status: 90 * time.Millisecond,
			sequential: sequentialP2{overhead: [2]float64{47, 145}, createLeg: [2]float64{30, 90}, statusLeg: [2]float64{17, 60}, samples: 50}, fakeNodes: 21, kubeletTokens: true},
		{mode: cpuMode{name: "shared"}, results: results},
	}
	if err := writeReport(path, "make bench-offload", all); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"`make bench-offload`", "## isolated", "## shared", "| 100 | 1 | 2.0 | 3.0 | 1.50 |", "| 1000 | 3 | 10.0 | 12.0 [11.0–13.0] | 1.20 [1.10–1.30] |", "(benchmarks/time.svg)", "(benchmarks/rss.svg)", "P5 `kubectl offload status`: 90ms",
		"| 100 | 1 | 2.0 | 3.0 | 1.50 | 0 | 0 | 80 | 50 | 102.4 | 0.0 | 60 | 0.40 (0.30) |", "| 100 | 400 | 700 | 900 | 600 | 900 | 1200 |", "(benchmarks/startup.svg)", "| 100 | 2.3 | 95 | 0 | 40 | 0 |", "The provider has 21 kwok nodes for every N below", "The direct run requested a service-account token for each pod",
		"The direct run requested no service-account token (`OFFLOAD_BENCH_KUBELET_TOKENS=0`)", "| 3.0/5.0 (0.5/1.5) |",
		"P2 one pod at a time, on the idle pair (50 pods, each once the previous one is Running): overhead p50 47 ms, p99 145 ms; create leg p50 30, p99 90 ms; status leg p50 17, p99 60 ms."} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
	for _, chart := range []string{"time.svg", "rss.svg", "startup.svg"} {
		svg, err := os.ReadFile(filepath.Join(filepath.Dir(path), "benchmarks", chart))
		if err != nil || !strings.Contains(string(svg), "<svg") || !strings.Contains(string(svg), "isolated offloaded") && chart == "time.svg" {
			t.Errorf("chart %s: %v, %d bytes", chart, err, len(svg))
		}
	}
}
