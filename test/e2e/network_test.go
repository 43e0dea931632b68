package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

func TestTheNetworkFabricConnectsIsolatedClustersWithTheSamePodCIDR(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// Isolated as separate machines: only node addresses and API servers
	// reach across. Every pod really runs.
	pair := peeredClustersWith(ctx, t,
		// Two real nodes on the consumer: a client on the node without the
		// gateway goes through the fabric's route to the gateway's node.
		localcluster.ClusterOptions{Name: "consumer", RealNode: true, ExtraRealNodes: 1, Isolated: true},
		localcluster.ClusterOptions{Name: "provider", RealNode: true, Isolated: true}, nil)
	consumer, provider := pair.Consumer, pair.Provider
	start := time.Now().Add(-pair.OutOfBand)
	cc, pc := ctrlClient(t, consumer), ctrlClient(t, provider)

	// The chapters, each a subtest that reports on its own. A chapter that
	// leaves what the next ones need stops the test when it fails; the
	// others let the rest run.

	// One command: the tunnel comes up with the peering.
	var tunnel offloadv1alpha1.Tunnel
	var wantImpl string
	var addrs *reflection.Addresses
	if !t.Run("the tunnel comes up with the peering", func(t *testing.T) {
		waitFor(ctx, t, 2*time.Minute, "NetworkReady on both sides", func(ctx context.Context) (bool, string) {
			var why []string
			for c, name := range map[client.Client]string{cc: "provider", pc: "consumer"} {
				var fc offloadv1alpha1.ForeignCluster
				if err := c.Get(ctx, client.ObjectKey{Name: name}, &fc); err != nil {
					return false, err.Error()
				}
				cond := meta.FindStatusCondition(fc.Status.Conditions, offloadv1alpha1.ConditionNetworkReady)
				if cond == nil || cond.Status != metav1.ConditionTrue || fc.Status.Network != offloadv1alpha1.PhaseEstablished {
					why = append(why, fmt.Sprintf("%s: %s %+v", name, fc.Status.Network, cond))
				}
			}
			return len(why) == 0, strings.Join(why, "; ")
		})
		t.Logf("network Established on both sides %s after peer out-of-band started", time.Since(start).Round(time.Millisecond))
		if err := cc.Get(ctx, client.ObjectKey{Namespace: localcluster.InstallNamespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, "provider")}, &tunnel); err != nil {
			t.Fatal(err)
		}
		wantImpl = "userspace"
		if _, err := exec.Command("test", "-d", "/sys/module/wireguard").CombinedOutput(); err == nil {
			wantImpl = "kernel"
		}
		if tunnel.Status.Implementation != wantImpl || !strings.HasPrefix(tunnel.Spec.Endpoint, provider.Node.IP+":") ||
			tunnel.Status.LastHandshake == nil || time.Since(tunnel.Status.LastHandshake.Time) > 3*time.Minute ||
			len(tunnel.Spec.Mappings) != 1 || tunnel.Spec.Mappings[0].Real == tunnel.Spec.Mappings[0].View {
			t.Errorf("the consumer's Tunnel: spec %+v, status %+v; want %s, the provider node's endpoint, a recent handshake and a remapped view", tunnel.Spec, tunnel.Status, wantImpl)
		}
		addrs = reflection.AddressesOf(&tunnel)
	}) {
		t.FailNow()
	}

	// A namespace with a Service over one local and one offloaded replica,
	// and a client pod on each consumer node: the one without the gateway
	// and the gateway's. The chapters below all use them.
	gateway := waitPodsReady(ctx, t, consumer, localcluster.InstallNamespace, offloadv1alpha1.LabelTunnel+"="+tunnel.Name, 1)[0]
	otherNode := consumer.Node.Name
	if otherNode == gateway.Spec.NodeName {
		otherNode = consumer.ExtraNodes[0].Name
	}
	createNamespace(ctx, t, cc, "net")
	mustOffload(t, consumer, "namespace", "net", "--timeout", "2m")
	local := testAppDeployment("web-local", 1)
	remote := offloadedApp("web-remote", 1)
	remote.Spec.Template.Spec.NodeSelector = map[string]string{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode}
	client1 := testAppDeployment("client", 1)
	client1.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: otherNode}
	client2 := testAppDeployment("client-by-gateway", 1)
	client2.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: gateway.Spec.NodeName}
	for _, d := range []*appsv1.Deployment{local, remote} {
		d.Spec.Template.Labels["tier"] = "web"
	}
	// A second offloaded pod, which the first calls at the consumer's
	// address of it.
	peer := offloadedApp("web-peer", 1)
	peer.Spec.Template.Spec.NodeSelector = remote.Spec.Template.Spec.NodeSelector
	for _, d := range []*appsv1.Deployment{local, remote, client1, client2, peer} {
		if _, err := consumer.Kube.AppsV1().Deployments("net").Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Service web spans both clusters; web-remote has only the offloaded pod.
	for name, selector := range map[string]map[string]string{"web": {"tier": "web"}, "web-remote": {"app": "web-remote"}} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "net"}, Spec: corev1.ServiceSpec{
			Selector: selector, Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}}}}
		if _, err := consumer.Kube.CoreV1().Services("net").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	localPod := waitPodsReady(ctx, t, consumer, "net", "app=web-local", 1)[0]
	remotePod := waitPodsReady(ctx, t, consumer, "net", "app=web-remote", 1)[0]
	clientPod := waitPodsReady(ctx, t, consumer, "net", "app=client", 1)[0]
	gatewayNodeClient := waitPodsReady(ctx, t, consumer, "net", "app=client-by-gateway", 1)[0]
	twin := offloadv1alpha1.TwinNamespace("net", consumer.Name, identity(ctx, t, consumer)["clusterID"])
	real := waitPodsReady(ctx, t, provider, twin, "app=web-remote", 1)[0]
	viewIP := addrs.ConsumerIP(real.Status.PodIP)

	// The offloaded pod's IP on the consumer is its provider IP in the
	// consumer's view.
	t.Run("the offloaded pod's IP in the consumer's view", func(t *testing.T) {
		waitFor(ctx, t, time.Minute, "the offloaded pod's IP in the consumer's view", func(ctx context.Context) (bool, string) {
			p, err := consumer.Kube.CoreV1().Pods("net").Get(ctx, remotePod.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return p.Status.PodIP == viewIP && viewIP != real.Status.PodIP, fmt.Sprintf("consumer sees %s, provider IP %s, view %s", p.Status.PodIP, real.Status.PodIP, viewIP)
		})
	})

	// A consumer pod reaches it by that IP, and the server sees the client
	// in the provider's view of the consumer: the path went through both
	// gateways' translation.
	t.Run("a consumer pod reaches the offloaded pod through both gateways", func(t *testing.T) {
		clientSeen := (&reflection.Addresses{Provider: addrs.Consumer}).ConsumerIP(clientPod.Status.PodIP)
		rxBefore := gatewayStatus(ctx, t, consumer, tunnel.Name).RxBytes
		// A new pod is let in once the provider's tenant filter lists it, within
		// seconds of getting its IP: the first answer is waited for.
		took := waitFor(ctx, t, 30*time.Second, "the offloaded pod answering the consumer pod by its view", func(ctx context.Context) (bool, string) {
			out, err := execIn(t, consumer, "net", clientPod.Name, "get", "http://"+viewIP+":8080/whoami")
			return err == nil && out == real.Name+" "+clientSeen, fmt.Sprintf("answer %q, %v; want %q", out, err, real.Name+" "+clientSeen)
		})
		t.Logf("the offloaded pod answered by its view %s after it was Ready", took.Round(time.Millisecond))
		// So does a pod on the gateway's own node, whose route leads straight
		// to the gateway pod.
		sameNodeSeen := (&reflection.Addresses{Provider: addrs.Consumer}).ConsumerIP(gatewayNodeClient.Status.PodIP)
		if out, err := execIn(t, consumer, "net", gatewayNodeClient.Name, "get", "http://"+viewIP+":8080/whoami"); err != nil || out != real.Name+" "+sameNodeSeen {
			t.Errorf("from the gateway's node %s: answer %q, %v; want %q", gateway.Spec.NodeName, out, err, real.Name+" "+sameNodeSeen)
		}
		// A 1 MiB response through a consumer Service crosses the tunnel
		// whole, once kube-proxy has the pod's new address as the Service's
		// endpoint (it had none a second ago).
		waitFor(ctx, t, 30*time.Second, "1 MiB through Service web-remote", func(ctx context.Context) (bool, string) {
			out, err := kubectl(t, consumer, "-n", "net", "exec", clientPod.Name, "--", "/testapp", "get", "http://web-remote:8080/bytes?n=1048576")
			if err != nil || len(out) != 1<<20 {
				return false, fmt.Sprintf("%d bytes, %v: %.200s", len(out), err, out)
			}
			return true, ""
		})
		if rx := gatewayStatus(ctx, t, consumer, tunnel.Name).RxBytes; rx-rxBefore < 1<<20 {
			t.Errorf("the consumer gateway's received bytes grew by %d, less than the 1 MiB that came through it", rx-rxBefore)
		}
	})

	t.Run("a Service answers from both clusters", func(t *testing.T) {
		// The consumer's ClusterIP Service answers from both clusters.
		expectAnswers(ctx, t, consumer, "net", clientPod.Name, "a consumer pod", "http://web:8080/hostname", 30, localPod.Name, remotePod.Name)
		// The offloaded pod calls the consumer Service by name, and both
		// replicas answer it.
		expectAnswers(ctx, t, consumer, "net", remotePod.Name, "the offloaded pod", "http://web:8080/hostname", 30, localPod.Name, remotePod.Name)
	})

	// Two offloaded pods reach each other at the addresses the consumer
	// shows (a StatefulSet's peers, a hook's curl), and the callee sees the
	// caller at its consumer address: on the provider, only its gateway's
	// mirror makes those addresses its own pods.
	t.Run("offloaded pods reach each other at the consumer's addresses", func(t *testing.T) {
		peerReal := waitPodsReady(ctx, t, provider, twin, "app=web-peer", 1)[0]
		var peerIP string
		waitFor(ctx, t, time.Minute, "the second offloaded pod's IP on the consumer", func(ctx context.Context) (bool, string) {
			pods, err := consumer.Kube.CoreV1().Pods("net").List(ctx, metav1.ListOptions{LabelSelector: "app=web-peer"})
			if err != nil || len(pods.Items) != 1 {
				return false, fmt.Sprintf("%v", err)
			}
			peerIP = pods.Items[0].Status.PodIP
			return peerIP != "" && peerIP == addrs.ConsumerIP(peerReal.Status.PodIP), "the consumer shows " + peerIP + " for provider IP " + peerReal.Status.PodIP
		})
		want := peerReal.Name + " " + viewIP
		took := waitFor(ctx, t, 30*time.Second, "an offloaded pod answering another at its consumer address", func(ctx context.Context) (bool, string) {
			out, err := execIn(t, consumer, "net", remotePod.Name, "get", "http://"+peerIP+":8080/whoami")
			return err == nil && out == want, fmt.Sprintf("answer %q, %v; want %q", out, err, want)
		})
		t.Logf("the mirrored call answered %s after the pod was Ready", took.Round(time.Millisecond))
	})

	// A provider pod outside the consumer's twin namespaces stays out of
	// reach (the auth pod's health port).
	t.Run("the provider's other pods are out of reach", func(t *testing.T) {
		auth := waitPodsReady(ctx, t, provider, localcluster.InstallNamespace, "app.kubernetes.io/component=auth", 1)[0]
		if out, err := execIn(t, consumer, "net", clientPod.Name, "get", "http://"+addrs.ConsumerIP(auth.Status.PodIP)+":8081/healthz"); err == nil {
			t.Errorf("a consumer pod reached the provider's auth pod through the tunnel: %q", out)
		}
	})

	serverTunnel := offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelServer, "consumer")
	t.Run("the tunnel filters both ways", func(t *testing.T) {
		expectTheTunnelFilteredBothWays(ctx, t, consumer, provider, tunnel.Name, serverTunnel, addrs, remotePod.Name, localPod)
	})
	// kubectl offload status shows the tunnel on both sides.
	t.Run("status shows the tunnel on both sides", func(t *testing.T) {
		// Both sides know both views: the provider mirrors the consumer's
		// view of its pods.
		expectTunnelReported(ctx, t, consumer, tunnel.Name, wantImpl, true)
		expectTunnelReported(ctx, t, provider, serverTunnel, wantImpl, true)
	})

	// The path between the clusters cut, as by a firewall: status on each
	// side names the tunnel as the broken hop and exits 1, while the
	// virtual node stays Ready and the offloaded pod keeps running. The
	// path is restored by the end of the chapter, failed or not.
	t.Run("a cut path: status names the tunnel", func(t *testing.T) {
		restore := localcluster.DropUDP(t, netip.MustParseAddrPort(tunnel.Spec.Endpoint))
		cut := time.Now()
		took := waitFor(ctx, t, time.Minute, "status peer naming the tunnel hop on both sides", func(ctx context.Context) (bool, string) {
			var why []string
			for _, side := range []struct {
				c            *localcluster.Cluster
				peer, tunnel string
				says         string
			}{{consumer, "provider", tunnel.Name, "no WireGuard handshake with the provider's gateway"},
				{provider, "consumer", serverTunnel, "the consumer's gateway has not reached this one"}} {
				r, code := statusJSON(t, side.c, "status", "peer", side.peer, "-o", "json")
				tn, msg := r.tunnel("peer", side.tunnel), r.checkMessage("peer", "tunnel/"+side.tunnel)
				if code != 1 || tn == nil || tn.Hop != "tunnel" || tn.Connected || !strings.Contains(msg, side.says) {
					why = append(why, fmt.Sprintf("%s: exit %d, tunnel %+v, %q", side.c.Name, code, tn, msg))
				}
			}
			return len(why) == 0, strings.Join(why, "; ")
		})
		t.Logf("status named the tunnel hop on both sides %s after the path was cut", took.Round(time.Millisecond))
		if r, code := offloadStatus(t, consumer); code != 1 || r.sectionStatus("tunnels") != "failed" || r.checkStatus("virtualNodes", "node/offload-provider") != "ok" {
			t.Errorf("status with the path cut: exit %d, tunnels %s, virtual node %s; want 1, failed, ok: %v",
				code, r.sectionStatus("tunnels"), r.checkStatus("virtualNodes", "node/offload-provider"), r.failures())
		}
		if p, err := provider.Kube.CoreV1().Pods(twin).Get(ctx, real.Name, metav1.GetOptions{}); err != nil || p.UID != real.UID || p.Status.Phase != corev1.PodRunning {
			t.Errorf("the offloaded pod during the cut: %v; want %s still Running", err, real.UID)
		}
		restore()
		waitFor(ctx, t, time.Minute, "status peer healthy again after the path was restored", func(ctx context.Context) (bool, string) {
			r, code := statusJSON(t, consumer, "status", "peer", "provider", "-o", "json")
			return code == 0, fmt.Sprintf("exit %d: %v", code, r.failures())
		})
		t.Logf("the tunnel was down %s in all; status healthy %s after the path was restored", time.Since(cut).Round(time.Millisecond), time.Since(cut.Add(took)).Round(time.Millisecond))
	})

	// A gateway pod deleted on either side: traffic recovers.
	t.Run("traffic recovers from a deleted gateway pod", func(t *testing.T) {
		for _, side := range []struct {
			c      *localcluster.Cluster
			tunnel string
		}{{consumer, tunnel.Name}, {provider, offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelServer, "consumer")}} {
			pods := waitPodsReady(ctx, t, side.c, localcluster.InstallNamespace, offloadv1alpha1.LabelTunnel+"="+side.tunnel, 1)
			start := time.Now()
			if err := side.c.Kube.CoreV1().Pods(localcluster.InstallNamespace).Delete(ctx, pods[0].Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(ctx, t, 2*time.Minute, "traffic after the "+side.c.Name+" gateway pod was deleted", func(ctx context.Context) (bool, string) {
				out, err := execIn(t, consumer, "net", clientPod.Name, "get", "http://"+viewIP+":8080/hostname")
				return err == nil && out == real.Name, fmt.Sprintf("%q %v", out, err)
			})
			t.Logf("traffic recovered %s after the %s gateway pod was deleted", time.Since(start).Round(time.Millisecond), side.c.Name)
		}
	})

	// A consumer announcing what it must not: nothing moves on the provider.
	// Its agent is started again when the chapter ends, failed or not.
	t.Run("a consumer cannot steer the provider's routes", func(t *testing.T) {
		expectAConsumerCannotSteerTheProvidersRoutes(ctx, t, consumer, provider)
	})
	// Nor a provider on the consumer. Its agent, stopped meanwhile, is
	// started again only when the chapter gets to its end: unpeer needs it.
	if !t.Run("a provider cannot steer the consumer's routes", func(t *testing.T) {
		expectAProviderCannotSteerTheConsumersRoutes(ctx, t, consumer, provider)
	}) {
		t.FailNow()
	}

	// unpeer leaves no gateway, object, route or rule behind.
	t.Run("unpeer leaves no network behind", func(t *testing.T) {
		mustOffload(t, consumer, "unoffload", "namespace", "net", "--timeout", "2m")
		mustOffload(t, consumer, "unpeer", "provider", "--timeout", "2m")
		for _, c := range []*localcluster.Cluster{consumer, provider} {
			expectNoNetworkLeft(ctx, t, c)
		}
	})
}

