package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// requestCounts reads apiserver_request_total from c's kube-apiserver:
// the requests it served since it started, by "VERB resource[/subresource]",
// every response code together.
func requestCounts(ctx context.Context, c *localcluster.Cluster) (map[string]float64, error) {
	raw, err := c.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics of %s's kube-apiserver: %w", c.Name, err)
	}
	return parseRequestCounts(raw)
}

// parseRequestCounts sums apiserver_request_total of a Prometheus text
// exposition by verb, resource and subresource.
func parseRequestCounts(raw []byte) (map[string]float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing the kube-apiserver's metrics: %w", err)
	}
	out := map[string]float64{}
	mf, ok := families["apiserver_request_total"]
	if !ok {
		return out, nil
	}
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		key := labels["verb"] + " " + labels["resource"]
		if s := labels["subresource"]; s != "" {
			key += "/" + s
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out, nil
}

// waitDeletesSettled waits, up to two minutes, until c's API server has
// served no pod DELETE for two seconds.
func waitDeletesSettled(ctx context.Context, b *testing.B, c *localcluster.Cluster) {
	b.Helper()
	start := time.Now()
	last := -1.0
	_, err := framework.Poll(ctx, 2*time.Second, 2*time.Minute, func(ctx context.Context) (bool, string) {
		counts, err := requestCounts(ctx, c)
		if err != nil {
			return false, err.Error()
		}
		now := counts["DELETE pods"]
		settled := now == last
		last = now
		return settled, fmt.Sprintf("%.0f pod DELETEs so far", now)
	})
	if err != nil {
		b.Logf("%s's pod deletions did not settle: %v", c.Name, err)
		return
	}
	b.Logf("%s's pod deletions settled after %s", c.Name, time.Since(start).Round(time.Second))
}

// requestsPerPod is what one pod of n cost an API server between two
// readings of requestCounts: the total per pod, and the kinds of request
// that cost at least 0.05 per pod, the most frequent first.
func requestsPerPod(before, after map[string]float64, n int) (float64, string) {
	type kind struct {
		key string
		per float64
	}
	var kinds []kind
	var total float64
	for key, v := range after {
		d := (v - before[key]) / float64(n)
		total += d
		if d >= 0.05 {
			kinds = append(kinds, kind{key, d})
		}
	}
	sort.Slice(kinds, func(i, j int) bool {
		if kinds[i].per != kinds[j].per {
			return kinds[i].per > kinds[j].per
		}
		return kinds[i].key < kinds[j].key
	})
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %.2f", k.key, k.per)
	}
	return total, strings.Join(parts, ", ")
}

// requestMeter takes a reading of both API servers of a pair, and reports
// what happened since then per pod.
type requestMeter struct {
	p              *pair
	consumer, prov map[string]float64
}

// startRequests reads both API servers' request counts now.
func (p *pair) startRequests(ctx context.Context) (*requestMeter, error) {
	c, err := requestCounts(ctx, p.consumer)
	if err != nil {
		return nil, err
	}
	pr, err := requestCounts(ctx, p.provider)
	if err != nil {
		return nil, err
	}
	return &requestMeter{p: p, consumer: c, prov: pr}, nil
}

// perPod returns the requests per pod of n each API server served since
// the reading, and a line naming the most frequent kinds.
func (m *requestMeter) perPod(ctx context.Context, n int) (consumer, provider float64, line string, err error) {
	c, err := requestCounts(ctx, m.p.consumer)
	if err != nil {
		return 0, 0, "", err
	}
	pr, err := requestCounts(ctx, m.p.provider)
	if err != nil {
		return 0, 0, "", err
	}
	consumer, cLine := requestsPerPod(m.consumer, c, n)
	provider, pLine := requestsPerPod(m.prov, pr, n)
	return consumer, provider, fmt.Sprintf("consumer %.1f per pod (%s); provider %.1f per pod (%s)", consumer, cLine, provider, pLine), nil
}

