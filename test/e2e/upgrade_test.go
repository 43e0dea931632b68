package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/install"
	"github.com/kubectl-offload/kubectl-offload/internal/peer"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/images"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// oldReleaseCommit is the release the upgrade starts from: 788970f, the
// parent of the commit that started issue 27 ("Upgrades"), built from this
// repository's history by images.OldRelease, with no registry.
const oldReleaseCommit = "788970f6bd968859ec364973bfd88ff195758dee"

const (
	// upgradeNS is the offloaded namespace that rides through the upgrade.
	upgradeNS = "upgrade"
	// upgradeReplicas is how many offloaded pods serve its Service.
	upgradeReplicas = 20
	// agentImageRepository is the repository of both agents' images; the
	// old one is tagged images.OldAgentImageTag, the one under test "test".
	agentImageRepository = "registry.local/offload/offload-agent"
	// renewNudgeAnnotation is the test's own annotation on a ForeignCluster:
	// changing it makes the agent reconcile the peering, which renews the
	// credentials when they are due (expectCredentialsRenewed).
	renewNudgeAnnotation = "test.offload.io/renew-nudge"
	// probeInterval paces the requests through the Service.
	probeInterval = 200 * time.Millisecond
	// maxUpgradeOutage bounds how long the Service may go unanswered while
	// one side upgrades. It is not zero: the agent runs each tunnel's
	// gateway as a Deployment with the Recreate strategy (two gateways never
	// share a tunnel), so when an upgrade changes the agent image, pod
	// traffic across the fabric stops from the old gateway's exit until the
	// new one, started from an image already on the node, has its device up
	// and a handshake: seconds, as the controller-manager restarts. 30 s
	// leaves room for a busy two-core machine, and is still short of the
	// node monitor's 40 s grace, past which the virtual node would go
	// NotReady and the endpoints with it.
	maxUpgradeOutage = 30 * time.Second
)

// TestUpgradeFromTheReleaseBeforeIssue27ConsumerFirst installs the release
// before issue 27 on a consumer and a provider, peers them and offloads a
// Service's pods with its plugin, then upgrades the consumer alone (a new
// consumer with an old provider, the skew of a rolling upgrade), then the
// provider, with kubectl offload upgrade of the release under test, while
// a consumer pod calls the Service. After each step: the agents run the new
// image, no offloaded pod was recreated or restarted on either side, the
// peering, its tunnel and the cluster identities are the same, status is
// healthy on both sides, the credentials still renew, and the Service
// answers. The requests that failed during each step are counted and
// reported. Then every CRD stores only its current storage version, and
// uninstall --purge leaves nothing of either release.
func TestUpgradeFromTheReleaseBeforeIssue27ConsumerFirst(t *testing.T) {
	testUpgrade(t, upgradeConsumerFirst)
}

// TestUpgradeFromTheReleaseBeforeIssue27ProviderFirst is the same upgrade in
// the other order: the provider alone first (an old consumer with a new
// provider), then the consumer.
func TestUpgradeFromTheReleaseBeforeIssue27ProviderFirst(t *testing.T) {
	testUpgrade(t, upgradeProviderFirst)
}

// upgradeOrder is which side an upgrade test upgrades first.
type upgradeOrder bool

const (
	upgradeConsumerFirst upgradeOrder = false
	upgradeProviderFirst upgradeOrder = true
)

