package e2e

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peer"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// credentialLifetime is the shortest lifetime a ServiceAccount token can
// have: the TokenRequest API refuses less than 10 minutes.
const credentialLifetime = 10 * time.Minute

// credentialGrace is how long replaced credentials keep working (the
// chart's auth.credentialGraceSeconds default).
const credentialGrace = time.Minute

// peerArgs are the flags of the command the fixture ran.
func peerArgs(pc localcluster.PeerCommand) peer.PeerCommandArgs {
	return peer.PeerCommandArgs{Name: pc.Name, AuthURL: pc.AuthURL, ClusterID: pc.ClusterID, AuthToken: pc.AuthToken, CACertHash: pc.CACertHash}
}

func TestPeeringSurvivesAnOutageRotatesCredentialsAndUnpeersCleanly(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute+2*(frozenOutage(t)-defaultFrozenOutage))
	defer cancel()
	// The agents log at the highest verbosity: expectNoSecretInLogs reads them.
	pair := peeredClustersWith(ctx, t,
		localcluster.ClusterOptions{Name: "consumer", FakeNodes: 1, RealNode: true},
		localcluster.ClusterOptions{Name: "provider", FakeNodes: 2, RealNode: true}, nil,
		"--set", "auth.credentialExpirationSeconds="+strconv.FormatInt(int64(credentialLifetime/time.Second), 10),
		"--set", "logVerbosity=10")
	consumer, provider, a := pair.Consumer, pair.Provider, peerArgs(pair.Peer)
	node := "offload-" + a.Name
	var tenant offloadv1alpha1.Tenant
	if err := ctrlClient(t, provider).Get(ctx, client.ObjectKey{Name: consumer.Name}, &tenant); err != nil {
		t.Fatalf("no Tenant for the consumer: %v", err)
	}

	// The chapters, each a subtest that reports on its own. A chapter that
	// leaves what the next ones need stops the test when it fails; the
	// others let the rest run.
	var first heldCredentials
	if !t.Run("peered", func(t *testing.T) {
		expectVirtualNodeReady(ctx, t, consumer, provider, a.Name, tenant.Spec.TenantNamespace)
		// Read before the outages: the rotation below waits for the
		// renewal of these.
		first = readHeldCredentials(ctx, t, consumer, a.Name)
		t.Logf("credential lifetime %s (issued %s, expires %s)", first.expiry.Sub(first.issued), first.issued.Format(time.RFC3339), first.expiry.Format(time.RFC3339))
	}) {
		t.FailNow()
	}
	t.Run("doctor", func(t *testing.T) { expectDoctor(ctx, t, consumer, provider) })
	t.Run("the incoming peering", func(t *testing.T) {
		// The provider records the consumer as an incoming peering.
		if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var fc offloadv1alpha1.ForeignCluster
			if err := ctrlClient(t, provider).Get(ctx, client.ObjectKey{Name: consumer.Name}, &fc); err != nil {
				return false, nil
			}
			return fc.Status.Incoming == offloadv1alpha1.PhaseEstablished && fc.Status.Role == offloadv1alpha1.RoleProvider, nil
		}); err != nil {
			t.Errorf("the provider has no ForeignCluster %s with incoming peering Established", consumer.Name)
		}
	})

	// Outage: the provider's control plane stops; the virtual node goes
	// NotReady, and Ready again once it is back. Taken before any outage,
	// the agents' restart counts are what the frozen API servers compare to.
	var restarts map[string]map[string]int32
	if !t.Run("the provider outage", func(t *testing.T) {
		restarts = restartsByCluster(ctx, t, consumer, provider)
		if err := provider.StopControlPlane(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("provider down: node %s NotReady after %s", node, waitNodeReady(ctx, t, consumer, node, corev1.ConditionFalse, time.Minute).Round(time.Millisecond))
		if err := provider.StartControlPlane(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("provider back: node %s Ready after %s", node, waitNodeReady(ctx, t, consumer, node, corev1.ConditionTrue, 2*time.Minute).Round(time.Millisecond))
	}) {
		t.FailNow()
	}
	// Frozen API servers, each side in turn, longer than the Lease: the
	// agents serve again within seconds, and no agent container restarted
	// through this outage or the one above. Each API server is thawed by
	// the end of the chapter, failed or not.
	t.Run("frozen API servers", func(t *testing.T) {
		expectAgentsRideOutFrozenAPIServers(ctx, t, consumer, provider, node, restarts)
	})

	// Rotation: the agent renews the credentials before they expire, the
	// provider revokes the replaced ones, and the node stays Ready throughout.
	var renewed heldCredentials
	t.Run("credential rotation under an auth flood", func(t *testing.T) {
		var mu sync.Mutex
		var notReady []string
		monitorCtx, stopMonitor := context.WithCancel(ctx)
		defer stopMonitor()
		monitorDone := make(chan struct{})
		go func() {
			defer close(monitorDone)
			_ = wait.PollUntilContextCancel(monitorCtx, time.Second, true, func(ctx context.Context) (bool, error) {
				if s := nodeReady(ctx, consumer, node); s != corev1.ConditionTrue && ctx.Err() == nil {
					mu.Lock()
					notReady = append(notReady, time.Now().Format(time.RFC3339)+" Ready="+string(s))
					mu.Unlock()
				}
				return false, nil
			})
		}()
		// Meanwhile an attacker floods the provider's auth service with bad
		// tokens from the consumer node's own address, which the agent's
		// requests leave by: the flood is refused, the agent's refresh is not.
		flood := startAuthFlood(ctx, consumer.Node.NetNS, a.AuthURL, 4) // half the connections a source may hold
		var held heldCredentials
		if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, time.Until(first.expiry), true, func(ctx context.Context) (bool, error) {
			held = readHeldCredentials(ctx, t, consumer, a.Name)
			return held.tokenFingerprint != first.tokenFingerprint, nil
		}); err != nil {
			flood.end()
			t.Fatalf("the credentials were not renewed before they expired at %s, during a flood of bad tokens from the consumer node's address", first.expiry.Format(time.RFC3339))
		}
		renewed = held
		answers, failed := flood.end()
		t.Logf("the flood from %s got %v (HTTP status: count) and %d requests without an answer", consumer.Node.IP, answers, failed)
		if answers[http.StatusTooManyRequests] == 0 {
			t.Errorf("the flood of bad tokens from %s was never refused with 429: it did not reach the limiter, so the renewal proves nothing: %v, %d failed", consumer.Node.IP, answers, failed)
		}
		// The address the auth service refused the flood from is the one it
		// saw the consumer's refresh come from (both logged).
		if logs, err := kubectl(t, provider, "-n", localcluster.InstallNamespace, "logs", "deployment/"+offloadv1alpha1.Auth, "--tail=-1"); err != nil {
			t.Errorf("reading the auth service's logs: %v", err)
		} else if refreshed, refused := logSources(logs, "Refreshed credentials"), logSources(logs, "Refusing requests from a source"); len(refreshed) == 0 ||
			!slices.Contains(refused, refreshed[len(refreshed)-1]) {
			t.Errorf("the auth service saw the refresh come from %v and refused the flood from %v: not the same address, so the flood did not share the consumer's", refreshed, refused)
		} else {
			t.Logf("the auth service refused the flood from %s, the address of the consumer's refresh", refreshed[len(refreshed)-1])
		}
		t.Logf("credentials renewed %s after issue (%s before expiry); new expiry %s",
			renewed.issued.Sub(first.issued).Round(time.Second), first.expiry.Sub(renewed.issued).Round(time.Second), renewed.expiry.Format(time.RFC3339))
		if !renewed.expiry.After(first.expiry) {
			t.Errorf("renewed credentials expire at %s, not after the first ones (%s)", renewed.expiry, first.expiry)
		}
		// The replaced credentials stop working once the grace period
		// (auth.credentialGraceSeconds, 60 s) has passed, long before they
		// expire. The API server caches a validated token for 10 s, hence the
		// bound of grace + 30 s.
		var revokedErr error
		_ = wait.PollUntilContextTimeout(ctx, time.Second, credentialGrace+30*time.Second, true, func(ctx context.Context) (bool, error) {
			revokedErr = readOffer(ctx, first, a.Name)
			return apierrors.IsUnauthorized(revokedErr), nil
		})
		switch {
		case !apierrors.IsUnauthorized(revokedErr):
			t.Errorf("the replaced credentials still read the offer %s after they were replaced: err=%v, want 401", time.Since(renewed.issued).Round(time.Second), revokedErr)
		case !time.Now().Before(first.expiry):
			t.Errorf("the replaced credentials were revoked only at their expiry (%s)", first.expiry.Format(time.RFC3339))
		default:
			t.Logf("the replaced credentials were refused (401) %s after the renewal, %s before their expiry",
				time.Since(renewed.issued).Round(time.Second), time.Until(first.expiry).Round(time.Second))
		}
		if err := readOffer(ctx, readHeldCredentials(ctx, t, consumer, a.Name), a.Name); err != nil {
			t.Errorf("the renewed credentials do not read the offer: %v", err)
		}
		stopMonitor()
		<-monitorDone
		mu.Lock()
		if len(notReady) > 0 {
			t.Errorf("node %s was not Ready across the credential expiry: %v", node, notReady)
		}
		mu.Unlock()
		if err := readOffer(ctx, renewed, a.Name); err != nil {
			t.Errorf("the renewed credentials cannot read the offer: %v", err)
		}
	})

	// Through peering, outages and a rotation, each status has one writer.
	t.Run("one writer per status", func(t *testing.T) { expectOneWriterPerStatus(ctx, t, consumer, provider, a.Name) })

	// status peer shows the peering healthy.
	t.Run("status peer", func(t *testing.T) {
		doc := mustOffload(t, consumer, "status", "peer", a.Name, "-o", "json")
		if !jsonBool(t, doc, "healthy") {
			t.Errorf("status peer %s is not healthy:\n%s", a.Name, doc)
		}
	})

	// unpeer checks that the renewed credentials stop working, and that no
	// log holds them: without them there is nothing to check.
	if renewed.config == nil {
		t.Fatal("the credentials were never renewed: unpeer has no renewed credentials to check")
	}
	// unpeer: the credentials stop working at once, and nothing is left.
	if !t.Run("unpeer, and nothing left", func(t *testing.T) {
		start := time.Now()
		if out := mustOffload(t, consumer, "unpeer", a.Name); !strings.Contains(out, "unpeered "+a.Name) {
			t.Errorf("unpeer printed %q", out)
		}
		t.Logf("unpeer: %s", time.Since(start).Round(time.Millisecond))
		revoked := time.Now()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			err := readOffer(ctx, renewed, a.Name)
			return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err), nil
		}); err != nil {
			t.Errorf("the consumer's credentials still work after unpeer")
		}
		t.Logf("old credentials rejected %s after unpeer returned", time.Since(revoked).Round(time.Millisecond))
		// Through peering, rotation and unpeer, at -v=10, no log line of either
		// side holds the peering token or a credential.
		expectNoSecretInLogs(t, []*localcluster.Cluster{consumer, provider},
			a.AuthToken, first.config.BearerToken, renewed.config.BearerToken)
		expectNoPeeringLeft(ctx, t, consumer, provider, a.Name)
		if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			err := ctrlClient(t, provider).Get(ctx, client.ObjectKey{Name: consumer.Name}, &offloadv1alpha1.ForeignCluster{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Errorf("the provider's ForeignCluster %s is left after unpeer", consumer.Name)
		}
		expectPeeringPartsGone(ctx, t, consumer, a.Name)
		if _, err := provider.Kube.CoreV1().ServiceAccounts(tenant.Spec.TenantNamespace).Get(ctx, offloadv1alpha1.ConsumerServiceAccount, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the consumer's ServiceAccount is left on the provider (err=%v)", err)
		}
	}) {
		t.FailNow()
	}

	// The spent single-use token cannot peer again.
	t.Run("the spent token cannot peer again", func(t *testing.T) {
		errOut, err := outOfBand(t, consumer, a, "--timeout", "45s")
		if err == nil || !strings.Contains(errOut, "used") {
			t.Errorf("peering again with the spent token: err=%v, stderr %q; want a refusal saying it was used", err, errOut)
		}
		expectNoPeeringLeft(ctx, t, consumer, provider, a.Name)
	})
}

