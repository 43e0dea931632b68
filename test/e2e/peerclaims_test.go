package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/fabric/network"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// The chapters of this file run in
// TestTheNetworkFabricConnectsIsolatedClustersWithTheSamePodCIDR
// (network_test.go).

// fabricRoutes are the routes the fabric added on every real node of c.
func fabricRoutes(t *testing.T, c *localcluster.Cluster) []string {
	t.Helper()
	var out []string
	for _, n := range c.RealNodes() {
		routes, err := nodeFabricRoutes(n.NetNS)
		if err != nil {
			t.Fatalf("reading the routes of %s: %v", n.Name, err)
		}
		for _, l := range strings.Split(routes, "\n") {
			out = append(out, n.Name+": "+l)
		}
	}
	slices.Sort(out)
	return out
}

// apiServerHost is the host of c's API server as its peers reach it.
func apiServerHost(c *localcluster.Cluster) string {
	host, _, _ := strings.Cut(strings.TrimPrefix(c.PeerAPIServerURL(), "https://"), ":")
	return host
}

// apiServerPaths are how each real node of c reaches its API server
// (ip route get): the path the kubelet and the node's agents take, which
// no announcement of a peer may change.
func apiServerPaths(t *testing.T, c *localcluster.Cluster) []string {
	t.Helper()
	host := apiServerHost(c)
	var out []string
	for _, n := range c.RealNodes() {
		b, err := exec.Command("ip", "-n", n.NetNS, "route", "get", host).CombinedOutput()
		if err != nil {
			t.Fatalf("ip route get %s on %s: %v: %s", host, n.Name, err, b)
		}
		out = append(out, n.Name+": "+strings.TrimSpace(string(b)))
	}
	return out
}

// steerable is what a peer's announcement could move on a cluster: its
// Tunnel's mappings, the fabric's routes and rules on every node, and each
// node's path to its API server.
type steerable struct {
	mappings      []offloadv1alpha1.CIDRMapping
	routes, paths []string
}

func readSteerable(ctx context.Context, t *testing.T, c *localcluster.Cluster, tunnel client.ObjectKey) steerable {
	t.Helper()
	var tn offloadv1alpha1.Tunnel
	if err := ctrlClient(t, c).Get(ctx, tunnel, &tn); err != nil {
		t.Fatal(err)
	}
	return steerable{mappings: tn.Spec.Mappings, routes: fabricRoutes(t, c), paths: apiServerPaths(t, c)}
}

// expectNothingMoved checks that c holds what it held before an
// announcement, and that its node is Ready.
func expectNothingMoved(ctx context.Context, t *testing.T, c *localcluster.Cluster, tunnel client.ObjectKey, before steerable) {
	t.Helper()
	now := readSteerable(ctx, t, c, tunnel)
	if !slices.Equal(now.mappings, before.mappings) {
		t.Errorf("the %s's Tunnel maps %v after the announcement, %v before", c.Name, now.mappings, before.mappings)
	}
	for _, d := range []struct {
		what        string
		now, before []string
	}{{"fabric routes and rules", now.routes, before.routes}, {"nodes' paths to their API server", now.paths, before.paths}} {
		if !slices.Equal(d.now, d.before) {
			t.Errorf("the %s's %s changed:\n%s\nbefore:\n%s", c.Name, d.what, strings.Join(d.now, "\n"), strings.Join(d.before, "\n"))
		}
	}
	if ready := nodeReady(ctx, c, c.Node.Name); ready != corev1.ConditionTrue {
		t.Errorf("the %s's node is %q after the announcement", c.Name, ready)
	}
}