func TestRequestsPerPodSumsCodesAndNamesTheFrequentKinds(t *testing.T) {
	before, err := parseRequestCounts([]byte(`# TYPE apiserver_request_total counter
apiserver_request_total{code="201",resource="pods",subresource="",verb="POST"} 10
apiserver_request_total{code="200",resource="pods",subresource="status",verb="PUT"} 5
`))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseRequestCounts([]byte(`# TYPE apiserver_request_total counter
apiserver_request_total{code="201",resource="pods",subresource="",verb="POST"} 110
apiserver_request_total{code="409",resource="pods",subresource="status",verb="PUT"} 50
apiserver_request_total{code="200",resource="pods",subresource="status",verb="PUT"} 205
apiserver_request_total{code="200",resource="leases",subresource="",verb="PUT"} 2
`))
	if err != nil {
		t.Fatal(err)
	}
	total, line := requestsPerPod(before, after, 100)
	if total != 3.52 {
		t.Errorf("total per pod %v, want 3.52", total)
	}
	if want := "PUT pods/status 2.50, POST pods 1.00"; line != want {
		t.Errorf("kinds %q, want %q", line, want)
	}
}

// agentPprofPort is where the agents serve /debug/pprof when the
// benchmark profiles (OFFLOAD_BENCH_PROFILE).
const agentPprofPort = 6060

// profileAgent, when OFFLOAD_BENCH_PROFILE names a directory, writes the
// profile kind (heap, or profile for CPU; query such as seconds=15) of c's
// controller-manager there as NAME-CLUSTER-offload-agent-KIND.pprof. The
// host reaches the agent's pod by its IP.
func profileAgent(ctx context.Context, b *testing.B, c *localcluster.Cluster, name, kind, query string) {
	dir := os.Getenv("OFFLOAD_BENCH_PROFILE")
	if dir == "" {
		return
	}
	err := func() error {
		list, err := agentPods(ctx, c)
		if err != nil || len(list.Items) == 0 || list.Items[0].Status.PodIP == "" {
			return fmt.Errorf("no controller-manager pod with an IP: %v", err)
		}
		url := fmt.Sprintf("http://%s/debug/pprof/%s?%s", net.JoinHostPort(list.Items[0].Status.PodIP, strconv.Itoa(agentPprofPort)), kind, query)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s: %s", url, resp.Status, raw)
		}
		return os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%s-offload-agent-%s.pprof", name, c.Name, kind)), raw, 0o644)
	}()
	if err != nil {
		b.Logf("profiling the agent of %s: %v", c.Name, err)
	}
}

// profileWindow is how long the CPU profiles of an offloaded burst run,
// from its start: OFFLOAD_BENCH_PROFILE_SECONDS, 15 when unset. A window
// as long as the burst shows what the provider does once the pods arrive.
func profileWindow(b *testing.B) time.Duration {
	v := os.Getenv("OFFLOAD_BENCH_PROFILE_SECONDS")
	if v == "" {
		return 15 * time.Second
	}
	s, err := strconv.Atoi(v)
	if err != nil || s <= 0 {
		b.Fatalf("OFFLOAD_BENCH_PROFILE_SECONDS=%q: want a whole number of seconds above 0", v)
	}
	return time.Duration(s) * time.Second
}

// profileAPIServers, when OFFLOAD_BENCH_PROFILE names a directory, takes a
// CPU profile of both kube-apiservers and both agents for d in the
// background and writes them there (NAME-CLUSTER-kube-apiserver.pprof,
// profileAgent); wait waits for them.
func (p *pair) profileAPIServers(ctx context.Context, b *testing.B, name string, d time.Duration) (wait func()) {
	dir := os.Getenv("OFFLOAD_BENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	for _, c := range []*localcluster.Cluster{p.consumer, p.provider} {
		wg.Go(func() { profileAgent(ctx, b, c, name, "profile", fmt.Sprintf("seconds=%d", int(d.Seconds()))) })
		wg.Go(func() {
			raw, err := c.Kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
				Param("seconds", strconv.Itoa(int(d.Seconds()))).Timeout(d + time.Minute).DoRaw(ctx)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%s-kube-apiserver.pprof", name, c.Name)), raw, 0o644)
			}
			if err != nil {
				b.Logf("profiling the kube-apiserver of %s: %v", c.Name, err)
			}
		})
	}
	return wg.Wait
}