// statusWriters are the field managers of obj's status.
func statusWriters(obj client.Object) []string {
	var out []string
	for _, m := range obj.GetManagedFields() {
		if m.Subresource == "status" {
			out = append(out, m.Manager)
		}
	}
	slices.Sort(out)
	return out
}

// expectOneWriterPerStatus checks who wrote the status of the peering's
// objects: on both sides, only the summary controller wrote the
// ForeignClusters' status; each of the consumer's PeeringCredentials and
// VirtualNode has one writer and is owned by the ForeignCluster; each
// side's Tunnel has two, each with fields of its own: the gateway (the
// data path) and the network controller (the peering's network, which
// the ForeignCluster mirrors).
func expectOneWriterPerStatus(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, peer string) {
	t.Helper()
	for _, side := range []struct {
		c    *localcluster.Cluster
		name string
		want []string
	}{{consumer, peer, []string{"offload-summary"}}, {provider, consumer.Name, []string{"offload-summary"}}} {
		var fc offloadv1alpha1.ForeignCluster
		if err := ctrlClient(t, side.c).Get(ctx, client.ObjectKey{Name: side.name}, &fc); err != nil {
			t.Errorf("reading ForeignCluster %s on %s: %v", side.name, side.c.Name, err)
			continue
		}
		if got := statusWriters(&fc); !slices.Equal(got, side.want) {
			t.Errorf("the status of ForeignCluster %s on %s has writers %v, want %v", side.name, side.c.Name, got, side.want)
		}
	}
	for _, side := range []struct {
		c    *localcluster.Cluster
		name string
	}{{consumer, offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, peer)}, {provider, offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelServer, consumer.Name)}} {
		var tunnel offloadv1alpha1.Tunnel
		if err := ctrlClient(t, side.c).Get(ctx, client.ObjectKey{Namespace: localcluster.InstallNamespace, Name: side.name}, &tunnel); err != nil {
			t.Errorf("reading Tunnel %s on %s: %v", side.name, side.c.Name, err)
			continue
		}
		if got, want := statusWriters(&tunnel), []string{"offload-gateway", "offload-network"}; !slices.Equal(got, want) {
			t.Errorf("the status of Tunnel %s on %s has writers %v, want %v", side.name, side.c.Name, got, want)
		}
	}
	var fc offloadv1alpha1.ForeignCluster
	if err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: peer}, &fc); err != nil {
		t.Fatal(err)
	}
	for _, child := range []struct {
		obj    client.Object
		writer string
	}{{&offloadv1alpha1.PeeringCredentials{}, "offload-credentials"}, {&offloadv1alpha1.VirtualNode{}, "offload-virtual-node"}} {
		if err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: peer}, child.obj); err != nil {
			t.Errorf("no %T %s on the consumer: %v", child.obj, peer, err)
			continue
		}
		if got := statusWriters(child.obj); !slices.Equal(got, []string{child.writer}) {
			t.Errorf("the status of %T %s has writers %v, want %s alone", child.obj, peer, got, child.writer)
		}
		if !metav1.IsControlledBy(child.obj, &fc) {
			t.Errorf("%T %s is not owned by ForeignCluster %s: %v", child.obj, peer, peer, child.obj.GetOwnerReferences())
		}
	}
}

