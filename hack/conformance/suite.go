package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// selection picks the tests issue 13 asks for: the [Conformance] tests of
// sig-node and of sig-storage's ConfigMap, Secret, Downward API and
// Projected volumes.
var selection = regexp.MustCompile(`^\[sig-node\] .*\[Conformance\]|^\[sig-storage\] (ConfigMap|Secrets|Downward API volume|Projected [a-zA-Z]+) .*\[Conformance\]`)

// exclusion is a test the run leaves out, and why.
type exclusion struct {
	pattern *regexp.Regexp
	reason  string
}

// exclusions are the selected tests that cannot pass through a virtual
// node by design, or on these local clusters; each is reported with its
// reason, never skipped silently.
var exclusions = []exclusion{{
	pattern: regexp.MustCompile(`^\[sig-node\] KubeletManagedEtcHosts `),
	reason: "it runs a hostNetwork pod with hostPath volumes, host namespaces and host paths that the provider's Pod Security " +
		"(baseline, the peering's default) refuses to consumer pods",
}, {
	pattern: regexp.MustCompile(`^\[sig-node\] PreStop should call prestop when killing a pod`),
	reason: "it reads the server pod's record through the consumer API server's pod proxy; the local API servers run outside the " +
		"network fabric (host processes, not on a node), so the consumer's cannot reach a provider pod's address",
}}

// excluded returns the reason test is left out, or "".
func excluded(test string) string {
	for _, e := range exclusions {
		if e.pattern.MatchString(test) {
			return e.reason
		}
	}
	return ""
}

// listTests returns the full names of the e2e suite's tests that
// selection picks, sorted.
func listTests(ctx context.Context, e2e string) ([]string, error) {
	out, err := exec.CommandContext(ctx, e2e, "--list-tests").Output()
	if err != nil {
		return nil, fmt.Errorf("listing the tests of %s: %w", e2e, err)
	}
	var tests []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		// "    path/file.go:123: [sig-node] Pods should …"
		line := strings.TrimSpace(sc.Text())
		_, name, ok := strings.Cut(line, ": ")
		if ok && selection.MatchString(name) {
			tests = append(tests, name)
		}
	}
	slices.Sort(tests)
	return slices.Compact(tests), sc.Err()
}

// shard runs one e2e.test process over tests.
type shard struct {
	index int
	tests []string
	junit string
	log   string
	// passed is whether e2e.test exited 0: every test passed or was skipped.
	passed bool
	// results are the outcomes its report gave.
	results map[string]result
	err     error
}

// e2eArgs are the flags every shard passes to e2e.test.
func e2eArgs(kubeconfig string) []string {
	return []string{
		"--kubeconfig", kubeconfig,
		"--provider", "skeleton",
		// The consumer's own node is cordoned, and the virtual node is
		// untainted (virtualNodes.taint=false), the only node that takes
		// pods: the tests that look for an untainted schedulable node
		// (lifecycle hooks, in-place resize) find it.
		"--allowed-not-ready-nodes", "-1",
		"--num-nodes", "1",
		"--ginkgo.timeout", "1h",
		"--ginkgo.no-color",
		"--ginkgo.v",
	}
}

// slow matches the tests that take minutes (probes that must not fire,
// restart counts, 500 updates, volume updates), started first so that the
// last ones to finish are short.
var slow = regexp.MustCompile(`Probing container|\[Slow\]|500 podspec|updates should be reflected|on modification|NoExecuteTaintManager`)

