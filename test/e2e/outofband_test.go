package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peer"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// generate runs peer generate -o json on the provider and returns the
// arguments of the command it prints.
func generate(t *testing.T, provider *framework.Cluster, args ...string) peer.PeerCommandArgs {
	t.Helper()
	var pc peer.PeerCommand
	if err := jsonUnmarshal(mustOffload(t, provider, append([]string{"peer", "generate", "-o", "json"}, args...)...), &pc); err != nil {
		t.Fatalf("peer generate -o json: %v", err)
	}
	return peer.PeerCommandArgs{Name: pc.Name, AuthURL: pc.AuthURL, ClusterID: pc.ClusterID, AuthToken: pc.AuthToken, CACertHash: pc.CACertHash}
}

// shellPeerArgs reads line as a POSIX shell does and returns the arguments
// of kubectl offload peer out-of-band it passes.
func shellPeerArgs(t *testing.T, line string) peer.PeerCommandArgs {
	t.Helper()
	positional, flags := framework.ShellCommand(t, line)
	if len(positional) != 4 || strings.Join(positional[:3], " ") != "offload peer out-of-band" || len(flags) != 4 {
		t.Fatalf("the shell reads %q as kubectl %v %v, want kubectl offload peer out-of-band NAME and 4 flags", line, positional, flags)
	}
	return peer.PeerCommandArgs{Name: positional[3], AuthURL: flags[peer.AuthURLFlag], ClusterID: flags[peer.ClusterIDFlag],
		AuthToken: flags[peer.AuthTokenFlag], CACertHash: flags[peer.CACertHashFlag]}
}

// outOfBand runs the command on the consumer, as a user pastes it.
func outOfBand(t *testing.T, consumer *framework.Cluster, a peer.PeerCommandArgs, extra ...string) (string, error) {
	t.Helper()
	args := append(strings.Fields(strings.TrimPrefix(a.Command(), "kubectl offload ")), extra...)
	_, errOut, err := offload(t, consumer, args...)
	return errOut, err
}

// expectNoPeeringLeft checks that nothing of a peering is left on either
// side. A tenant namespace takes a moment to be deleted, so it is waited for.
func expectNoPeeringLeft(ctx context.Context, t *testing.T, consumer, provider *framework.Cluster, name string) {
	t.Helper()
	err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: name}, &offloadv1alpha1.ForeignCluster{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("ForeignCluster %s is left on the consumer (err=%v)", name, err)
	}
	var tenants offloadv1alpha1.TenantList
	if err := ctrlClient(t, provider).List(ctx, &tenants); err != nil {
		t.Fatal(err)
	}
	if len(tenants.Items) != 0 {
		t.Errorf("the provider has tenants left: %v", tenants.Items)
	}
	ns := "offload-tenant-" + consumer.Name
	var nsErr error
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, nsErr = provider.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(nsErr), nil
	})
	if !apierrors.IsNotFound(nsErr) {
		t.Errorf("tenant namespace %s left on the provider (err=%v)", ns, nsErr)
	}
}

// peerableClusters starts a consumer and a provider, each with a real node
// running the agent installed with extra, and waits until the agent pods
// are Ready and the provider's auth CA exists.
func peerableClusters(ctx context.Context, t *testing.T, extra ...string) (consumer, provider *framework.Cluster) {
	t.Helper()
	return peerableClustersWith(ctx, t,
		framework.ClusterOptions{Name: "consumer", FakeNodes: 1, RealNode: true},
		framework.ClusterOptions{Name: "provider", FakeNodes: 2, RealNode: true},
		extra...)
}

// peerableClustersWith starts a consumer and a provider with the agent
// installed and running on each one's real node.
func peerableClustersWith(ctx context.Context, t *testing.T, consumerOpts, providerOpts framework.ClusterOptions, extra ...string) (consumer, provider *framework.Cluster) {
	t.Helper()
	clusters := framework.StartClusters(t, consumerOpts, providerOpts)
	installPeerable(ctx, t, clusters[0], clusters[1], extra...)
	return clusters[0], clusters[1]
}