func testUpgrade(t *testing.T, order upgradeOrder) {
	old := oldRelease(t)
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	archives, err := images.TestImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	both := []string{old.ImageArchive}
	for _, a := range archives {
		both = append(both, a)
	}
	// Isolated, so that only the fabric carries pod traffic between them.
	clusters := localcluster.StartClusters(t,
		localcluster.ClusterOptions{Name: "consumer", RealNode: true, Isolated: true, Images: both},
		localcluster.ClusterOptions{Name: "provider", RealNode: true, Isolated: true, Images: both})
	s := &upgradeScene{consumer: clusters[0], provider: clusters[1]}

	// What either release installs: uninstall must leave none of it.
	dryRun := []string{"install", "--cluster-name", s.consumer.Name, "--dry-run", "-o", "yaml"}
	var objects []object
	for _, o := range slices.Concat(
		manifestObjects(t, mustOffloadWith(t, old.CLI, s.consumer, append(dryRun, oldReleaseValues()...)...)),
		manifestObjects(t, mustOffload(t, s.consumer, append(dryRun, localcluster.AgentValues()...)...))) {
		if !slices.Contains(objects, o) {
			objects = append(objects, o)
		}
	}

	// The chapters, each a subtest that reports on its own. The old
	// release's install, peering and offloading are what the upgrades
	// start from: they stop the test when they fail. The others let the
	// rest run.
	if !t.Run("the old release installs and peers", func(t *testing.T) { s.installAndPeer(ctx, t, old) }) {
		t.FailNow()
	}
	if !t.Run("the old release offloads the Service's pods", func(t *testing.T) {
		s.offloadApp(ctx, t, old)
		for _, c := range clusters {
			expectAgentImage(ctx, t, c, images.OldAgentImageTag)
		}
	}) {
		t.FailNow()
	}
	initial := s.state(ctx, t)
	probe := s.startProbe(ctx, t)

	first, second := s.consumer, s.provider
	if order == upgradeProviderFirst {
		first, second = s.provider, s.consumer
	}
	// One side alone first: the skew of a rolling upgrade.
	t.Run("the "+first.Name+" upgraded alone", func(t *testing.T) {
		s.upgradeStep(ctx, t, first, initial, probe)
		expectAgentImage(ctx, t, second, images.OldAgentImageTag)
	})
	t.Run("the "+second.Name+" upgraded too", func(t *testing.T) { s.upgradeStep(ctx, t, second, initial, probe) })
	t.Run("the scheduling mutation after the upgrade", func(t *testing.T) { expectSchedulingMutation(ctx, t, s.consumer) })

	t.Run("the Service answered through both upgrades", func(t *testing.T) {
		f := probe.end()
		for _, st := range f.steps {
			t.Logf("upgrade of %s: %d requests through Service web, %d failed (%.1f%%), longest outage %s, ready endpoints fewer than %d for %s (fewest %d); first failures: %q",
				st.name, st.answered+st.failed, st.failed, 100*float64(st.failed)/float64(max(1, st.answered+st.failed)), st.longestOutage.Round(time.Millisecond),
				upgradeReplicas, st.endpointsShort, st.fewestEndpoints, st.errors)
		}
		t.Logf("upgrade figures: answers from %d of %d pods, virtual node NotReady %d times", len(f.servedBy), upgradeReplicas, len(f.nodeNotReady))
		// Requests start at least probeInterval apart, so an outage of
		// maxUpgradeOutage in a step fails at most this many.
		maxFailed := int(maxUpgradeOutage/probeInterval) + 1
		for _, st := range f.steps {
			switch {
			case st.answered == 0:
				t.Errorf("the Service never answered during the upgrade of %s", st.name)
			case st.longestOutage > maxUpgradeOutage || st.failed > maxFailed:
				t.Errorf("during the upgrade of %s, the Service went unanswered for up to %s, %d requests failed; want at most %s and %d", st.name, st.longestOutage, st.failed, maxUpgradeOutage, maxFailed)
			}
		}
		if len(f.nodeNotReady) > 0 {
			t.Errorf("the virtual node %s was not Ready during the upgrade: %v", s.node(), f.nodeNotReady)
		}
	})

	t.Run("every CRD stores its current version alone", func(t *testing.T) {
		for _, c := range clusters {
			expectStoredVersionsCurrent(ctx, t, c)
		}
	})
	t.Run("uninstall --purge leaves nothing of either release", func(t *testing.T) { s.uninstall(ctx, t, objects) })
}

// oldRelease builds the release at oldReleaseCommit, once per machine,
// before the test's deadline starts: a cold build downloads and compiles
// that commit's dependencies. A clone without the commit fails the test
// with what to do, not skips it: CI clones with the full history.
func oldRelease(t *testing.T) *images.Release {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	r, err := images.OldRelease(ctx, oldReleaseCommit)
	if err != nil {
		t.Fatalf("building the release to upgrade from: %v", err)
	}
	t.Logf("release %s ready in %s (plugin %s, image %s)", r.Commit[:7], time.Since(start).Round(time.Millisecond), r.CLI, r.Image)
	return r
}

// oldReleaseValues are localcluster.AgentValues with the old agent's image.
func oldReleaseValues() []string {
	// Of two --set of one key, the last wins, as in helm.
	return append(localcluster.AgentValues(), "--set", "image.tag="+images.OldAgentImageTag)
}

