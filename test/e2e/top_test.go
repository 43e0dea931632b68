package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// The chapter of this file runs in
// TestOffloadedPodsRunInTheProvidersTwinNamespace (offload_test.go).

// expectKubectlTop checks kubectl top for the virtual node and its pods, on
// a consumer and a provider that both run metrics-server: the consumer's
// metrics-server scrapes the virtual node's kubelet API, which answers with
// what the provider's metrics API measured of the remote pods, read with
// the consumer's credentials. The consumer's figures must be the
// provider's: without the product no offloaded pod and no virtual node has
// any metrics at all.
func expectKubectlTop(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, twin, selector string) {
	t.Helper()
	for _, c := range []*localcluster.Cluster{consumer, provider} {
		if err := c.WaitMetrics(ctx, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	consumerMetrics := metricsClient(t, consumer)
	providerMetrics := metricsClient(t, provider)
	list, err := consumer.Kube.CoreV1().Pods("work").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	local := onVirtualNode(list.Items)
	if len(local) == 0 {
		t.Fatal("no offloaded pod to measure")
	}

	// Each offloaded pod's working set on the consumer is one the provider
	// measured for its remote pod. The consumer's metrics-server scrapes
	// the virtual node on its own beat, so it shows the provider's reading
	// of up to one resolution before: a pod whose memory moves at every
	// scrape never shows the same figure on both at one instant.
	start := time.Now()
	var why string // the last answer before the deadline cut a request
	seen := podMemorySeen{}
	took, err := framework.Poll(ctx, 2*time.Second, 3*time.Minute, func(ctx context.Context) (bool, string) {
		ok, msg := seen.check(ctx, consumerMetrics, providerMetrics, local, twin)
		if ctx.Err() == nil {
			why = msg
		}
		return ok, msg
	})
	if err != nil {
		t.Fatalf("the consumer's metrics of the offloaded pods: %v; last: %s", err, why)
	}
	t.Logf("kubectl top pod shows the provider's figures %s after the check began (%s since the pods were listed)", took.Round(time.Second), time.Since(start).Round(time.Second))

	// What the user types.
	out, err := kubectl(t, consumer, "-n", "work", "top", "pod", "-l", selector, "--no-headers")
	if err != nil {
		t.Fatalf("kubectl top pod: %v\n%s", err, out)
	}
	for _, p := range local {
		if !strings.Contains(out, p.Name+" ") {
			t.Errorf("kubectl top pod does not list offloaded pod %s:\n%s", p.Name, out)
		}
	}
	var nodeFields []string
	_, err = framework.Poll(ctx, 2*time.Second, time.Minute, func(context.Context) (bool, string) {
		out, err := kubectl(t, consumer, "top", "node", "offload-provider", "--no-headers")
		nodeFields = strings.Fields(out)
		// NAME CPU(cores) CPU% MEMORY(bytes) MEMORY%
		return err == nil && len(nodeFields) == 5 && !strings.Contains(out, "unknown"), out
	})
	if err != nil {
		t.Fatalf("kubectl top node offload-provider: %v", err)
	}
	nodeMemory, err := resource.ParseQuantity(nodeFields[3])
	if err != nil {
		t.Fatalf("kubectl top node offload-provider: memory %q: %v", nodeFields[3], err)
	}
	podsMemory := resource.Quantity{}
	for _, p := range local {
		m, err := consumerMetrics.MetricsV1beta1().PodMetricses("work").Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		podsMemory.Add(podMemory(m))
	}
	// The node's working set is its pods', which may have moved a little
	// between the two reads; kubectl rounds it to Mi.
	if diff := nodeMemory.Value() - podsMemory.Value(); max(diff, -diff) > max(2<<20, podsMemory.Value()/10) {
		t.Errorf("kubectl top node offload-provider shows %s of memory, its pods %s", nodeMemory.String(), podsMemory.String())
	}
	t.Logf("kubectl top node offload-provider: %s", strings.Join(nodeFields, " "))

	// The Summary API through the API server's node proxy, as kubectl get
	// --raw reads it: the virtual node and its pods, by their consumer names.
	raw, err := consumer.Kube.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/offload-provider/proxy/stats/summary").DoRaw(ctx)
	if err != nil {
		t.Fatalf("the virtual node's /stats/summary: %v", err)
	}
	var summary statsv1alpha1.Summary
	if err := json.Unmarshal(raw, &summary); err != nil {
		t.Fatalf("the virtual node's /stats/summary: %v\n%s", err, raw)
	}
	summarized := map[string]bool{}
	for _, p := range summary.Pods {
		if p.PodRef.Namespace == "work" && p.CPU != nil && p.Memory != nil && p.Memory.WorkingSetBytes != nil {
			summarized[p.PodRef.Name] = true
		}
	}
	for _, p := range local {
		if !summarized[p.Name] {
			t.Errorf("/stats/summary of offload-provider lacks pod work/%s: %s", p.Name, raw)
		}
	}
	if summary.Node.NodeName != "offload-provider" {
		t.Errorf("/stats/summary names node %q", summary.Node.NodeName)
	}

	// The consumer reads metrics in its twin namespaces only.
	held, _ := tenantClient(ctx, t, consumer)
	tenant, err := metricsclient.NewForConfig(held.config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.MetricsV1beta1().PodMetricses(twin).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the consumer's credentials cannot read the metrics of its twin namespace: %v", err)
	}
	for _, ns := range []string{metav1.NamespaceSystem, metav1.NamespaceDefault} {
		if _, err := tenant.MetricsV1beta1().PodMetricses(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the consumer's credentials listing pod metrics in the provider's %s: %v; want Forbidden", ns, err)
		}
	}
	if _, err := tenant.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the consumer's credentials listing the provider's node metrics: %v; want Forbidden", err)
	}
}

// metricsClient returns a client of c's metrics API.
func metricsClient(t *testing.T, c *localcluster.Cluster) metricsclient.Interface {
	t.Helper()
	m, err := metricsclient.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// podMemory is the working set of m's containers.
func podMemory(m *metricsv1beta1.PodMetrics) resource.Quantity {
	sum := resource.Quantity{}
	for _, c := range m.Containers {
		sum.Add(c.Usage.Memory().DeepCopy())
	}
	return sum
}

// podMemorySeen follows, for each offloaded pod, the working sets the
// provider measured of its remote pod, and which pods the consumer has
// shown one of.
type podMemorySeen struct {
	provider map[string][]int64 // pod name → the provider's figures in bytes, oldest first
	matched  map[string]int64   // pod name → the figure both showed
}

// check reads each pod's working set on both sides and reports whether
// every pod of pods has shown on the consumer a working set the provider
// measured for its remote pod in twin during the check.
func (s *podMemorySeen) check(ctx context.Context, consumer, provider metricsclient.Interface, pods []corev1.Pod, twin string) (bool, string) {
	if s.provider == nil {
		s.provider, s.matched = map[string][]int64{}, map[string]int64{}
	}
	var waiting []string
	for _, p := range pods {
		if _, ok := s.matched[p.Name]; ok {
			continue
		}
		theirs, err := provider.MetricsV1beta1().PodMetricses(twin).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, "provider: " + err.Error()
		}
		if b := podMemory(theirs); !b.IsZero() {
			if h := s.provider[p.Name]; len(h) == 0 || h[len(h)-1] != b.Value() {
				s.provider[p.Name] = append(h, b.Value())
			}
		}
		mine, err := consumer.MetricsV1beta1().PodMetricses("work").Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, "consumer: " + err.Error()
		}
		a := podMemory(mine)
		if !a.IsZero() && slices.Contains(s.provider[p.Name], a.Value()) {
			s.matched[p.Name] = a.Value()
			continue
		}
		waiting = append(waiting, fmt.Sprintf("pod %s: the consumer shows %d, the provider showed %v bytes", p.Name, a.Value(), s.provider[p.Name]))
	}
	return len(waiting) == 0, strings.Join(waiting, "; ")
}