// installPeerable installs the agent with extra on a consumer and a
// provider at once, each advertising the API server URL peers reach, and
// waits until the agent pods are Ready and the provider's auth CA exists:
// the first half of the peered-pair fixture (framework.InstallPair).
func installPeerable(ctx context.Context, t *testing.T, consumer, provider *framework.Cluster, extra ...string) {
	t.Helper()
	start := time.Now()
	if err := framework.InstallPair(ctx, consumer, provider, framework.PairOptions{Bin: binDir, Install: extra}); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl offload install on %s and %s, agents Ready: %s", consumer.Name, provider.Name, time.Since(start).Round(time.Millisecond))
}

// peeredClustersWith starts a consumer and a provider and peers them with
// the peered-pair fixture (framework.StartPeeredPair): install with extra,
// peer generate with generateArgs, and the printed command, which returns
// once the virtual node is Ready.
func peeredClustersWith(ctx context.Context, t *testing.T, consumerOpts, providerOpts framework.ClusterOptions, generateArgs []string, extra ...string) *framework.PeeredPair {
	t.Helper()
	clusters := framework.StartClusters(t, consumerOpts, providerOpts)
	p, err := framework.StartPeeredPair(ctx, clusters[0], clusters[1], framework.PairOptions{Bin: binDir, Install: extra, Generate: generateArgs})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("peer out-of-band to node offload-%s Ready: %s", p.Peer.Name, p.OutOfBand.Round(time.Millisecond))
	return p
}

// peerArgs are the flags of the command the fixture ran.
func peerArgs(pc framework.PeerCommand) peer.PeerCommandArgs {
	return peer.PeerCommandArgs{Name: pc.Name, AuthURL: pc.AuthURL, ClusterID: pc.ClusterID, AuthToken: pc.AuthToken, CACertHash: pc.CACertHash}
}

func TestPeerOutOfBandAuthenticatesTheConsumerAndRefusesBadInput(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	consumer, provider := peerableClusters(ctx, t)

	bad := []struct {
		name string
		edit func(*peer.PeerCommandArgs)
		want string
	}{
		{"a wrong CA hash", func(a *peer.PeerCommandArgs) { a.CACertHash = "sha256:" + strings.Repeat("ab", 32) }, "does not match"},
		{"a wrong cluster ID", func(a *peer.PeerCommandArgs) { a.ClusterID = "00000000-0000-4000-8000-000000000000" }, "check --cluster-id"},
		{"an unknown token", func(a *peer.PeerCommandArgs) { a.AuthToken = "abcdef.0123456789abcdef" }, "token"},
		{"an unreachable auth URL", func(a *peer.PeerCommandArgs) { a.AuthURL = "https://" + provider.Node.IP + ":1" }, "cannot reach the auth service"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			a := generate(t, provider)
			tc.edit(&a)
			// An unreachable URL keeps the agent retrying until --timeout.
			errOut, err := outOfBand(t, consumer, a, "--timeout", "20s")
			if err == nil || !strings.Contains(strings.ToLower(errOut), strings.ToLower(tc.want)) {
				t.Errorf("peer out-of-band with %s: err=%v, stderr %q; want a failure mentioning %q", tc.name, err, errOut, tc.want)
			}
			if strings.Contains(errOut, strings.SplitN(a.AuthToken, ".", 2)[1]) {
				t.Errorf("the error output shows the token's secret")
			}
			expectNoPeeringLeft(ctx, t, consumer, provider, a.Name)
		})
	}
	t.Run("an expired token", func(t *testing.T) {
		a := generate(t, provider, "--ttl", "1s")
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return strings.Contains(mustOffload(t, provider, "peer", "tokens", "list"), "expired"), nil
		})
		errOut, err := outOfBand(t, consumer, a, "--timeout", "45s")
		if err == nil || !strings.Contains(errOut, "kubectl offload peer generate") {
			t.Errorf("an expired token: err=%v, stderr %q; want the advice to generate a new one", err, errOut)
		}
		expectNoPeeringLeft(ctx, t, consumer, provider, a.Name)
	})

	// The happy path: the printed command, verbatim.
	a := generate(t, provider)
	start := time.Now()
	if errOut, err := outOfBand(t, consumer, a, "--timeout", "2m"); err != nil {
		t.Fatalf("peer out-of-band: %v\n%s", err, errOut)
	}
	t.Logf("peer out-of-band, waiting for VirtualNodeReady: %s", time.Since(start).Round(time.Millisecond))
	var fc offloadv1alpha1.ForeignCluster
	if err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: a.Name}, &fc); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(fc.Status.Conditions, offloadv1alpha1.ConditionAuthenticated) {
		t.Errorf("ForeignCluster %s is not Authenticated: %+v", a.Name, fc.Status)
	}
	if _, err := consumer.Kube.CoreV1().Secrets(installNS).Get(ctx, peering.PeerKubeconfigSecretName(a.Name), metav1.GetOptions{}); err != nil {
		t.Errorf("no kubeconfig Secret for the peer: %v", err)
	}
	if _, err := consumer.Kube.CoreV1().Secrets(installNS).Get(ctx, peering.PeerTokenSecretName(a.Name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the spent token Secret is still on the consumer (err=%v)", err)
	}
	var tenant offloadv1alpha1.Tenant
	if err := ctrlClient(t, provider).Get(ctx, client.ObjectKey{Name: consumer.Name}, &tenant); err != nil {
		t.Errorf("no Tenant for the consumer on the provider: %v", err)
	}
	expectVirtualNodeReady(ctx, t, consumer, provider, a.Name, tenant.Spec.TenantNamespace)
	t.Logf("peer out-of-band to node %s Ready with the offer's allocatable: %s", "offload-"+a.Name, time.Since(start).Round(time.Millisecond))
	// Running the command again changes nothing and succeeds.
	if errOut, err := outOfBand(t, consumer, a, "--timeout", "1m"); err != nil {
		t.Errorf("running peer out-of-band again: %v\n%s", err, errOut)
	}

	// With the agent down, unpeer --force removes the agent's finalizers
	// and nothing else: every part of the peering is the ForeignCluster's,
	// and the garbage collector takes them.
	t.Run("unpeer --force with the agent down", func(t *testing.T) {
		scaleAgent(ctx, t, consumer, 0)
		defer scaleAgent(ctx, t, consumer, 1)
		out := mustOffload(t, consumer, "unpeer", a.Name, "--force", "--timeout", "2m")
		t.Logf("unpeer --force:\n%s", out)
		if err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: a.Name}, &offloadv1alpha1.ForeignCluster{}); !apierrors.IsNotFound(err) {
			t.Errorf("ForeignCluster %s is left (err=%v)", a.Name, err)
		}
		expectPeeringPartsGone(ctx, t, consumer, a.Name)
	})
}

