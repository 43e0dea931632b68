package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
	"github.com/kubectl-offload/kubectl-offload/internal/install"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
	"github.com/kubectl-offload/kubectl-offload/test/framework/servicelb"
)

// TestSeedFlowsBetweenK3sAndKubeadm runs what seed users do, on a
// k3s-flavoured cluster (kine over SQLite, k3s's CIDRs and node metadata, a
// kubeconfig at https://127.0.0.1:6443, ServiceLB) and a kubeadm-style one,
// isolated as separate machines: both installed with the default
// detection (no --pod-cidr, no --api-server-url, no edited kubeconfig),
// the k3s one's gateway published through its ServiceLB; a kubeadm-style
// consumer offloading to the k3s provider, then the k3s cluster
// offloading to the kubeadm-style one, each with a Service answered across
// the fabric.
func TestSeedFlowsBetweenK3sAndKubeadm(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	clusters := localcluster.StartClusters(t,
		localcluster.ClusterOptions{Name: "k3s", Flavour: localcluster.FlavourK3s, RealNode: true, Isolated: true},
		localcluster.ClusterOptions{Name: "kubeadm", RealNode: true, Isolated: true})
	k3s, kubeadm := clusters[0], clusters[1]

	t.Run("the k3s cluster is k3s as kubectl and install see it", func(t *testing.T) {
		expectK3s(ctx, t, k3s)
	})
	t.Run("a LoadBalancer Service is answered at the node's address, as ServiceLB does", func(t *testing.T) {
		expectServiceLB(ctx, t, k3s, kubeadm)
	})
	// The seed flows need both installs: this chapter stops the test when
	// it fails. The two before it let the rest run.
	if !t.Run("install detects both clusters with no flags and gives no advice", func(t *testing.T) {
		installWithDetection(ctx, t, map[*localcluster.Cluster][]string{
			k3s:     {"--gateway-service-type", "LoadBalancer"},
			kubeadm: nil,
		})
	}) {
		t.FailNow()
	}
	t.Run("a kubeadm-style consumer offloads to the k3s provider through ServiceLB", func(t *testing.T) {
		expectSeedFlow(ctx, t, kubeadm, k3s, "seed")
	})
	t.Run("a k3s consumer offloads to the kubeadm-style provider", func(t *testing.T) {
		expectSeedFlow(ctx, t, k3s, kubeadm, "seed-back")
	})
}

// expectK3s checks what makes c a k3s cluster to its users and to
// install's detection.
func expectK3s(ctx context.Context, t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	if want := fmt.Sprintf("https://127.0.0.1:%d", localcluster.K3sAPIServerPort); c.Config.Host != want {
		t.Errorf("the kubeconfig's server is %s, want %s as k3s writes it", c.Config.Host, want)
	}
	// The datastore is kine's SQLite database.
	pid, ok := c.PIDs()["kine"]
	if !ok {
		t.Errorf("no kine process among %v", c.PIDs())
	}
	apiserver, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c.PIDs()["kube-apiserver"]))
	if err != nil {
		t.Fatal(err)
	}
	if args := strings.Split(string(apiserver), "\x00"); !slices.ContainsFunc(args, func(a string) bool {
		return strings.HasPrefix(a, "--etcd-servers=http://127.0.0.1:") && !strings.Contains(a, ",")
	}) || !slices.Contains(args, "--service-cluster-ip-range="+localcluster.K3sServiceCIDR) {
		t.Errorf("kube-apiserver runs with %q; want one --etcd-servers, kine's, and k3s's Service range", args)
	}
	if fi, err := os.Stat(filepath.Join(c.Dir, "db", "state.db")); err != nil || fi.Size() == 0 {
		t.Errorf("kine (pid %d) keeps no SQLite database in %s: %v", pid, c.Dir, err)
	}
	// k3s's addresses.
	svc, err := c.Kube.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != "10.43.0.1" {
		t.Errorf("Service kubernetes: %v, cluster IP %v; want 10.43.0.1", err, svc)
	}
	dns, err := c.Kube.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil || dns.Spec.ClusterIP != localcluster.K3sDNSServiceIP {
		t.Errorf("Service kube-dns: %v; want cluster IP %s", err, localcluster.K3sDNSServiceIP)
	}
	node, err := c.Kube.CoreV1().Nodes().Get(ctx, c.Node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !netip.MustParsePrefix(localcluster.K3sPodCIDR).Contains(netip.MustParsePrefix(node.Spec.PodCIDR).Addr()) ||
		node.Spec.ProviderID != "k3s://"+node.Name || node.Labels["node-role.kubernetes.io/control-plane"] != "true" ||
		node.Labels["node.kubernetes.io/instance-type"] != "k3s" || node.Annotations["k3s.io/node-args"] != `["server"]` {
		t.Errorf("node %s: pod CIDR %s, providerID %s, labels %v, annotations %v; want a k3s server's", node.Name,
			node.Spec.PodCIDR, node.Spec.ProviderID, node.Labels, node.Annotations)
	}
	// What install finds there with no help.
	d, err := install.Detect(ctx, c.Kube, c.Config.Host, "")
	if err != nil {
		t.Fatal(err)
	}
	wantURL := fmt.Sprintf("https://%s:%d", c.Node.IP, localcluster.K3sAPIServerPort)
	if d.Provider != install.ProviderK3s || d.PodCIDR != localcluster.K3sPodCIDR || d.ServiceCIDR != localcluster.K3sServiceCIDR ||
		d.APIServerURL != wantURL || d.APIServerLoopback {
		t.Errorf("detection on the k3s cluster: %+v; want k3s, %s, %s and %s", d, localcluster.K3sPodCIDR, localcluster.K3sServiceCIDR, wantURL)
	}
	// The API server answers at that URL from another machine's pods,
	// with a certificate that names it: the peers' agents use it.
	if got := waitHTTPS(ctx, t, c, wantURL+"/readyz"); got != "" {
		t.Errorf("%s/readyz from the host: %s", wantURL, got)
	}
}

