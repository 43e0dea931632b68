package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// The chapter of this file runs in
// TestTheNetworkFabricConnectsIsolatedClustersWithTheSamePodCIDR
// (network_test.go).

// expectTheTunnelFilteredBothWays checks the tenant filters of both
// gateways. The offloaded pod (remotePod, of namespace net) reaches the
// consumer's local pod of net, but not a consumer pod of a namespace that
// was never offloaded; a provider pod of no tenant reaches no consumer pod.
// Each refusal is counted by the gateway that made it, so that a route
// missing for another reason cannot pass for the filter.
func expectTheTunnelFilteredBothWays(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster,
	clientTunnel, serverTunnel string, addrs *reflection.Addresses, remotePod string, localPod corev1.Pod) {
	t.Helper()
	// The provider's view of a consumer pod's address.
	view := func(ip string) string { return (&reflection.Addresses{Provider: addrs.Consumer}).ConsumerIP(ip) }
	run := func(c *localcluster.Cluster, ns, name string) corev1.Pod {
		t.Helper()
		if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
		if _, err := c.Kube.AppsV1().Deployments(ns).Create(ctx, testAppDeployment(name, 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return waitPodsReady(ctx, t, c, ns, "app="+name, 1)[0]
	}
	private := run(consumer, "private", "private")

	// The allowed path works, so what fails below fails for the filter.
	waitFor(ctx, t, 30*time.Second, "the offloaded pod reaching the consumer's pod of its namespace by its view", func(ctx context.Context) (bool, string) {
		out, err := execIn(t, consumer, "net", remotePod, "get", "http://"+view(localPod.Status.PodIP)+":8080/hostname")
		return err == nil && out == localPod.Name, fmt.Sprintf("%q %v", out, err)
	})
	before := gatewayStatus(ctx, t, consumer, clientTunnel).Filtered
	if out, err := execIn(t, consumer, "net", remotePod, "get", "http://"+view(private.Status.PodIP)+":8080/hostname"); err == nil {
		t.Errorf("the offloaded pod reached consumer pod %s of a namespace never offloaded: %q", private.Name, out)
	}
	if after := gatewayStatus(ctx, t, consumer, clientTunnel).Filtered; after <= before {
		t.Errorf("the consumer gateway's filter counted %d then %d drops: the refusal was not the filter's", before, after)
	} else {
		t.Logf("the consumer gateway dropped %d packets of the offloaded pod's probe of namespace private", after-before)
	}

	outsider := run(provider, "outsider", "outsider")
	before = gatewayStatus(ctx, t, provider, serverTunnel).Filtered
	if out, err := execIn(t, provider, "outsider", outsider.Name, "get", "http://"+view(localPod.Status.PodIP)+":8080/hostname"); err == nil {
		t.Errorf("provider pod %s, of no tenant, reached the consumer's pod %s: %q", outsider.Name, localPod.Name, out)
	}
	if after := gatewayStatus(ctx, t, provider, serverTunnel).Filtered; after <= before {
		t.Errorf("the provider gateway's filter counted %d then %d drops: the refusal was not the filter's", before, after)
	} else {
		t.Logf("the provider gateway dropped %d packets of a non-tenant pod's probe", after-before)
	}
}
