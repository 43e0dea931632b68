package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// The chapter of this file runs in
// TestOffloadedPodsRunInTheProvidersTwinNamespace (offload_test.go).

// shortToleration is the consumer API server's default not-ready and
// unreachable toleration in the tests, instead of 300 s: a partition
// longer than it would evict every pod of the virtual node that only has
// the defaults.
const shortToleration = 10 * time.Second

// shortTolerationArgs set shortToleration on a consumer's API server.
var shortTolerationArgs = [][2]string{
	{"default-not-ready-toleration-seconds", fmt.Sprint(int(shortToleration / time.Second))},
	{"default-unreachable-toleration-seconds", fmt.Sprint(int(shortToleration / time.Second))},
}

// evictionTaint returns the NoExecute taint the node lifecycle controller
// put on a node that is not Ready, or nil.
func evictionTaint(ctx context.Context, c *localcluster.Cluster, node string) *corev1.Taint {
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	for _, taint := range n.Spec.Taints {
		if (taint.Key == corev1.TaintNodeNotReady || taint.Key == corev1.TaintNodeUnreachable) && taint.Effect == corev1.TaintEffectNoExecute {
			return &taint
		}
	}
	return nil
}

// expectPodsSurviveAPartition cuts the network between consumer and
// provider for longer than the consumer's default toleration of an
// unreachable node (shortToleration, with the eviction taint on the
// virtual node), and checks that the offloaded pods of selector are the
// same pods, on both sides, before, during and after it.
func expectPodsSurviveAPartition(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, twin, clusterID, selector string, want int) {
	t.Helper()
	expectReflected(ctx, t, consumer, provider, twin, clusterID, selector, want)
	uids := func() map[string]types.UID {
		list, err := consumer.Kube.CoreV1().Pods("work").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]types.UID{}
		for _, p := range onVirtualNode(list.Items) {
			out[p.Name] = p.UID
		}
		return out
	}
	before := uids()
	node := "offload-" + provider.Name

	heal := localcluster.Partition(t, consumer, provider)
	start := time.Now()
	var armed *corev1.Taint
	waitFor(ctx, t, 3*time.Minute, "the eviction taint on the partitioned virtual node", func(ctx context.Context) (bool, string) {
		armed = evictionTaint(ctx, consumer, node)
		return armed != nil, "Ready=" + string(nodeReady(ctx, consumer, node))
	})
	t.Logf("partition: virtual node %s tainted %s after %s", node, armed.Key, time.Since(start).Round(time.Millisecond))
	// Longer than the default toleration, with the taint in place.
	holdFault(ctx, shortToleration+10*time.Second)
	if evictionTaint(ctx, consumer, node) == nil {
		t.Fatalf("the eviction taint left node %s during the partition: the test proves nothing", node)
	}
	if during := uids(); fmt.Sprint(during) != fmt.Sprint(before) {
		t.Errorf("offloaded pods during a partition of %s: %v; want the same pods as before, %v", time.Since(start).Round(time.Second), during, before)
	}
	heal()
	healed := time.Now()
	took := waitNodeReady(ctx, t, consumer, node, corev1.ConditionTrue, 2*time.Minute)
	t.Logf("partition of %s healed: node %s Ready %s later", healed.Sub(start).Round(time.Second), node, took.Round(time.Millisecond))
	expectReflected(ctx, t, consumer, provider, twin, clusterID, selector, want)
	if after := uids(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("offloaded pods after the partition: %v; want the same pods as before, %v", after, before)
	}
}
