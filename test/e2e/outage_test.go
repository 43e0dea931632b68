package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// The chapter of this file runs in
// TestPeeringSurvivesAnOutageRotatesCredentialsAndUnpeersCleanly
// (lifecycle_test.go).

// defaultFrozenOutage is how long a frozen API server stays frozen: longer
// than the agents' Lease (15 s) and its renew deadline (10 s), so the
// leader loses it, as it would in a long outage.
const defaultFrozenOutage = 35 * time.Second

// frozenOutage is defaultFrozenOutage, or $OFFLOAD_FROZEN_OUTAGE (such as
// 6m) for the figures of a longer outage; the lifecycle test's deadline
// grows with it.
func frozenOutage(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("OFFLOAD_FROZEN_OUTAGE")
	if v == "" {
		return defaultFrozenOutage
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < defaultFrozenOutage {
		t.Fatalf("OFFLOAD_FROZEN_OUTAGE=%q: want a duration of at least %s", v, defaultFrozenOutage)
	}
	return d
}

// leaderRenewedAfter reports whether the controller-manager's Lease in c
// was renewed after since: its leader serves.
func leaderRenewedAfter(ctx context.Context, c *localcluster.Cluster, since time.Time) (bool, string) {
	var lease coordinationv1.Lease
	l, err := c.Kube.CoordinationV1().Leases(localcluster.InstallNamespace).Get(ctx, offloadv1alpha1.ControllerManager, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	lease = *l
	if lease.Spec.RenewTime == nil {
		return false, "the Lease was never renewed"
	}
	return lease.Spec.RenewTime.After(since), fmt.Sprintf("renewed %s by %v", lease.Spec.RenewTime.Format(time.RFC3339Nano), lease.Spec.HolderIdentity)
}

// restartsByCluster is agentRestarts of each cluster, by cluster name.
func restartsByCluster(ctx context.Context, t *testing.T, clusters ...*localcluster.Cluster) map[string]map[string]int32 {
	t.Helper()
	out := map[string]map[string]int32{}
	for _, c := range clusters {
		out[c.Name] = agentRestarts(ctx, t, c)
	}
	return out
}

// expectAgentsRideOutFrozenAPIServers freezes the API server of each side
// in turn for longer than the agents' Lease, then checks that both sides'
// agents serve again within seconds of its return (the controller-manager
// renews its Lease, the virtual node is Ready), and that none of their
// containers restarted since before (restartsByCluster, taken before any
// outage), and reports the figures.
func expectAgentsRideOutFrozenAPIServers(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, node string, before map[string]map[string]int32) {
	t.Helper()
	clusters := []*localcluster.Cluster{consumer, provider}
	outage := frozenOutage(t)
	for _, frozen := range clusters {
		thaw := frozen.FreezeAPIServer(t)
		holdFault(ctx, outage)
		thaw()
		back := time.Now()
		for _, c := range clusters {
			took := waitFor(ctx, t, 2*time.Minute, c.Name+"'s controller-manager leading again", func(ctx context.Context) (bool, string) {
				return leaderRenewedAfter(ctx, c, back)
			})
			t.Logf("%s's API server frozen %s: %s's controller-manager renewed its Lease %s after it came back",
				frozen.Name, outage, c.Name, took.Round(time.Millisecond))
		}
		took := waitNodeReady(ctx, t, consumer, node, corev1.ConditionTrue, 2*time.Minute)
		t.Logf("%s's API server frozen %s: virtual node %s Ready %s after it came back", frozen.Name, outage, node, took.Round(time.Millisecond))
	}
	for _, c := range clusters {
		var restarted []string
		for container, n := range agentRestarts(ctx, t, c) {
			if n > before[c.Name][container] {
				restarted = append(restarted, fmt.Sprintf("%s: %d → %d", container, before[c.Name][container], n))
			}
		}
		sort.Strings(restarted)
		if len(restarted) > 0 {
			t.Errorf("agent containers of %s restarted during the API server outages: %s", c.Name, strings.Join(restarted, "; "))
			logLastTermination(ctx, t, c, before[c.Name])
		}
	}
}

// logLastTermination logs, for each agent container of c that restarted
// since before, how its last run ended and the end of its log.
func logLastTermination(ctx context.Context, t *testing.T, c *localcluster.Cluster, before map[string]int32) {
	t.Helper()
	pods, err := c.Kube.CoreV1().Pods(localcluster.InstallNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Log(err)
		return
	}
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount <= before[p.Name+"/"+s.Name] {
				continue
			}
			if term := s.LastTerminationState.Terminated; term != nil {
				t.Logf("%s/%s last ended %s: exit code %d, reason %s %s", p.Name, s.Name, term.FinishedAt.Format(time.RFC3339), term.ExitCode, term.Reason, term.Message)
			}
			tail := int64(40)
			raw, err := c.Kube.CoreV1().Pods(localcluster.InstallNamespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: s.Name, Previous: true, TailLines: &tail}).DoRaw(ctx)
			t.Logf("%s/%s previous log (err %v):\n%s", p.Name, s.Name, err, raw)
		}
	}
	evs, err := c.Kube.CoreV1().Events(localcluster.InstallNamespace).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning {
				t.Logf("event %s %s: %s (%dx, last %s)", e.InvolvedObject.Name, e.Reason, e.Message, e.Count, e.LastTimestamp.Format(time.RFC3339))
			}
		}
	}
}
