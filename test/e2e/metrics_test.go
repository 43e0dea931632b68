package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// scrape is one read of a controller-manager's /metrics.
type scrape map[string]*dto.MetricFamily

// value is the value of the series of family name whose labels include
// labels (name=value pairs), summed over the series that match: a
// counter's or gauge's value, a histogram's sample count. found is false
// when no series matches.
func (s scrape) value(name string, labels ...string) (v float64, found bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && have[labels[i]] == labels[i+1]
		}
		if !match {
			continue
		}
		found = true
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v, found
}

// metricsEndpoint is a controller-manager's /metrics, through a
// port-forward to its Service.
type metricsEndpoint struct {
	url    string
	client *http.Client
}

func newMetricsEndpoint(t *testing.T, c *localcluster.Cluster) metricsEndpoint {
	t.Helper()
	addr := portForward(t, c, localcluster.InstallNamespace, "svc/offload-controller-manager-metrics", 8443)
	// The certificate is self-signed: the bearer token's authorization
	// guards the endpoint, as the chart's ServiceMonitor assumes.
	return metricsEndpoint{url: "https://" + addr + "/metrics", client: &http.Client{Timeout: 15 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}} // #nosec G402 -- self-signed, as documented
}

// get reads /metrics with token (none when empty) and returns the status
// code and the body.
func (e metricsEndpoint) get(token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, e.url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// scrape reads and parses /metrics with token.
func (e metricsEndpoint) scrape(t *testing.T, token string) scrape {
	t.Helper()
	code, body, err := e.get(token)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v: %.300s", e.url, code, err, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the metrics do not parse: %v", err)
	}
	return families
}

// scraperToken makes ServiceAccount default/name in c, bound to
// offload-metrics-reader when reader, and returns a token of it.
func scraperToken(ctx context.Context, t *testing.T, c *localcluster.Cluster, name string, reader bool) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault}}
	if _, err := c.Kube.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Kube.CoreV1().ServiceAccounts(sa.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if reader {
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "offload-metrics-reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: sa.Namespace}}}
		if _, err := c.Kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		})
	}
	tr, err := c.Kube.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// expectMetrics scrapes both controller-managers of a peering with the
