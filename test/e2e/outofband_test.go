package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peer"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// peerableClusters starts a consumer and a provider, each with a real node
// running the agent installed with extra, and waits until the agent pods
// are Ready and the provider's auth CA exists.
func peerableClusters(ctx context.Context, t *testing.T, extra ...string) (consumer, provider *localcluster.Cluster) {
	t.Helper()
	return peerableClustersWith(ctx, t,
		localcluster.ClusterOptions{Name: "consumer", FakeNodes: 1, RealNode: true},
		localcluster.ClusterOptions{Name: "provider", FakeNodes: 2, RealNode: true},
		extra...)
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

	// The happy path: the printed command, verbatim. The chapters after it
	// need the peering: it stops the test when it fails.
	var a peer.PeerCommandArgs
	if !t.Run("the printed command peers", func(t *testing.T) {
		a = generate(t, provider)
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
		if _, err := consumer.Kube.CoreV1().Secrets(localcluster.InstallNamespace).Get(ctx, peering.PeerKubeconfigSecretName(a.Name), metav1.GetOptions{}); err != nil {
			t.Errorf("no kubeconfig Secret for the peer: %v", err)
		}
		if _, err := consumer.Kube.CoreV1().Secrets(localcluster.InstallNamespace).Get(ctx, peering.PeerTokenSecretName(a.Name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the spent token Secret is still on the consumer (err=%v)", err)
		}
		var tenant offloadv1alpha1.Tenant
		if err := ctrlClient(t, provider).Get(ctx, client.ObjectKey{Name: consumer.Name}, &tenant); err != nil {
			t.Errorf("no Tenant for the consumer on the provider: %v", err)
		}
		expectVirtualNodeReady(ctx, t, consumer, provider, a.Name, tenant.Spec.TenantNamespace)
		t.Logf("peer out-of-band to node %s Ready with the offer's allocatable: %s", "offload-"+a.Name, time.Since(start).Round(time.Millisecond))
	}) {
		t.FailNow()
	}
	// Running the command again changes nothing and succeeds.
	t.Run("running it again changes nothing", func(t *testing.T) {
		if errOut, err := outOfBand(t, consumer, a, "--timeout", "1m"); err != nil {
			t.Errorf("running peer out-of-band again: %v\n%s", err, errOut)
		}
	})

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