// waitHTTPS polls GET url (an API server's /readyz) from the host, with
// the cluster's admin credentials and CA, until it answers ok, and returns
// the last failure, or "".
func waitHTTPS(ctx context.Context, t *testing.T, c *localcluster.Cluster, url string) string {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.Host = strings.TrimSuffix(url, "/readyz")
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.Poll(ctx, time.Second, 30*time.Second, func(ctx context.Context) (bool, string) {
		out, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(out) == "ok", fmt.Sprintf("%s %v", out, err)
	}); err != nil {
		return err.Error()
	}
	return ""
}

// expectServiceLB checks the ServiceLB emulation: a LoadBalancer Service
// of c gets the node's address, a svclb DaemonSet listening there, and a
// pod of other (another machine) reaches it; a second Service on the same
// port gets no address, its svclb pod Pending; deleting them removes
// their DaemonSets.
func expectServiceLB(ctx context.Context, t *testing.T, c, other *localcluster.Cluster) {
	t.Helper()
	const ns = "lb"
	createNamespace(ctx, t, ctrlClient(t, c), ns)
	createNamespace(ctx, t, ctrlClient(t, other), ns)
	if _, err := c.Kube.AppsV1().Deployments(ns).Create(ctx, testAppDeployment("web", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Kube.AppsV1().Deployments(ns).Create(ctx, testAppDeployment("client", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var svcs []*corev1.Service
	for _, name := range []string{"web-lb", "web-lb-2"} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}}}}
		created, err := c.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svcs = append(svcs, created)
	}
	web := waitPodsReady(ctx, t, c, ns, "app=web", 1)[0]
	waitFor(ctx, t, time.Minute, "Service web-lb at the node's address", func(ctx context.Context) (bool, string) {
		s, err := c.Kube.CoreV1().Services(ns).Get(ctx, "web-lb", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		in := s.Status.LoadBalancer.Ingress
		return len(in) == 1 && in[0].IP == c.Node.IP, fmt.Sprintf("ingress %+v", in)
	})
	ds, err := c.Kube.AppsV1().DaemonSets(servicelb.Namespace).Get(ctx, servicelb.DaemonSetName(svcs[0]), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the svclb DaemonSet of web-lb: %v", err)
	}
	if p := ds.Spec.Template.Spec.Containers[0].Ports[0]; p.HostPort != 8080 || ds.Spec.Template.Spec.NodeSelector[servicelb.LabelEnableLB] != "true" {
		t.Errorf("the svclb DaemonSet listens on %+v with node selector %v; want host port 8080 on enablelb nodes", p, ds.Spec.Template.Spec.NodeSelector)
	}
	client := waitPodsReady(ctx, t, other, ns, "app=client", 1)[0]
	url := "http://" + c.Node.IP + ":8080/hostname"
	waitFor(ctx, t, time.Minute, "a pod of "+other.Name+" answered at "+url, func(context.Context) (bool, string) {
		out, err := execIn(t, other, ns, client.Name, "get", url)
		return err == nil && strings.Fields(out + " ")[0] == web.Name, fmt.Sprintf("%q %v", out, err)
	})
	// The second Service on the same port: its svclb pod cannot have the
	// node's port, and it gets no address.
	waitFor(ctx, t, time.Minute, "the svclb pod of web-lb-2 Pending", func(ctx context.Context) (bool, string) {
		pods, err := c.Kube.CoreV1().Pods(servicelb.Namespace).List(ctx, metav1.ListOptions{LabelSelector: servicelb.LabelSvcName + "=web-lb-2"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprintf("%v %v", err, pods)
		}
		return pods.Items[0].Status.Phase == corev1.PodPending, string(pods.Items[0].Status.Phase)
	})
	if s, err := c.Kube.CoreV1().Services(ns).Get(ctx, "web-lb-2", metav1.GetOptions{}); err != nil || len(s.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("Service web-lb-2 on a taken port: %v, ingress %+v; want none", err, s.Status.LoadBalancer.Ingress)
	}
	for _, s := range svcs {
		if err := c.Kube.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(ctx, t, time.Minute, "the svclb DaemonSets and the Services gone", func(ctx context.Context) (bool, string) {
		list, err := c.Kube.AppsV1().DaemonSets(servicelb.Namespace).List(ctx, metav1.ListOptions{LabelSelector: servicelb.LabelSvcNS + "=" + ns})
		if err != nil {
			return false, err.Error()
		}
		left, err := c.Kube.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0 && len(left.Items) == 0, fmt.Sprintf("%d DaemonSets, Services %v", len(list.Items), left)
	})
	for _, cl := range []*localcluster.Cluster{c, other} {
		if err := cl.Kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	}
}

// installWithDetection installs the agent on each cluster, at once, with
// its extra flags and no settings install can detect, and checks that
// install gave no advice (no "pass --" warning) and that doctor is healthy.
func installWithDetection(ctx context.Context, t *testing.T, extra map[*localcluster.Cluster][]string) {
	t.Helper()
	var wg sync.WaitGroup
	for c, args := range extra {
		wg.Go(func() {
			out, errOut, err := offload(t, c, slices.Concat([]string{"install", "--cluster-name", c.Name, "--timeout", "3m"}, localcluster.AgentValues(), args)...)
			if err != nil {
				t.Errorf("install on %s: %v\n%s\n%s", c.Name, err, out, errOut)
				return
			}
			for _, line := range strings.Split(out+errOut, "\n") {
				if strings.Contains(line, "pass --") {
					t.Errorf("install on %s advised: %s", c.Name, strings.TrimSpace(line))
				}
			}
		})
	}
	wg.Wait()
	for c := range extra {
		waitPodsReady(ctx, t, c, localcluster.InstallNamespace, "app.kubernetes.io/component=auth", 1)
		waitPodsReady(ctx, t, c, localcluster.InstallNamespace, "app.kubernetes.io/component=controller-manager", 1)
		waitCASecret(ctx, t, c)
		r, code := offloadDoctor(t, c)
		if code != 0 || !r.Healthy || len(r.failures()) > 0 {
			t.Errorf("doctor on %s after install with detection: exit %d, failures %q", c.Name, code, r.failures())
		}
	}
}

// expectSeedFlow peers consumer with provider out of band, offloads
// namespace ns with a Service over a local and an offloaded replica, and
// checks the path the gateway is published on, the pods' addresses, and
// the Service answering from both clusters on both sides.
func expectSeedFlow(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, ns string) {
	t.Helper()
	if errOut, err := outOfBand(t, consumer, generate(t, provider), "--timeout", "2m"); err != nil {
		t.Fatalf("peer out-of-band: %v\n%s", err, errOut)
	}
	cc := ctrlClient(t, consumer)
	waitFor(ctx, t, 2*time.Minute, "NetworkReady on both sides", func(ctx context.Context) (bool, string) {
		var why []string
		for c, name := range map[client.Client]string{cc: provider.Name, ctrlClient(t, provider): consumer.Name} {
			var fc offloadv1alpha1.ForeignCluster
			if err := c.Get(ctx, client.ObjectKey{Name: name}, &fc); err != nil {
				return false, err.Error()
			}
			if !meta.IsStatusConditionTrue(fc.Status.Conditions, offloadv1alpha1.ConditionNetworkReady) {
				why = append(why, fmt.Sprintf("%s: %s %+v", name, fc.Status.Network, fc.Status.Conditions))
			}
		}
		return len(why) == 0, strings.Join(why, "; ")
	})
	var fc offloadv1alpha1.ForeignCluster
	if err := cc.Get(ctx, client.ObjectKey{Name: provider.Name}, &fc); err != nil {
		t.Fatal(err)
	}
	if fc.Status.APIServerURL != provider.PeerAPIServerURL() {
		t.Errorf("the consumer reaches the provider at %s, want %s, what install detected there", fc.Status.APIServerURL, provider.PeerAPIServerURL())
	}
	var tunnel offloadv1alpha1.Tunnel
	if err := cc.Get(ctx, client.ObjectKey{Namespace: localcluster.InstallNamespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, provider.Name)}, &tunnel); err != nil {
		t.Fatal(err)
	}
	// A k3s provider publishes its gateway through ServiceLB, at the LB
	// port on its node; a kubeadm-style one at a NodePort.
	if provider.Flavour == localcluster.FlavourK3s {
		if want := fmt.Sprintf("%s:%d", provider.Node.IP, 51820); tunnel.Spec.Endpoint != want {
			t.Errorf("the consumer dials the provider's gateway at %s, want its LoadBalancer %s", tunnel.Spec.Endpoint, want)
		}
	} else if !strings.HasPrefix(tunnel.Spec.Endpoint, provider.Node.IP+":") {
		t.Errorf("the consumer dials the provider's gateway at %s, want its node %s", tunnel.Spec.Endpoint, provider.Node.IP)
	}
	addrs := reflection.AddressesOf(&tunnel)

	createNamespace(ctx, t, cc, ns)
	mustOffload(t, consumer, "namespace", ns, "--timeout", "2m")
	local := testAppDeployment("web-local", 1)
	remote := offloadedApp("web-remote", 1)
	remote.Spec.Template.Spec.NodeSelector = map[string]string{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode}
	for _, d := range []*appsv1.Deployment{local, remote} {
		d.Spec.Template.Labels["tier"] = "web"
	}
	for _, d := range []*appsv1.Deployment{local, remote, testAppDeployment("client", 1)} {
		if _, err := consumer.Kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"tier": "web"}, Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := consumer.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	localPod := waitPodsReady(ctx, t, consumer, ns, "app=web-local", 1)[0]
	remotePod := waitPodsReady(ctx, t, consumer, ns, "app=web-remote", 1)[0]
	clientPod := waitPodsReady(ctx, t, consumer, ns, "app=client", 1)[0]
	consumerID := identity(ctx, t, consumer)["clusterID"]
	twin := offloadv1alpha1.TwinNamespace(ns, consumer.Name, consumerID)
	real := waitPodsReady(ctx, t, provider, twin, "app=web-remote", 1)[0]
	// The offloaded pod has the provider's address there, and the
	// consumer's view of it here.
	if !netip.MustParsePrefix(provider.PodCIDR()).Contains(netip.MustParseAddr(real.Status.PodIP)) {
		t.Errorf("the offloaded pod's address on the provider is %s, outside its pod CIDR %s", real.Status.PodIP, provider.PodCIDR())
	}
	// The consumer's agent publishes it once it sees the tunnel up, which
	// may follow the pod's readiness by a few seconds.
	want := addrs.ConsumerIP(real.Status.PodIP)
	if want == "" {
		t.Fatalf("the tunnel has no view of the provider's address %s (mappings %v)", real.Status.PodIP, tunnel.Spec.Mappings)
	}
	waitFor(ctx, t, time.Minute, "the offloaded pod showing its view of the provider's address on the consumer", func(ctx context.Context) (bool, string) {
		p, err := consumer.Kube.CoreV1().Pods(ns).Get(ctx, remotePod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		remotePod = *p
		return p.Status.PodIP == want, fmt.Sprintf("it shows %q, want %q, its view of %s", p.Status.PodIP, want, real.Status.PodIP)
	})
	expectAnswers(ctx, t, consumer, ns, clientPod.Name, "a consumer pod", "http://web:8080/hostname", 30, localPod.Name, remotePod.Name)
	expectAnswers(ctx, t, consumer, ns, remotePod.Name, "the offloaded pod", "http://web:8080/hostname", 30, localPod.Name, remotePod.Name)
	for _, c := range []*localcluster.Cluster{consumer, provider} {
		expectStatusHealthy(ctx, t, c)
	}
}