// network fabric, with two pods or more offloaded to it and one refused by
// its Pod Security: only an identity RBAC allows reads them; the
// consumer's peer, reflection and tunnel series say what happened, and move
// when Deployment app of one more offloaded pod starts in ns; the
// provider's tunnel series do too.
func expectMetrics(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, ns, app string) {
	t.Helper()
	endpoint := newMetricsEndpoint(t, consumer)
	// No token: the API server cannot authenticate the caller. A token of
	// an identity without offload-metrics-reader: it may not read.
	if code, body, err := endpoint.get(""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d %v, want 401: %.200s", code, err, body)
	}
	if code, body, err := endpoint.get(scraperToken(ctx, t, consumer, "e2e-not-a-scraper", false)); err != nil || code != http.StatusForbidden {
		t.Errorf("/metrics with a token RBAC gives nothing: %d %v, want 403: %.200s", code, err, body)
	}
	token := scraperToken(ctx, t, consumer, "e2e-scraper", true)
	var before scrape
	waitFor(ctx, t, time.Minute, "the metrics reader allowed", func(context.Context) (bool, string) {
		code, body, err := endpoint.get(token)
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("%d %v: %.200s", code, err, body)
		}
		before = endpoint.scrape(t, token)
		return true, ""
	})

	const peer = "provider"
	want := func(s scrape, what, name string, ok func(float64) bool, labels ...string) {
		t.Helper()
		if v, found := s.value(name, labels...); !found || !ok(v) {
			t.Errorf("%s: %s%v = %v (found %v)", what, name, labels, v, found)
		}
	}
	atLeast := func(n float64) func(float64) bool { return func(v float64) bool { return v >= n } }
	within := func(d time.Duration) func(float64) bool {
		return func(v float64) bool { return time.Since(time.Unix(int64(v), 0)).Abs() < d }
	}
	want(before, "the virtual node is Ready", "offload_peer_virtual_node_ready", func(v float64) bool { return v == 1 }, "peer", peer)
	want(before, "the credentials expire in the future", "offload_peer_credential_expiry_timestamp_seconds",
		func(v float64) bool { return time.Unix(int64(v), 0).After(time.Now()) }, "peer", peer)
	want(before, "the provider was seen lately", "offload_peer_last_seen_timestamp_seconds", within(2*time.Minute), "peer", peer)
	want(before, "the provider offers cpu", "offload_peer_offered_cpu_cores", atLeast(0.001), "peer", peer)
	want(before, "the provider offers pods", "offload_peer_offered_pods", atLeast(1), "peer", peer)
	want(before, "the app's pods request room on the virtual node", "offload_peer_requested_pods", atLeast(2), "peer", peer)
	want(before, "the app's pods are reflected", "offload_reflected_pods", atLeast(2), "peer", peer)
	want(before, "remote pods were created", "offload_pod_reflections_total", atLeast(2),
		"peer", peer, "direction", "to_provider", "operation", "create")
	want(before, "consumer pod statuses were written", "offload_pod_reflections_total", atLeast(2),
		"peer", peer, "direction", "to_consumer", "operation", "status")
	want(before, "the provider's refusals were counted", "offload_pod_reflection_errors_total", atLeast(1),
		"peer", peer, "direction", "to_provider", "reason", "Forbidden")
	want(before, "the tunnel is connected", "offload_tunnel_connected", func(v float64) bool { return v == 1 }, "peer", peer, "role", "client")
	want(before, "the tunnel shook hands lately", "offload_tunnel_last_handshake_timestamp_seconds", within(3*time.Minute), "peer", peer, "role", "client")
	for _, name := range []string{"offload_tunnel_receive_bytes_total", "offload_tunnel_transmit_bytes_total",
		"offload_tunnel_receive_packets_total", "offload_tunnel_transmit_packets_total"} {
		want(before, "traffic crossed the tunnel", name, atLeast(1), "peer", peer, "role", "client")
	}
	if _, found := before.value("offload_tunnel_filtered_packets_total", "peer", peer, "role", "client"); !found {
		t.Error("no offload_tunnel_filtered_packets_total series for the tunnel")
	}

	// One more offloaded pod: the counters and histograms move.
	more := offloadedApp(app, 1)
	if _, err := consumer.Kube.AppsV1().Deployments(ns).Create(ctx, more, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = consumer.Kube.AppsV1().Deployments(ns).Delete(context.Background(), app, metav1.DeleteOptions{})
	}()
	moved := func(after scrape, name string, labels ...string) string {
		b, _ := before.value(name, labels...)
		a, _ := after.value(name, labels...)
		if a > b {
			return ""
		}
		return fmt.Sprintf("%s%v stays at %v", name, labels, a)
	}
	// The gateway refreshes the Tunnel's counters every 30 s.
	took := waitFor(ctx, t, 90*time.Second, "the counters moving", func(context.Context) (bool, string) {
		after := endpoint.scrape(t, token)
		var still []string
		for _, s := range []string{
			moved(after, "offload_pod_reflections_total", "peer", peer, "direction", "to_provider", "operation", "create"),
			moved(after, "offload_pod_reflections_total", "peer", peer, "direction", "to_consumer", "operation", "status"),
			moved(after, "offload_pod_create_propagation_seconds", "peer", peer),
			moved(after, "offload_pod_status_propagation_seconds", "peer", peer),
			moved(after, "offload_peer_requested_pods", "peer", peer),
			moved(after, "offload_tunnel_receive_packets_total", "peer", peer, "role", "client"),
			moved(after, "offload_tunnel_transmit_bytes_total", "peer", peer, "role", "client"),
		} {
			if s != "" {
				still = append(still, s)
			}
		}
		return len(still) == 0, strings.Join(still, "; ")
	})
	t.Logf("metrics: every counter moved %s after one more pod was offloaded", took.Round(time.Millisecond))

	// The provider's end of the tunnel, on its own controller-manager.
	providerEndpoint := newMetricsEndpoint(t, provider)
	providerToken := scraperToken(ctx, t, provider, "e2e-scraper", true)
	waitFor(ctx, t, time.Minute, "the provider's tunnel metrics", func(context.Context) (bool, string) {
		code, body, err := providerEndpoint.get(providerToken)
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("%d %v: %.200s", code, err, body)
		}
		s := providerEndpoint.scrape(t, providerToken)
		connected, _ := s.value("offload_tunnel_connected", "peer", consumer.Name, "role", "server")
		rx, _ := s.value("offload_tunnel_receive_packets_total", "peer", consumer.Name, "role", "server")
		return connected == 1 && rx > 0, fmt.Sprintf("connected %v, packets received %v", connected, rx)
	})
}