// expectAProviderCannotSteerTheConsumersRoutes plays a provider that uses
// its own admin rights to announce, in the status of the consumer's
// NetworkPeering, the cloud metadata address, half the internet, and the
// consumer node's and API server's addresses as its pod CIDRs. The
// consumer refuses them all (NetworkReady=False RefusedPodCIDRs, and the
// provider is told), and nothing moves on the consumer: the same Tunnel,
// the same routes on every node, the same path to its API server, its node
// Ready. The provider's agent is stopped meanwhile (it would put its real
// status back), and started again at the end.
func expectAProviderCannotSteerTheConsumersRoutes(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster) {
	t.Helper()
	cc, pc := ctrlClient(t, consumer), ctrlClient(t, provider)
	clientKey := client.ObjectKey{Namespace: localcluster.InstallNamespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, provider.Name)}
	before := readSteerable(ctx, t, consumer, clientKey)
	h := readHeldCredentials(ctx, t, consumer, provider.Name)
	npKey := client.ObjectKey{Namespace: h.namespace, Name: offloadv1alpha1.NetworkPeeringName}
	fcKey := client.ObjectKey{Name: provider.Name}
	// nudge makes the consumer read the provider's answer now rather than
	// at its next poll (a minute once established).
	nudge := func(ctx context.Context) {
		patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"e2e.offload.io/nudge":%q}}}`, time.Now().Format(time.RFC3339Nano)))
		_ = cc.Patch(ctx, &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: provider.Name}}, client.RawPatch(types.MergePatchType, patch))
	}
	networkReady := func(what string, want func(*metav1.Condition) bool) {
		t.Helper()
		waitFor(ctx, t, time.Minute, what, func(ctx context.Context) (bool, string) {
			var fc offloadv1alpha1.ForeignCluster
			if err := cc.Get(ctx, fcKey, &fc); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(fc.Status.Conditions, offloadv1alpha1.ConditionNetworkReady)
			if c != nil && want(c) {
				return true, ""
			}
			nudge(ctx)
			return false, fmt.Sprintf("%+v", c)
		})
	}

	scaleAgent(ctx, t, provider, 0)
	start := time.Now()
	hostile := []string{"169.254.169.254/32", "128.0.0.0/1", consumer.Node.IP + "/32", apiServerHost(consumer) + "/32"}
	var np offloadv1alpha1.NetworkPeering
	if err := pc.Get(ctx, npKey, &np); err != nil {
		t.Fatal(err)
	}
	np.Status.PodCIDRs = hostile
	if err := pc.Status().Update(ctx, &np); err != nil {
		t.Fatalf("the provider's admin could not write the NetworkPeering's status: %v", err)
	}
	networkReady("the consumer to refuse "+strings.Join(hostile, ","), func(c *metav1.Condition) bool {
		return c.Status == metav1.ConditionFalse && c.Reason == network.ReasonRefusedPodCIDRs
	})
	expectNothingMoved(ctx, t, consumer, clientKey, before)
	waitFor(ctx, t, time.Minute, "the consumer to tell the provider of its refusal", func(ctx context.Context) (bool, string) {
		if err := pc.Get(ctx, npKey, &np); err != nil {
			return false, err.Error()
		}
		v := np.Annotations[network.AnnotationRefusedAnnouncement]
		return strings.HasPrefix(v, network.ReasonRefusedPodCIDRs+": "), v
	})

	t.Logf("the consumer refused the provider's announcement of %s and told it, %s after it was written; nothing moved",
		strings.Join(hostile, ","), time.Since(start).Round(time.Millisecond))
	scaleAgent(ctx, t, provider, 1)
	networkReady("the consumer to take the provider's real answer again", func(c *metav1.Condition) bool {
		return c.Status == metav1.ConditionTrue
	})
}

// expectAConsumerCannotSteerTheProvidersRoutes plays a consumer that uses
// its tenant credentials to announce, in its NetworkPeering, the cloud
// metadata address, half the internet, and the provider node's own address
// and API server address as its pod CIDRs. The provider refuses or holds
// each announcement, says so in the NetworkPeering's Ready, and nothing
// moves: no route on any provider node, the same Tunnel, the same
// endpoint-cidrs; its control plane stays Ready. The consumer's agent is
// stopped meanwhile, as a hostile consumer would not run it (it would put
// its announcement back); the real announcement is put back at the end.
func expectAConsumerCannotSteerTheProvidersRoutes(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster) {
	t.Helper()
	scaleAgent(ctx, t, consumer, 0)
	defer scaleAgent(ctx, t, consumer, 1)
	h := readHeldCredentials(ctx, t, consumer, "provider")
	tenant, err := client.New(h.config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	serverKey := client.ObjectKey{Namespace: localcluster.InstallNamespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelServer, consumer.Name)}
	before := readSteerable(ctx, t, provider, serverKey)
	apiHost := apiServerHost(provider)
	var np offloadv1alpha1.NetworkPeering
	key := client.ObjectKey{Namespace: h.namespace, Name: offloadv1alpha1.NetworkPeeringName}
	if err := tenant.Get(ctx, key, &np); err != nil {
		t.Fatal(err)
	}
	honest := slices.Clone(np.Spec.PodCIDRs)
	for _, tc := range []struct {
		name   string
		cidrs  []string
		reason string
	}{
		{"cloud metadata", []string{"169.254.169.254/32"}, network.ReasonRefusedPodCIDRs},
		{"half the internet", []string{"128.0.0.0/1"}, network.ReasonRefusedPodCIDRs},
		{"the provider node's address", append(slices.Clone(honest), provider.Node.IP+"/32"), network.ReasonRefusedPodCIDRs},
		{"the provider's API server address", append(slices.Clone(honest), apiHost+"/32"), network.ReasonRefusedPodCIDRs},
		{"the provider node's network", []string{provider.Node.IP + "/24"}, network.ReasonPodCIDRsChanged},
	} {
		t.Run("a consumer announcing "+tc.name, func(t *testing.T) {
			if err := tenant.Get(ctx, key, &np); err != nil {
				t.Fatal(err)
			}
			np.Spec.PodCIDRs = tc.cidrs
			if err := tenant.Update(ctx, &np); err != nil {
				t.Fatalf("the tenant credentials could not write the NetworkPeering: %v", err)
			}
			gen := np.Generation
			waitFor(ctx, t, time.Minute, "the provider's answer to "+strings.Join(tc.cidrs, ","), func(ctx context.Context) (bool, string) {
				if err := tenant.Get(ctx, key, &np); err != nil {
					return false, err.Error()
				}
				c := meta.FindStatusCondition(np.Status.Conditions, offloadv1alpha1.ConditionReady)
				return c != nil && c.ObservedGeneration == gen && c.Status == metav1.ConditionFalse && c.Reason == tc.reason, fmt.Sprintf("%+v", c)
			})
			expectNothingMoved(ctx, t, provider, serverKey, before)
		})
	}
	if err := tenant.Get(ctx, key, &np); err != nil {
		t.Fatal(err)
	}
	np.Spec.PodCIDRs = honest
	if err := tenant.Update(ctx, &np); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, time.Minute, "the provider to serve the consumer's real announcement again", func(ctx context.Context) (bool, string) {
		if err := tenant.Get(ctx, key, &np); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(np.Status.Conditions, offloadv1alpha1.ConditionReady)
		return c != nil && c.ObservedGeneration == np.Generation && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", c)
	})
	if ready := nodeReady(ctx, provider, provider.Node.Name); ready != corev1.ConditionTrue {
		t.Errorf("the provider's node is %q after the announcements", ready)
	}
}