// mustOffloadWith is mustOffload for the kubectl-offload binary bin.
func mustOffloadWith(t *testing.T, bin string, c *localcluster.Cluster, args ...string) string {
	t.Helper()
	return mustRunOffload(t, bin, bin, c, args...)
}

// upgradeScene is a consumer and a provider peered, with the pods of
// Service web of namespace upgradeNS offloaded from one to the other.
type upgradeScene struct {
	consumer, provider *localcluster.Cluster
	// peer is the provider's ForeignCluster on the consumer.
	peer string
	// consumerID is the consumer's cluster ID; twin its twin namespace of
	// upgradeNS on the provider.
	consumerID, twin string
	// client is the consumer pod that calls the Service.
	client corev1.Pod
}

func (s *upgradeScene) clusters() []*localcluster.Cluster {
	return []*localcluster.Cluster{s.consumer, s.provider}
}

// node is the virtual node of the peering on the consumer.
func (s *upgradeScene) node() string { return "offload-" + s.peer }

// tunnels are the two ends of the peering's tunnel.
func (s *upgradeScene) tunnels() map[*localcluster.Cluster]string {
	return map[*localcluster.Cluster]string{
		s.consumer: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, s.peer),
		s.provider: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelServer, s.consumer.Name),
	}
}

// installAndPeer installs the old release on both clusters and peers them
// out of band, all with its plugin.
func (s *upgradeScene) installAndPeer(ctx context.Context, t *testing.T, old *images.Release) {
	t.Helper()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, c := range s.clusters() {
		wg.Go(func() {
			args := append([]string{"install", "--cluster-name", c.Name, "--api-server-url", c.PeerAPIServerURL(), "--timeout", "3m"}, oldReleaseValues()...)
			if out, errOut, err := offloadWith(old.CLI, c, args...); err != nil {
				errs[i] = fmt.Errorf("installing the old release on %s: %w\nstdout: %s\nstderr: %s", c.Name, err, out, errOut)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, c := range s.clusters() {
		waitPodsReady(ctx, t, c, localcluster.InstallNamespace, "app.kubernetes.io/component=auth", 1)
		waitPodsReady(ctx, t, c, localcluster.InstallNamespace, "app.kubernetes.io/component=controller-manager", 1)
	}
	waitCASecret(ctx, t, s.provider)

	var pc peer.PeerCommand
	if err := jsonUnmarshal(mustOffloadWith(t, old.CLI, s.provider, "peer", "generate", "-o", "json"), &pc); err != nil {
		t.Fatalf("the old release's peer generate -o json: %v", err)
	}
	a := peer.PeerCommandArgs{Name: pc.Name, AuthURL: pc.AuthURL, ClusterID: pc.ClusterID, AuthToken: pc.AuthToken, CACertHash: pc.CACertHash}
	mustOffloadWith(t, old.CLI, s.consumer, append(strings.Fields(strings.TrimPrefix(a.Command(), "kubectl offload ")), "--timeout", "2m")...)
	s.peer = a.Name
	s.consumerID = identity(ctx, t, s.consumer)["clusterID"]
	s.expectPeeringUp(ctx, t)
}

// offloadApp offloads upgradeNS with the old release's plugin and runs in it
// Service web, served by upgradeReplicas pods on the virtual node, and the
// local client pod that calls it.
func (s *upgradeScene) offloadApp(ctx context.Context, t *testing.T, old *images.Release) {
	t.Helper()
	createNamespace(ctx, t, ctrlClient(t, s.consumer), upgradeNS)
	mustOffloadWith(t, old.CLI, s.consumer, "namespace", upgradeNS, "--timeout", "2m")
	web := offloadedApp("web", upgradeReplicas)
	web.Spec.Template.Spec.NodeSelector = map[string]string{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode}
	// Small requests, so that the twenty fit the offer of a provider with
	// one real node (its LimitRange would give each 100m).
	web.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}
	for _, d := range []*appsv1.Deployment{web, testAppDeployment("client", 1)} {
		if _, err := s.consumer.Kube.AppsV1().Deployments(upgradeNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: upgradeNS}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := s.consumer.Kube.CoreV1().Services(upgradeNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodsReady(ctx, t, s.consumer, upgradeNS, "app=web", upgradeReplicas)
	s.twin = offloadv1alpha1.TwinNamespace(upgradeNS, s.consumer.Name, s.consumerID)
	waitPodsReady(ctx, t, s.provider, s.twin, "app=web", upgradeReplicas)
	s.client = waitPodsReady(ctx, t, s.consumer, upgradeNS, "app=client", 1)[0]
}

// upgradeStep upgrades c, the other side staying as it is, with kubectl
// offload upgrade of the release under test, and checks that everything
// rode through: the agents of c on the new image, the peering and its
// tunnel up, status healthy on both sides, the pods, tunnel and identities
// of initial unchanged, the credentials renewing, the Service answering.
func (s *upgradeScene) upgradeStep(ctx context.Context, t *testing.T, c *localcluster.Cluster, initial sceneState, probe *serviceProbe) {
	t.Helper()
	start := time.Now()
	probe.beginStep(c.Name)
	mustOffload(t, c, append([]string{"upgrade", "--timeout", "3m"}, localcluster.AgentValues()...)...)
	expectAgentImage(ctx, t, c, "test")
	s.expectPeeringUp(ctx, t)
	for _, cl := range s.clusters() {
		expectStatusHealthy(ctx, t, cl)
	}
	t.Logf("upgraded %s: agents, peering and status back %s after kubectl offload upgrade started", c.Name, time.Since(start).Round(time.Millisecond))
	s.expectUnchanged(ctx, t, initial)
	expectCredentialsRenewed(ctx, t, s.consumer, s.peer)
	probe.expectAnswerAfter(ctx, t, time.Now())
}

// sceneState is what an upgrade must leave as it was, as text by name:
// each offloaded pod on both sides (a recreated pod has a new UID, a
// restarted one more restarts, and on the provider a new start), each end
// of the tunnel (its object, views and keys) and the cluster identities.
type sceneState struct {
	local, remote, tunnels, identities map[string]string
}

func (s *upgradeScene) state(ctx context.Context, t *testing.T) sceneState {
	t.Helper()
	st := sceneState{
		local:      podStates(ctx, t, s.consumer, upgradeNS, "app=web", false),
		remote:     podStates(ctx, t, s.provider, s.twin, offloadv1alpha1.LabelOriginClusterID+"="+s.consumerID, true),
		tunnels:    map[string]string{},
		identities: map[string]string{},
	}
	for c, name := range s.tunnels() {
		var tn offloadv1alpha1.Tunnel
		if err := ctrlClient(t, c).Get(ctx, client.ObjectKey{Namespace: localcluster.InstallNamespace, Name: name}, &tn); err != nil {
			t.Fatalf("reading Tunnel %s on %s: %v", name, c.Name, err)
		}
		st.tunnels[c.Name+"/"+name] = fmt.Sprintf("uid %s, key %s, peer's key %s, views %v, peer's views %v",
			tn.UID, tn.Status.PublicKey, tn.Spec.PeerPublicKey, tn.Spec.Mappings, tn.Spec.PeerViews)
		id := identity(ctx, t, c)
		st.identities[c.Name] = id["clusterName"] + " " + id["clusterID"]
	}
	return st
}

// podStates describes the pods matching selector in ns of c by name: UID,
// restarts and readiness, and with started when their containers started
// (a real kubelet's record; the consumer's is a copy).
func podStates(ctx context.Context, t *testing.T, c *localcluster.Cluster, ns, selector string, started bool) map[string]string {
	t.Helper()
	list, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatalf("listing pods %s in %s on %s: %v", selector, ns, c.Name, err)
	}
	out := map[string]string{}
	for _, p := range list.Items {
		var restarts int32
		var starts []string
		for _, cs := range p.Status.ContainerStatuses {
			restarts += cs.RestartCount
			if started && cs.State.Running != nil {
				starts = append(starts, cs.State.Running.StartedAt.UTC().Format(time.RFC3339))
			}
		}
		out[p.Name] = fmt.Sprintf("uid %s, %d restarts, ready %t, started %v", p.UID, restarts, podIsReady(p), starts)
	}
	return out
}

func podIsReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil
		}
	}
	return false
}

// expectUnchanged checks the scene against want. Readiness may take a
// moment to come back in the consumer's view, so the pods are polled; a
// new UID or restart never goes back.
func (s *upgradeScene) expectUnchanged(ctx context.Context, t *testing.T, want sceneState) {
	t.Helper()
	var got sceneState
	if _, err := framework.Poll(ctx, time.Second, time.Minute, func(ctx context.Context) (bool, string) {
		got = s.state(ctx, t)
		return maps.Equal(got.local, want.local) && maps.Equal(got.remote, want.remote), ""
	}); err != nil {
		t.Errorf("offloaded pods were recreated, restarted or not Ready again: %s",
			strings.Join(append(changes("consumer pod", want.local, got.local), changes("provider pod", want.remote, got.remote)...), "; "))
	}
	if c := append(changes("tunnel", want.tunnels, got.tunnels), changes("identity of", want.identities, got.identities)...); len(c) > 0 {
		t.Errorf("the upgrade changed the peering: %s", strings.Join(c, "; "))
	}
}

// changes lists the entries that differ between want and got.
func changes(what string, want, got map[string]string) []string {
	keys := slices.Sorted(maps.Keys(want))
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	var out []string
	for _, k := range keys {
		if want[k] != got[k] {
			out = append(out, fmt.Sprintf("%s %s was {%s}, is {%s}", what, k, want[k], got[k]))
		}
	}
	return out
}

// expectPeeringUp waits until the peering is up on both sides: the virtual
// node Ready, the consumer authenticated and consuming, the provider
// serving it, both ends of the tunnel connected.
func (s *upgradeScene) expectPeeringUp(ctx context.Context, t *testing.T) {
	t.Helper()
	cc, pc := ctrlClient(t, s.consumer), ctrlClient(t, s.provider)
	waitFor(ctx, t, 2*time.Minute, "the peering and its tunnel up on both sides", func(ctx context.Context) (bool, string) {
		if r := nodeReady(ctx, s.consumer, s.node()); r != corev1.ConditionTrue {
			return false, fmt.Sprintf("virtual node %s Ready=%q", s.node(), r)
		}
		var out, in offloadv1alpha1.ForeignCluster
		if err := cc.Get(ctx, client.ObjectKey{Name: s.peer}, &out); err != nil {
			return false, err.Error()
		}
		if err := pc.Get(ctx, client.ObjectKey{Name: s.consumer.Name}, &in); err != nil {
			return false, err.Error()
		}
		if out.Status.Outgoing != offloadv1alpha1.PhaseEstablished || !meta.IsStatusConditionTrue(out.Status.Conditions, offloadv1alpha1.ConditionAuthenticated) ||
			!meta.IsStatusConditionTrue(out.Status.Conditions, offloadv1alpha1.ConditionNetworkReady) {
			return false, fmt.Sprintf("the consumer's ForeignCluster %s: outgoing %q, conditions %+v", s.peer, out.Status.Outgoing, out.Status.Conditions)
		}
		if in.Status.Incoming != offloadv1alpha1.PhaseEstablished || !meta.IsStatusConditionTrue(in.Status.Conditions, offloadv1alpha1.ConditionNetworkReady) {
			return false, fmt.Sprintf("the provider's ForeignCluster %s: incoming %q, conditions %+v", s.consumer.Name, in.Status.Incoming, in.Status.Conditions)
		}
		for c, name := range s.tunnels() {
			var tn offloadv1alpha1.Tunnel
			if err := ctrlClient(t, c).Get(ctx, client.ObjectKey{Namespace: localcluster.InstallNamespace, Name: name}, &tn); err != nil || !tn.Status.Connected {
				return false, fmt.Sprintf("Tunnel %s on %s: connected %t, %v", name, c.Name, tn.Status.Connected, err)
			}
		}
		return true, ""
	})
}

// expectAgentImage waits until every agent pod of c (controller-manager,
// auth, fabric and the tunnel's gateway, which the agent itself deploys)
// runs the agent image tagged tag and is Ready, with no pod of another tag
// left.
func expectAgentImage(ctx context.Context, t *testing.T, c *localcluster.Cluster, tag string) {
	t.Helper()
	waitFor(ctx, t, 3*time.Minute, fmt.Sprintf("every agent pod of %s Ready on image %s:%s", c.Name, agentImageRepository, tag), func(ctx context.Context) (bool, string) {
		pods, err := c.Kube.CoreV1().Pods(localcluster.InstallNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var agents, gateways int
		var pending []string
		for _, p := range pods.Items {
			tags := map[string]bool{}
			for _, ctr := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
				if repo, tg, ok := strings.Cut(ctr.Image, ":"); ok && repo == agentImageRepository {
					tags[tg] = true
				}
			}
			if len(tags) == 0 || p.Status.Phase == corev1.PodSucceeded {
				continue
			}
			agents++
			if p.Labels[offloadv1alpha1.LabelTunnel] != "" {
				gateways++
			}
			if len(tags) != 1 || !tags[tag] || !podIsReady(p) {
				pending = append(pending, fmt.Sprintf("%s (tags %v, ready %t)", p.Name, slices.Sorted(maps.Keys(tags)), podIsReady(p)))
			}
		}
		return agents > 0 && gateways > 0 && len(pending) == 0, fmt.Sprintf("%d agent pods, %d gateways, not yet: %v", agents, gateways, pending)
	})
}

// expectCredentialsRenewed makes the consumer's agent renew its
// credentials for peer, and checks that it did: a new token, expiring
// later, that reads the provider's offer. The agent renews after two
// thirds of the lifetime, and the TokenRequest API refuses lifetimes under
// 10 minutes, later than this test can wait; so the test brings the
// renewal forward: it backdates the issue time the agent recorded in the
// kubeconfig Secret, so that the renewal is due, and changes an annotation
// of the ForeignCluster, which the agent reconciles. When to renew is
// the test's; how, through the provider's auth service, is the agents'.
func expectCredentialsRenewed(ctx context.Context, t *testing.T, consumer *localcluster.Cluster, peerName string) {
	t.Helper()
	before := readHeldCredentials(ctx, t, consumer, peerName)
	// Due when issued + 2/3 (expiry - issued) <= now: with issued = now -
	// 2 (expiry - now), now; a minute earlier leaves a margin.
	issued := time.Now().Add(-2*time.Until(before.expiry) - time.Minute)
	secrets := consumer.Kube.CoreV1().Secrets(localcluster.InstallNamespace)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := secrets.Get(ctx, peering.PeerKubeconfigSecretName(peerName), metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Data[peering.PeerIssuedKey] = []byte(issued.UTC().Format(time.RFC3339))
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("backdating the credentials' issue time: %v", err)
	}
	cc := ctrlClient(t, consumer)
	var renewed heldCredentials
	nudges := 0
	if _, err := framework.Poll(ctx, 2*time.Second, time.Minute, func(ctx context.Context) (bool, string) {
		renewed = readHeldCredentials(ctx, t, consumer, peerName)
		if renewed.tokenFingerprint != before.tokenFingerprint {
			return true, ""
		}
		nudges++
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"%d"}}}`, renewNudgeAnnotation, nudges)
		fc := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: peerName}}
		if err := cc.Patch(ctx, fc, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("the token is the same after %d reconciles", nudges)
	}); err != nil {
		t.Fatalf("the consumer's agent did not renew its credentials for %s once due: %v", peerName, err)
	}
	if !renewed.expiry.After(before.expiry) {
		t.Errorf("the renewed credentials expire at %s, not after the previous ones (%s)", renewed.expiry, before.expiry)
	}
	if err := readOffer(ctx, renewed, peerName); err != nil {
		t.Errorf("the renewed credentials do not read the provider's offer: %v", err)
	}
}

// serviceProbe calls Service web from the client pod every probeInterval,
// through the test application's /call at the pod's address (which the
// test reaches as the API server does), and watches the virtual node and
// the Service's ready endpoints, until end. It counts by step, from one
// beginStep to the next.
type serviceProbe struct {
	url string
	// pods are the names an answer may give: the offloaded pods'.
	pods map[string]bool
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu           sync.Mutex
	figures      probeFigures
	failingSince time.Time
}

// probeFigures are what a serviceProbe saw.
type probeFigures struct {
	lastAnswer time.Time
	// servedBy counts the answers by the pod that gave them.
	servedBy map[string]int
	// nodeNotReady are when the virtual node was seen not Ready.
	nodeNotReady []string
	steps        []*stepFigures
}

// stepFigures are what a serviceProbe saw during one step.
type stepFigures struct {
	name             string
	answered, failed int
	longestOutage    time.Duration
	// errors are the step's first failures, for the log: failed
	// requests, and offloaded pods seen not Ready on the consumer.
	errors []string
	// endpointsShort is how long, sampled every second, the Service had
	// fewer ready endpoints than upgradeReplicas; fewestEndpoints the
	// fewest it had.
	endpointsShort  time.Duration
	fewestEndpoints int
}

func (st *stepFigures) note(at time.Time, what string) {
	if len(st.errors) < 8 {
		st.errors = append(st.errors, at.UTC().Format("15:04:05.000")+" "+what)
	}
}

// startProbe waits until the Service answers the client pod, then starts
// watching; it counts from the first beginStep.
func (s *upgradeScene) startProbe(ctx context.Context, t *testing.T) *serviceProbe {
	t.Helper()
	p := &serviceProbe{
		url:     "http://" + net.JoinHostPort(s.client.Status.PodIP, "8080") + "/call?url=" + url.QueryEscape("http://web:8080/hostname"),
		pods:    map[string]bool{},
		figures: probeFigures{servedBy: map[string]int{}},
	}
	for name := range podStates(ctx, t, s.consumer, upgradeNS, "app=web", false) {
		p.pods[name] = true
	}
	waitFor(ctx, t, time.Minute, "Service web answering the client pod from the provider", func(ctx context.Context) (bool, string) {
		_, err := p.call(ctx)
		return err == nil, fmt.Sprint(err)
	})
	ctx, p.stop = context.WithCancel(ctx)
	p.wg.Go(func() {
		_ = wait.PollUntilContextCancel(ctx, probeInterval, true, func(ctx context.Context) (bool, error) {
			start := time.Now()
			answer, err := p.call(ctx)
			if ctx.Err() == nil {
				p.record(start, answer, err)
			}
			return false, nil
		})
	})
	p.wg.Go(func() {
		_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			if r := nodeReady(ctx, s.consumer, s.node()); r != corev1.ConditionTrue && ctx.Err() == nil {
				p.mu.Lock()
				p.figures.nodeNotReady = append(p.figures.nodeNotReady, time.Now().Format(time.RFC3339)+" Ready="+string(r))
				p.mu.Unlock()
			}
			return false, nil
		})
	})
	p.wg.Go(func() {
		_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			ready, notReady, err := s.webEndpoints(ctx)
			if err != nil || ctx.Err() != nil {
				return false, nil
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if st := p.step(); st != nil && ready < upgradeReplicas {
				st.endpointsShort += time.Second
				st.fewestEndpoints = min(st.fewestEndpoints, ready)
				for _, n := range notReady {
					st.note(time.Now(), n)
				}
			}
			return false, nil
		})
	})
	return p
}

// webEndpoints counts the ready endpoints of Service web on the consumer,
// and describes the offloaded pods that are not Ready there.
func (s *upgradeScene) webEndpoints(ctx context.Context) (int, []string, error) {
	eps, err := s.consumer.Kube.DiscoveryV1().EndpointSlices(upgradeNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
	if err != nil {
		return 0, nil, err
	}
	ready := 0
	for _, sl := range eps.Items {
		for _, e := range sl.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				ready++
			}
		}
	}
	if ready >= upgradeReplicas {
		return ready, nil, nil
	}
	pods, err := s.consumer.Kube.CoreV1().Pods(upgradeNS).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		return ready, nil, err
	}
	var notReady []string
	for _, p := range pods.Items {
		if podIsReady(p) {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				notReady = append(notReady, fmt.Sprintf("pod %s Ready=%s %s: %s (phase %s, IP %s)", p.Name, c.Status, c.Reason, c.Message, p.Status.Phase, p.Status.PodIP))
			}
		}
	}
	return ready, notReady, nil
}

// beginStep starts counting for the step called name.
func (p *serviceProbe) beginStep(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.figures.steps = append(p.figures.steps, &stepFigures{name: name, fewestEndpoints: upgradeReplicas})
}

// step is the current step, nil before the first; p.mu is held.
func (p *serviceProbe) step() *stepFigures {
	if len(p.figures.steps) == 0 {
		return nil
	}
	return p.figures.steps[len(p.figures.steps)-1]
}

// call asks the client pod to call the Service, and returns the name of
// the pod that answered.
func (p *serviceProbe) call(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second) // the pod's own call times out after 10 s
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("the client pod: %w", err)
	}
	defer resp.Body.Close()
	var res struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
		Error  string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return "", fmt.Errorf("the client pod answered %s, not JSON: %w", resp.Status, err)
	}
	switch {
	case res.Status != http.StatusOK:
		return "", fmt.Errorf("the Service: status %d, %s", res.Status, res.Error)
	case !p.pods[res.Body]:
		return "", fmt.Errorf("the Service was answered by %q, not an offloaded pod", res.Body)
	}
	return res.Body, nil
}

// record counts one call that started at start, in the current step. An
// outage lasts from the first failed call to the next answered one, and
// counts in the step where it ends.
func (p *serviceProbe) record(start time.Time, answer string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.step()
	if st == nil {
		return
	}
	if err != nil {
		st.failed++
		st.note(start, err.Error())
		if p.failingSince.IsZero() {
			p.failingSince = start
		}
		return
	}
	st.answered++
	p.figures.servedBy[answer]++
	p.figures.lastAnswer = time.Now()
	if !p.failingSince.IsZero() {
		st.longestOutage = max(st.longestOutage, start.Sub(p.failingSince))
		p.failingSince = time.Time{}
	}
}

// expectAnswerAfter waits until the Service answered after since.
func (p *serviceProbe) expectAnswerAfter(ctx context.Context, t *testing.T, since time.Time) {
	t.Helper()
	waitFor(ctx, t, time.Minute, "Service web answering after the upgrade", func(context.Context) (bool, string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		var errs []string
		if st := p.step(); st != nil {
			errs = st.errors
		}
		return p.figures.lastAnswer.After(since), fmt.Sprintf("last answer at %s; first failures %q", p.figures.lastAnswer.Format(time.RFC3339), errs)
	})
}

// end stops the probe and returns its figures; an outage still going on
// counts until now, in the last step.
func (p *serviceProbe) end() probeFigures {
	p.stop()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.figures
	if st := p.step(); st != nil && !p.failingSince.IsZero() {
		st.longestOutage = max(st.longestOutage, time.Since(p.failingSince))
	}
	return f
}

// expectStoredVersionsCurrent checks that every CRD of the release under
// test is on c with the release's versions, and that its objects are
// stored in its storage version alone: status.storedVersions keeps no
// version the upgrade replaced, which a later release could not drop.
func expectStoredVersionsCurrent(ctx context.Context, t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	crds, err := install.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	cl := ctrlClient(t, c)
	for _, want := range crds {
		var got apiextensionsv1.CustomResourceDefinition
		if err := cl.Get(ctx, client.ObjectKey{Name: want.Name}, &got); err != nil {
			t.Errorf("reading CRD %s on %s: %v", want.Name, c.Name, err)
			continue
		}
		gotVersions, _ := crdVersions(&got)
		wantVersions, storage := crdVersions(want)
		if gotVersions != wantVersions {
			t.Errorf("CRD %s on %s has versions %s; want the release's %s", want.Name, c.Name, gotVersions, wantVersions)
		}
		if !slices.Equal(got.Status.StoredVersions, []string{storage}) {
			t.Errorf("CRD %s on %s has stored versions %v; want only its storage version %s", want.Name, c.Name, got.Status.StoredVersions, storage)
		}
	}
}

// crdVersions describes the versions of crd, and names its storage version.
func crdVersions(crd *apiextensionsv1.CustomResourceDefinition) (versions, storage string) {
	var out []string
	for _, v := range crd.Spec.Versions {
		out = append(out, fmt.Sprintf("%s (served %t, storage %t)", v.Name, v.Served, v.Storage))
		if v.Storage {
			storage = v.Name
		}
	}
	return strings.Join(out, ", "), storage
}

// uninstall ends the offloading and the peering and uninstalls both sides
// with the release under test, and checks that nothing of either release
// is left.
func (s *upgradeScene) uninstall(ctx context.Context, t *testing.T, objects []object) {
	t.Helper()
	mustOffload(t, s.consumer, "unoffload", "namespace", upgradeNS, "--timeout", "2m")
	waitFor(ctx, t, time.Minute, "twin namespace "+s.twin+" gone from the provider", func(ctx context.Context) (bool, string) {
		_, err := s.provider.Kube.CoreV1().Namespaces().Get(ctx, s.twin, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get namespace %s: %v", s.twin, err)
	})
	mustOffload(t, s.consumer, "unpeer", s.peer, "--timeout", "2m")
	expectNoPeeringLeft(ctx, t, s.consumer, s.provider, s.peer)
	for _, c := range s.clusters() {
		expectNoNetworkLeft(ctx, t, c)
		mustOffload(t, c, "uninstall", "--purge", "--timeout", "2m")
		cl := ctrlClient(t, c)
		for _, o := range objects {
			if exists(ctx, t, cl, o) {
				t.Errorf("after uninstall --purge on %s, %s is left", c.Name, o)
			}
		}
		if _, err := c.Kube.CoreV1().Namespaces().Get(ctx, localcluster.InstallNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("namespace %s is left on %s (err=%v)", localcluster.InstallNamespace, c.Name, err)
		}
	}
}