// runShards runs each test in an e2e.test process of its own, n at once,
// the slow ones first, and prints a line as each ends. One process per
// test costs about a second, and keeps the processes busy until the end.
func runShards(ctx context.Context, e2e, kubeconfig, dir string, tests []string, n int) []*shard {
	ordered := slices.Clone(tests)
	slices.SortStableFunc(ordered, func(a, b string) int {
		switch sa, sb := slow.MatchString(a), slow.MatchString(b); {
		case sa && !sb:
			return -1
		case sb && !sa:
			return 1
		}
		return 0
	})
	shards := make([]*shard, len(ordered))
	queue := make(chan *shard, len(ordered))
	for i, t := range ordered {
		shards[i] = &shard{index: i + 1, tests: []string{t},
			junit: filepath.Join(dir, fmt.Sprintf("junit_%03d.xml", i+1)), log: filepath.Join(dir, fmt.Sprintf("e2e_%03d.log", i+1))}
		queue <- shards[i]
	}
	close(queue)
	var mu sync.Mutex
	done := 0
	var wg sync.WaitGroup
	for range min(n, len(shards)) {
		wg.Go(func() {
			for s := range queue {
				start := time.Now()
				s.err = s.run(ctx, e2e, kubeconfig)
				mark := "✓"
				switch {
				case s.err != nil:
					mark = "✗ " + s.err.Error() + ":"
				case !s.passed:
					mark = "✗"
				}
				mu.Lock()
				done++
				fmt.Fprintf(os.Stderr, "%s [%d/%d] %s %s (%s)\n", time.Now().Format(time.TimeOnly), done, len(shards), mark, s.tests[0], time.Since(start).Round(time.Second))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return shards
}

func (s *shard) run(ctx context.Context, e2e, kubeconfig string) error {
	// Ginkgo matches the focus against more than the name alone, so the
	// name is anchored at its end and after a space or the start.
	quoted := make([]string, len(s.tests))
	for i, t := range s.tests {
		quoted[i] = regexp.QuoteMeta(t)
	}
	log, err := os.Create(s.log)
	if err != nil {
		return err
	}
	defer log.Close()
	args := append(e2eArgs(kubeconfig), "--ginkgo.focus", "(?:^| )(?:"+strings.Join(quoted, "|")+")$", "--ginkgo.junit-report", s.junit)
	cmd := exec.CommandContext(ctx, e2e, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = filepath.Dir(s.log)
	err = cmd.Run()
	s.passed = err == nil
	// The report lists every test of the suite, most of them skipped:
	// only the outcomes of s.tests are kept.
	results, readErr := readJUnit(s.junit, s.tests)
	if readErr != nil {
		return fmt.Errorf("e2e.test wrote no report (log %s): %w", s.log, errors.Join(err, readErr))
	}
	for name, r := range results {
		r.log = s.log
		results[name] = r
	}
	s.results = results
	return os.Remove(s.junit)
}

// junitSuites is the part of ginkgo's JUnit report the summary reads.
type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Failure *struct {
		Message string `xml:"message,attr"`
	} `xml:"failure"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
}

// result is the outcome of one selected test.
type result struct {
	name, status, message string
	seconds               float64
	// log is the e2e.test output of the test.
	log string
}

// readJUnit returns the outcomes the JUnit report at path gives for tests,
// by test name; a test missing from the report is absent.
func readJUnit(path string, tests []string) (map[string]result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r junitSuites
	if err := xml.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	out := map[string]result{}
	for _, suite := range r.Suites {
		for _, c := range suite.Cases {
			// "[It] <name> [<labels>]"
			i := slices.IndexFunc(tests, func(t string) bool {
				n := strings.TrimPrefix(c.Name, "[It] ")
				return n == t || strings.HasPrefix(n, t+" [")
			})
			if i < 0 {
				continue // Not focused: ginkgo lists every spec.
			}
			res := result{name: tests[i], status: c.Status, seconds: c.Time}
			switch {
			case c.Failure != nil:
				res.status, res.message = "failed", c.Failure.Message
			case c.Skipped != nil && c.Status != "passed":
				res.status, res.message = "skipped", c.Skipped.Message
			}
			out[tests[i]] = res
		}
	}
	return out, nil
}

// readResults merges the outcomes of the shards' tests.
func readResults(shards []*shard) map[string]result {
	out := map[string]result{}
	for _, s := range shards {
		maps.Copy(out, s.results)
	}
	return out
}
