package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// runOptions are the flags of conformance run.
type runOptions struct {
	kubeconfig, offload, e2e, results, focus string
	shards                                   int
}

// serial matches the tests that must run alone.
var serial = regexp.MustCompile(`\[Serial\]`)

// run gates the e2e namespaces, runs the selected tests, parallel ones in
// shards then serial ones alone, and prints the summary to stdout (and
// results/summary.txt).
func (o *runOptions) run(ctx context.Context) error {
	if err := os.MkdirAll(o.results, 0o755); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("reading kubeconfig %s: %w", o.kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	tests, err := listTests(ctx, o.e2e)
	if err != nil {
		return err
	}
	if len(tests) == 0 {
		return fmt.Errorf("%s lists none of the selected tests", o.e2e)
	}
	var focus *regexp.Regexp
	if o.focus != "" {
		if focus, err = regexp.Compile(o.focus); err != nil {
			return fmt.Errorf("parsing -focus: %w", err)
		}
	}
	var parallel, alone, selected []string
	for _, t := range tests {
		if focus != nil && !focus.MatchString(t) {
			continue
		}
		selected = append(selected, t)
		switch {
		case excluded(t) != "":
		case serial.MatchString(t):
			alone = append(alone, t)
		default:
			parallel = append(parallel, t)
		}
	}

	if err := installGate(ctx, kube); err != nil {
		return err
	}
	gateLog, err := os.Create(filepath.Join(o.results, "gate.log"))
	if err != nil {
		return err
	}
	defer gateLog.Close()
	g := &gate{kube: kube, offload: []string{o.offload, "--kubeconfig", o.kubeconfig}, log: gateLog}
	gateCtx, stopGate := context.WithCancel(ctx)
	defer stopGate()
	gateDone := make(chan error, 1)
	go func() { gateDone <- g.run(gateCtx) }()

	start := time.Now()
	fmt.Fprintf(os.Stderr, "%s running %d tests, %d at once, then %d serial tests one at a time (logs and reports in %s)\n",
		time.Now().Format(time.TimeOnly), len(parallel), o.shards, len(alone), o.results)
	shards := runShards(ctx, o.e2e, o.kubeconfig, o.results, parallel, o.shards)
	if len(alone) > 0 {
		serialDir := filepath.Join(o.results, "serial")
		if err := os.MkdirAll(serialDir, 0o755); err != nil {
			return err
		}
		shards = append(shards, runShards(ctx, o.e2e, o.kubeconfig, serialDir, alone, 1)...)
	}
	took := time.Since(start)
	stopGate()
	gateErr := <-gateDone
	results := readResults(shards)
	summary, err := os.Create(filepath.Join(o.results, "summary.txt"))
	if err != nil {
		return err
	}
	defer summary.Close()
	offloaded, gateFailures := g.summary()
	report(io.MultiWriter(os.Stdout, summary), selected, results, took, offloaded)
	for _, s := range shards {
		if s.err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", s.tests[0], s.err)
		}
	}
	if gateFailures != nil {
		fmt.Fprintf(os.Stderr, "offloading e2e namespaces failed (see %s):\n%v\n", gateLog.Name(), gateFailures)
	}
	return gateErr
}

// report prints the counts, then each failure, exclusion and skip.
func report(w io.Writer, selected []string, results map[string]result, took time.Duration, offloaded int) {
	var passed, failed, excludedTests, skipped []string
	for _, t := range selected {
		r, ok := results[t]
		switch {
		case excluded(t) != "":
			excludedTests = append(excludedTests, fmt.Sprintf("%s\n      %s", t, excluded(t)))
		case !ok:
			failed = append(failed, fmt.Sprintf("%s\n      did not run (see the e2e logs)", t))
		case r.status == "passed":
			passed = append(passed, t)
		case r.status == "skipped":
			skipped = append(skipped, fmt.Sprintf("%s\n      %s", t, gist(r.message)))
		default:
			failed = append(failed, fmt.Sprintf("%s (%.0fs)\n      %s\n      log: %s", t, r.seconds, gist(r.message), r.log))
		}
	}
	fmt.Fprintf(w, "\nConformance through the virtual node: %d e2e namespaces offloaded, %s\n", offloaded, took.Round(time.Second))
	for _, l := range []struct {
		title string
		items []string
	}{{"Failed", failed}, {"Excluded, not run", excludedTests}, {"Skipped by the suite", skipped}} {
		if len(l.items) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", l.title)
		for _, it := range l.items {
			fmt.Fprintf(w, "  - %s\n", it)
		}
	}
	fmt.Fprintf(w, "\npassed %d, failed %d, skipped %d of %d (%d excluded, %d skipped by the suite)\n",
		len(passed), len(failed), len(excludedTests)+len(skipped), len(selected), len(excludedTests), len(skipped))
}

// gist returns the first four non-empty lines of s on one line, cut
// to 300 characters: ginkgo's failure messages start with a short summary,
// such as "Timed out after 60s.", and say what was expected next.
func gist(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && len(lines) < 4 {
			lines = append(lines, l)
		}
	}
	out := strings.Join(lines, " ")
	if len(out) > 300 {
		out = out[:300] + "…"
	}
	return out
}
