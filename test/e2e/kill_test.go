package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
)

// burstPods is how many pods the agent-kill test offloads at once.
const burstPods = 1000

func TestAnAgentKilledWhileOffloadingAThousandPodsLeavesNoDuplicateAndNoOrphan(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// The provider's fake nodes take every remote pod; its real node runs
	// only the agent. The control planes' own rate limits are lifted, as in
	// the benchmark, so that 1000 pods do not wait on the Deployment and
	// the scheduler at 20 requests a second.
	consumer, provider := peerableClustersWith(ctx, t,
		localcluster.ClusterOptions{Name: "kill-consumer", RealNode: true, DisableQPSLimits: true},
		localcluster.ClusterOptions{Name: "kill-provider", FakeNodes: 3, NodeCapacity: localcluster.Capacity{Pods: "500"}, RealNode: true, DisableQPSLimits: true},
		"--network=false", "--set", "sharingPercentage=100")
	cordon := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := provider.Kube.CoreV1().Nodes().Patch(ctx, provider.Node.Name, types.MergePatchType, cordon, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if errOut, err := outOfBand(t, consumer, generate(t, provider), "--timeout", "2m"); err != nil {
		t.Fatalf("peer out-of-band: %v\n%s", err, errOut)
	}
	node := "offload-" + provider.Name
	waitFor(ctx, t, 2*time.Minute, fmt.Sprintf("virtual node %s offering %d pods", node, burstPods), func(ctx context.Context) (bool, string) {
		n, err := consumer.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return n.Status.Allocatable.Pods().Value() >= burstPods, n.Status.Allocatable.Pods().String()
	})
	cc := ctrlClient(t, consumer)
	createNamespace(ctx, t, cc, "work")
	mustOffload(t, consumer, "namespace", "work", "--pod-offloading-strategy", "Remote", "--timeout", "2m")
	consumerID := identity(ctx, t, consumer)["clusterID"]
	twin := offloadv1alpha1.TwinNamespace("work", consumer.Name, consumerID)

	app := offloadedApp("burst", burstPods)
	app.Spec.Template.Spec.Containers[0].ReadinessProbe = nil
	app.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("1Mi")}
	start := time.Now()
	if _, err := consumer.Kube.AppsV1().Deployments("work").Create(ctx, app, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Kill the consumer's agent in the middle of the offloading: every pod
	// is bound to the virtual node (so none was made while the agent was
	// down, which a scheduling webhook would have let run locally, as
	// README says), and only some have their remote pod.
	waitFor(ctx, t, 5*time.Minute, fmt.Sprintf("%d pods bound to %s", burstPods, node), func(ctx context.Context) (bool, string) {
		list, err := consumer.Kube.CoreV1().Pods("work").List(ctx, metav1.ListOptions{LabelSelector: "app=burst"})
		if err != nil {
			return false, err.Error()
		}
		bound := 0
		for _, p := range list.Items {
			if p.Spec.NodeName == node {
				bound++
			}
		}
		return bound == burstPods, fmt.Sprintf("%d bound", bound)
	})
	pid, err := machine.AgentPID(consumer.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	atKill := len(remotePods(ctx, t, provider, twin, consumerID))
	t.Logf("killed the consumer's agent (pid %d) with %d of %d remote pods made, %s after the Deployment was created",
		pid, atKill, burstPods, killed.Sub(start).Round(time.Millisecond))
	if atKill >= burstPods {
		t.Fatalf("the offloading had finished when the agent was killed: the test proves nothing")
	}

	took := waitFor(ctx, t, 8*time.Minute, fmt.Sprintf("%d consumer pods Running, each with exactly one remote pod", burstPods), func(ctx context.Context) (bool, string) {
		list, err := consumer.Kube.CoreV1().Pods("work").List(ctx, metav1.ListOptions{LabelSelector: "app=burst"})
		if err != nil {
			return false, err.Error()
		}
		live, running := onNode(list.Items, node), 0
		for _, p := range live {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		remote := remotePods(ctx, t, provider, twin, consumerID)
		same, why := samePods(live, remote)
		if !same && len(why) > 200 {
			why = why[:200] + "…"
		}
		return len(live) == burstPods && running == burstPods && same,
			fmt.Sprintf("%d consumer pods, %d Running, %d remote pods; %s", len(live), running, len(remote), why)
	})
	t.Logf("converged %s after the kill (%s after the Deployment was created): %d pods Running, one remote pod each, no orphan",
		took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), burstPods)
	if restarts := agentRestarts(ctx, t, consumer); sumRestarts(restarts) == 0 {
		t.Errorf("no agent container restarted after the kill: %v; was the right process killed?", restarts)
	}
}

// sumRestarts adds up agentRestarts.
func sumRestarts(restarts map[string]int32) int32 {
	var n int32
	for _, r := range restarts {
		n += r
	}
	return n
}