// expectTunnelReported waits for `kubectl offload status` on c to show
// tunnel up, with its device, endpoint, remapped view of the peer's pods
// (and with bothViews the peer's view of this cluster's), MTU and bytes.
func expectTunnelReported(ctx context.Context, t *testing.T, c *localcluster.Cluster, tunnel, impl string, bothViews bool) {
	t.Helper()
	// Byte counters are written at least every 30 s.
	waitFor(ctx, t, 45*time.Second, "status showing tunnel "+tunnel+" on "+c.Name, func(ctx context.Context) (bool, string) {
		r, _ := offloadStatus(t, c)
		tn := r.tunnel("tunnels", tunnel)
		good := r.sectionStatus("tunnels") == "ok" && tn != nil && tn.Hop == "" && tn.Connected && tn.Implementation == impl &&
			tn.Endpoint != "" && len(tn.PeerPods) == 1 && tn.PeerPods[0].View != tn.PeerPods[0].Real && tn.MTU > 0 && tn.RxBytes > 0 && tn.TxBytes > 0 &&
			(!bothViews || len(tn.LocalPods) == 1 && tn.LocalPods[0].View != tn.LocalPods[0].Real)
		return good, fmt.Sprintf("tunnels section %s, tunnel %+v: %v", r.sectionStatus("tunnels"), tn, r.failures())
	})
}