// expectVirtualNodeReady waits until the consumer's node offload-<name> is
// Ready with the allocatable resources of the provider's ResourceOffer.
func expectVirtualNodeReady(ctx context.Context, t *testing.T, consumer, provider *framework.Cluster, name, tenantNamespace string) {
	t.Helper()
	var fc offloadv1alpha1.ForeignCluster
	if err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: name}, &fc); err != nil {
		t.Fatal(err)
	}
	var node corev1.Node
	var offer offloadv1alpha1.ResourceOffer
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := ctrlClient(t, provider).Get(ctx, client.ObjectKey{Namespace: tenantNamespace, Name: fc.Spec.ClusterName}, &offer); err != nil {
			return false, nil
		}
		if err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: "offload-" + name}, &node); err != nil {
			return false, nil
		}
		ready := false
		for _, c := range node.Status.Conditions {
			ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}
		return ready && sameResources(node.Status.Allocatable, offer.Spec.Resources), nil
	})
	if err != nil {
		t.Fatalf("node offload-%s is not Ready with the offer's resources %v: conditions %+v, allocatable %v",
			name, offer.Spec.Resources, node.Status.Conditions, node.Status.Allocatable)
	}
	if node.Labels["offload.io/type"] != "virtual-node" || node.Labels["offload.io/remote-cluster-id"] != fc.Spec.ClusterID {
		t.Errorf("node offload-%s has labels %v", name, node.Labels)
	}
	if err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: name}, &fc); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(fc.Status.Conditions, offloadv1alpha1.ConditionOutgoingPeering) || fc.Status.Outgoing != offloadv1alpha1.PhaseEstablished {
		t.Errorf("ForeignCluster %s: outgoing peering is not Established: %+v", name, fc.Status)
	}
}

// sameResources reports whether a and b hold the same quantities.
func sameResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}