// jwtLike matches a JSON Web Token: a ServiceAccount token of any identity.
var jwtLike = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.`)

// expectNoSecretInLogs reads the logs of the controller-manager and the
// auth service of every cluster, every container and restart, and fails on
// any of the secrets, their secret halves (the part after the dot of a
// peering token), any JWT or any private key.
func expectNoSecretInLogs(t *testing.T, clusters []*localcluster.Cluster, secrets ...string) {
	t.Helper()
	var needles []string
	for _, s := range secrets {
		needles = append(needles, s)
		if _, half, ok := strings.Cut(s, "."); ok && len(half) >= 16 && !strings.Contains(half, ".") {
			needles = append(needles, half)
		}
	}
	lines := 0
	for _, c := range clusters {
		for _, d := range []string{offloadv1alpha1.ControllerManager, offloadv1alpha1.Auth} {
			logs, err := kubectl(t, c, "-n", localcluster.InstallNamespace, "logs", "deployment/"+d, "--all-containers", "--tail=-1")
			if err != nil {
				t.Fatalf("reading the logs of %s on %s: %v", d, c.Name, err)
			}
			lines += strings.Count(logs, "\n")
			for _, n := range needles {
				if n != "" && strings.Contains(logs, n) {
					t.Errorf("the logs of %s on %s hold a token or credential", d, c.Name)
				}
			}
			if jwtLike.MatchString(logs) || strings.Contains(logs, "PRIVATE KEY") {
				t.Errorf("the logs of %s on %s hold a JWT or a private key", d, c.Name)
			}
		}
	}
	t.Logf("read %d log lines at -v=10 of both agents on %d clusters: no token, credential or key", lines, len(clusters))
}

// sourceRE is the source address in an auth service log line.
var sourceRE = regexp.MustCompile(`source="([^"]+)"`)

// logSources are the source addresses of the log lines holding msg, in
// order.
func logSources(logs, msg string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if m := sourceRE.FindStringSubmatch(l); m != nil && strings.Contains(l, msg) {
			out = append(out, m[1])
		}
	}
	return out
}
