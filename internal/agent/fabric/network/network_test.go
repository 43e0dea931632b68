package network

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/providerclient"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/summary"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(klog.Background())
	os.Exit(envtest.RunWithAPIServer(m))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// update reads obj again, applies change and writes it, again on a
// conflict: the controllers write the same objects meanwhile.
func update(t *testing.T, c client.Client, obj client.Object, change func()) {
	t.Helper()
	rewrite(t, c, obj, change, func() error { return c.Update(t.Context(), obj) })
}

// updateStatus is update for obj's status.
func updateStatus(t *testing.T, c client.Client, obj client.Object, change func()) {
	t.Helper()
	rewrite(t, c, obj, change, func() error { return c.Status().Update(t.Context(), obj) })
}

func rewrite(t *testing.T, c client.Client, obj client.Object, change func(), write func() error) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return write()
	}))
}

// A gateway pod template as the chart renders it.
const template = `
metadata:
  labels: {app.kubernetes.io/name: offload}
spec:
  containers:
  - name: gateway
    image: registry.local/offload/offload-agent:test
    args: [gateway]
`

// world is both sides of a peering in one API server: the consumer
// installed in one namespace, the provider in another, the consumer
// reaching its tenant namespace with the credentials (and only the RBAC) a
// peering gives it, both controllers running, and the consumer's
// ForeignCluster for the provider. Both use the pod CIDR 10.244.0.0/16, so
// each remaps the other's into its pool.
type world struct {
	admin                                  client.Client
	consumerName, providerName, consumerID string
	cns, pns, tenantNS                     string
	fc                                     *offloadv1alpha1.ForeignCluster
}

// newWorld starts the world with the consumer's and the provider's remap
// pool; gatewayAddress, when set, is where the provider publishes its
// gateway without waiting for a node.
func newWorld(t *testing.T, consumerPool, providerPool, gatewayAddress string) *world {
	t.Helper()
	return newWorldOf(t, consumerPool, providerPool, gatewayAddress, true)
}

// newWorldOf is newWorld, where withProvider false runs no provider
// controller: the test writes the provider's answers itself.
func newWorldOf(t *testing.T, consumerPool, providerPool, gatewayAddress string, withProvider bool) *world {
	t.Helper()
	cfg := envtest.APIServer(t)
	admin := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, admin)
	ctx := t.Context()
	suffix := rand.String(5)
	consumerName, providerName := "consumer-"+suffix, "provider-"+suffix
	consumerID, providerID := "0b7f2c9e-1a2b-4c3d-8e9f-0123456789ab", "1c8f3d0f-2b3c-4d4e-9f0a-123456789abc"
	cns := envtest.NewNamespace(t, admin, "offload-c")
	pns := envtest.NewNamespace(t, admin, "offload-p")
	tenantNS := offloadv1alpha1.TenantNamespace(consumerName)

	// The provider's side of the peering: tenant, tenant namespace, the
	// consumer's ServiceAccount bound to the tenant role (the chart's
	// network rule), and its token in the consumer's kubeconfig Secret.
	tenant := &offloadv1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: consumerName},
		Spec: offloadv1alpha1.TenantSpec{ClusterID: consumerID, ClusterName: consumerName, TenantNamespace: tenantNS}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "offload-tenant-" + suffix}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"offload.io"}, Resources: []string{"networkpeerings"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	}}
	// The tests share one API server, where every world's provider
	// controller answers every NetworkPeering: this world's tenant goes
	// with the test, so that no later world serves it.
	t.Cleanup(func() { _ = admin.Delete(context.Background(), tenant) })
	for _, o := range []client.Object{
		tenant, role,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS, Labels: map[string]string{offloadv1alpha1.LabelTenant: consumerID}}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: tenantNS}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: tenantNS},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: tenantNS}}},
	} {
		must(t, admin.Create(ctx, o))
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	tok, err := kube.CoreV1().ServiceAccounts(tenantNS).CreateToken(ctx, offloadv1alpha1.ConsumerServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	must(t, err)
	secret, err := peering.NewKubeconfigSecret(cns, providerName, peering.Credentials{
		APIServerURL: cfg.Host, CACert: string(cfg.CAData), Token: tok.Status.Token, TenantNamespace: tenantNS, ExpirationTimestamp: time.Now().Add(time.Hour),
	}, time.Now())
	must(t, err)
	must(t, admin.Create(ctx, secret))

	// Each install: identity and the chart's gateway template.
	for ns, id := range map[string][2]string{cns: {consumerID, consumerName}, pns: {providerID, providerName}} {
		must(t, admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.IdentityConfigMap, Namespace: ns},
			Data: map[string]string{"clusterID": id[0], "clusterName": id[1]}}))
		must(t, admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.GatewayTemplateConfigMap, Namespace: ns},
			Data: map[string]string{offloadv1alpha1.GatewayTemplateKey: template}}))
	}

	// The same pod CIDR on both sides: each remaps the other's.
	pod := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	svc := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}
	envtest.StartManager(t, cfg, func(mgr ctrlmanager.Manager) error {
		c := &ConsumerReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
			Settings:  Settings{Namespace: cns, PodCIDRs: pod, ServiceCIDRs: svc, Pools: []netip.Prefix{netip.MustParsePrefix(consumerPool)}},
			Providers: &providerclient.Set{Reader: mgr.GetAPIReader(), Namespace: cns}}
		p := &ProviderReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
			Settings: Settings{Namespace: pns, PodCIDRs: pod, ServiceCIDRs: svc, Pools: []netip.Prefix{netip.MustParsePrefix(providerPool)}, GatewayServiceType: corev1.ServiceTypeNodePort, GatewayAddress: gatewayAddress}}
		// The ForeignCluster's NetworkReady is the summary's mirror of
		// the Tunnel's.
		if err := (&summary.Reconciler{Client: mgr.GetClient(), Namespace: cns}).SetupWithManager(mgr); err != nil {
			return err
		}
		if err := c.SetupWithManager(mgr); err != nil || !withProvider {
			return err
		}
		return p.SetupWithManager(mgr)
	})

	fc := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: providerName},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: providerID, ClusterName: providerName, OutgoingPeering: offloadv1alpha1.OutgoingPeering{Enabled: true}}}
	must(t, admin.Create(ctx, fc))
	t.Cleanup(func() { _ = admin.Delete(context.Background(), fc) })
	return &world{admin: admin, consumerName: consumerName, providerName: providerName,
		consumerID: consumerID, cns: cns, pns: pns, tenantNS: tenantNS, fc: fc}
}

func TestTheConsumerAndTheProviderExchangeKeysEndpointsAndViews(t *testing.T) {
	w := newWorld(t, "10.64.0.0/12", "10.80.0.0/12", "")
	ctx := t.Context()
	admin, fc := w.admin, w.fc
	consumerName, providerName, consumerID := w.consumerName, w.providerName, w.consumerID
	cns, pns, tenantNS := w.cns, w.pns, w.tenantNS
	suffix := strings.TrimPrefix(consumerName, "consumer-")

	// The provider answers with its gateway, which waits for a node: the
	// endpoint is the NodePort on the gateway pod's node.
	serverTunnel := offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelServer, consumerName)
	gw := offloadv1alpha1.GatewayName(serverTunnel)
	var service corev1.Service
	framework.Eventually(t, 20*time.Second, "the provider publishes its gateway", func(ctx context.Context) bool {
		return admin.Get(ctx, client.ObjectKey{Namespace: pns, Name: gw}, &service) == nil && service.Spec.Ports[0].NodePort != 0
	})
	if service.Spec.Type != corev1.ServiceTypeNodePort || service.Spec.Ports[0].Protocol != corev1.ProtocolUDP {
		t.Errorf("gateway Service: %+v", service.Spec)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + suffix}}
	must(t, admin.Create(ctx, node))
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.99.2.1"}}
	must(t, admin.Status().Update(ctx, node))
	t.Cleanup(func() { _ = admin.Delete(context.Background(), node) })
	must(t, admin.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: gw + "-x", Namespace: pns, Labels: gatewayLabels(serverTunnel)},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "gateway", Image: "x"}}}}))
	endpoint := fmt.Sprintf("10.99.2.1:%d", service.Spec.Ports[0].NodePort)

	// The consumer's Tunnel gets the provider's key, endpoint and a view of
	// its pods; the provider's the consumer's key and a view of them.
	clientTunnel := &offloadv1alpha1.Tunnel{}
	framework.Eventually(t, 30*time.Second, "the consumer's Tunnel has the provider's side", func(ctx context.Context) bool {
		return admin.Get(ctx, client.ObjectKey{Namespace: cns, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, providerName)}, clientTunnel) == nil &&
			clientTunnel.Spec.Endpoint == endpoint
	})
	var np offloadv1alpha1.NetworkPeering
	must(t, admin.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: offloadv1alpha1.NetworkPeeringName}, &np))
	var server offloadv1alpha1.Tunnel
	must(t, admin.Get(ctx, client.ObjectKey{Namespace: pns, Name: serverTunnel}, &server))
	if clientTunnel.Spec.PeerPublicKey != np.Status.PublicKey || server.Spec.PeerPublicKey != np.Spec.PublicKey || np.Spec.PublicKey == np.Status.PublicKey {
		t.Errorf("keys: client tunnel has %q, server %q; the peering says consumer %q, provider %q",
			clientTunnel.Spec.PeerPublicKey, server.Spec.PeerPublicKey, np.Spec.PublicKey, np.Status.PublicKey)
	}
	wantClient := []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.64.0.0/16"}}
	wantServer := []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.80.0.0/16"}}
	if !slices.Equal(clientTunnel.Spec.Mappings, wantClient) || !slices.Equal(server.Spec.Mappings, wantServer) || !slices.Equal(np.Status.ConsumerViews, wantServer) {
		t.Errorf("views: consumer %v, provider %v, told the consumer %v", clientTunnel.Spec.Mappings, server.Spec.Mappings, np.Status.ConsumerViews)
	}
	// The consumer announces its view of the provider's pods, which the
	// provider does not mirror: it lies outside the provider's pool (the
	// same pool on both sides mirrors, see below).
	framework.Eventually(t, 20*time.Second, "the provider answers the consumer's view of its pods", func(ctx context.Context) bool {
		if admin.Get(ctx, client.ObjectKeyFromObject(&np), &np) != nil {
			return false
		}
		ready := meta.FindStatusCondition(np.Status.Conditions, offloadv1alpha1.ConditionReady)
		return slices.Equal(np.Spec.ProviderViews, wantClient) && ready != nil && strings.Contains(ready.Message, "outside this cluster's remap pools (10.80.0.0/12)")
	})
	must(t, admin.Get(ctx, client.ObjectKeyFromObject(&server), &server))
	if server.Spec.PeerViews != nil {
		t.Errorf("the provider mirrors %v, outside its pool", server.Spec.PeerViews)
	}
	if metav1.GetControllerOf(clientTunnel).Name != fc.Name || metav1.GetControllerOf(&server).Name != consumerName {
		t.Errorf("owners: the consumer's Tunnel %v, the provider's %v", metav1.GetControllerOf(clientTunnel), metav1.GetControllerOf(&server))
	}

	// Each side runs its gateway with its own ServiceAccount, allowed only
	// its Tunnel.
	for ns, tunnel := range map[string]string{cns: clientTunnel.Name, pns: serverTunnel} {
		name := offloadv1alpha1.GatewayName(tunnel)
		var d appsv1.Deployment
		var r rbacv1.Role
		// The controller renders the gateway after it writes the Tunnel.
		framework.Eventually(t, 20*time.Second, "the gateway "+ns+"/"+name+" is rendered", func(ctx context.Context) bool {
			return admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d) == nil &&
				admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &r) == nil
		})
		args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
		if d.Spec.Template.Spec.ServiceAccountName != name || !strings.Contains(args, "--tunnel="+tunnel) || *d.Spec.Replicas != 1 {
			t.Errorf("Deployment %s/%s: sa %s, args %q", ns, name, d.Spec.Template.Spec.ServiceAccountName, args)
		}
		for _, rule := range r.Rules {
			if !slices.Equal(rule.ResourceNames, []string{tunnel}) {
				t.Errorf("Role %s/%s reaches beyond its Tunnel: %+v", ns, name, rule)
			}
		}
	}

	// Until the gateways report, the network is pending; then the path
	// MTUs agree on the smaller, and the peering is Established.
	framework.Eventually(t, 10*time.Second, "NetworkReady is False while the gateway starts", func(ctx context.Context) bool {
		_ = admin.Get(ctx, client.ObjectKeyFromObject(fc), fc)
		c := meta.FindStatusCondition(fc.Status.Conditions, offloadv1alpha1.ConditionNetworkReady)
		return c != nil && c.Reason == "GatewayStarting" && fc.Status.Network == offloadv1alpha1.PhasePending
	})
	report := func(t1 *offloadv1alpha1.Tunnel, pathMTU int32, connected bool) {
		must(t, admin.Get(ctx, client.ObjectKeyFromObject(t1), t1))
		st := metav1.ConditionFalse
		if connected {
			st = metav1.ConditionTrue
		}
		t1.Status = offloadv1alpha1.TunnelStatus{Implementation: "userspace", PathMTU: pathMTU, Connected: connected,
			Conditions: []metav1.Condition{{Type: offloadv1alpha1.ConditionReady, Status: st, Reason: map[bool]string{true: "Connected", false: "Disconnected"}[connected], LastTransitionTime: metav1.Now()}}}
		must(t, admin.Status().Update(ctx, t1))
	}
	report(&server, 1380, true)
	report(clientTunnel, 1420, true)
	framework.Eventually(t, 30*time.Second, "both sides agree on the smaller MTU and the network is Established", func(ctx context.Context) bool {
		_ = admin.Get(ctx, client.ObjectKeyFromObject(fc), fc)
		_ = admin.Get(ctx, client.ObjectKeyFromObject(clientTunnel), clientTunnel)
		_ = admin.Get(ctx, client.ObjectKeyFromObject(&server), &server)
		c := meta.FindStatusCondition(fc.Status.Conditions, offloadv1alpha1.ConditionNetworkReady)
		return clientTunnel.Spec.MTU == 1380 && server.Spec.MTU == 1380 && c != nil && c.Status == metav1.ConditionTrue &&
			fc.Status.Network == offloadv1alpha1.PhaseEstablished
	})

	// The tenant filter follows the consumer's pods in its twin
	// namespaces, and no other: not a pod of another namespace, though it
	// is labelled as a consumer's, nor one in the twin namespace without
	// the label every pod a consumer sends carries (the provider does not
	// watch it, and lets nothing reach it).
	twin := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "twin-" + suffix, Labels: map[string]string{offloadv1alpha1.LabelTenant: consumerID}}}
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other-" + suffix}}
	must(t, admin.Create(ctx, twin))
	must(t, admin.Create(ctx, other))
	sent := map[string]string{offloadv1alpha1.LabelOriginPodUID: "3f0c6a7e-0000-4000-8000-000000000001"}
	for i, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: twin.Name, Labels: sent}},
		{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: other.Name, Labels: sent}},
		{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled", Namespace: twin.Name}},
	} {
		p.Spec = corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "app", Image: "x"}}}
		must(t, admin.Create(ctx, p))
		p.Status.PodIP = fmt.Sprintf("10.244.1.%d", 7+i)
		p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
		must(t, admin.Status().Update(ctx, p))
	}
	framework.Eventually(t, 20*time.Second, "the provider's tenant filter allows the twin namespace's pod", func(ctx context.Context) bool {
		_ = admin.Get(ctx, client.ObjectKeyFromObject(&server), &server)
		return slices.Equal(server.Spec.AllowedDestinations, []string{"10.244.1.7/32"})
	})

	// Networking turned off for the peering: the Tunnel goes, and the
	// status says disabled, not broken.
	update(t, admin, fc, func() { fc.Spec.Networking.Disabled = true })
	framework.Eventually(t, 20*time.Second, "a peering without networking has no Tunnel and says so", func(ctx context.Context) bool {
		_ = admin.Get(ctx, client.ObjectKeyFromObject(fc), fc)
		c := meta.FindStatusCondition(fc.Status.Conditions, offloadv1alpha1.ConditionNetworkReady)
		gone := admin.Get(ctx, client.ObjectKeyFromObject(clientTunnel), &offloadv1alpha1.Tunnel{}) != nil
		return gone && c != nil && c.Reason == offloadv1alpha1.ReasonNetworkingDisabled && fc.Status.Network == offloadv1alpha1.PhaseNone
	})
}

// Both sides allocate from the same default pool: the consumer's view of
// the provider's pods stays clear of the provider's view of its own, so
// that the provider can mirror it.
func TestTheSamePoolOnBothSidesGivesViewsTheProviderCanMirror(t *testing.T) {
	w := newWorld(t, "10.64.0.0/12", "10.64.0.0/12", "203.0.113.7")
	var clientTunnel, server offloadv1alpha1.Tunnel
	serverKey := client.ObjectKey{Namespace: w.pns, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelServer, w.consumerName)}
	clientKey := client.ObjectKey{Namespace: w.cns, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, w.providerName)}
	framework.Eventually(t, 30*time.Second, "the provider mirrors the consumer's view", func(ctx context.Context) bool {
		return w.admin.Get(ctx, clientKey, &clientTunnel) == nil && w.admin.Get(ctx, serverKey, &server) == nil &&
			len(clientTunnel.Spec.Mappings) == 1 && slices.Equal(server.Spec.PeerViews, clientTunnel.Spec.Mappings)
	})
	want := []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.65.0.0/16"}}
	if !slices.Equal(clientTunnel.Spec.Mappings, want) || server.Spec.Mappings[0].View != "10.64.0.0/16" {
		t.Errorf("the consumer sees the provider's pods as %v (want %v), the provider the consumer's as %v", clientTunnel.Spec.Mappings, want, server.Spec.Mappings)
	}
}

// A remap pool too small for the provider's pod CIDR fails the peering's
// network with what to do, and starts no gateway on the consumer.
func TestAPoolTooSmallForThePeersPodCIDRSaysSo(t *testing.T) {
	w := newWorld(t, "10.64.0.0/20", "10.80.0.0/12", "203.0.113.7")
	var fc offloadv1alpha1.ForeignCluster
	framework.Eventually(t, 30*time.Second, "NetworkReady=False NoFreeView on the consumer", func(ctx context.Context) bool {
		if err := w.admin.Get(ctx, client.ObjectKeyFromObject(w.fc), &fc); err != nil {
			return false
		}
		c := meta.FindStatusCondition(fc.Status.Conditions, offloadv1alpha1.ConditionNetworkReady)
		return c != nil && c.Reason == "NoFreeView" && fc.Status.Network == offloadv1alpha1.PhaseFailed
	})
	c := meta.FindStatusCondition(fc.Status.Conditions, offloadv1alpha1.ConditionNetworkReady)
	if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "10.244.0.0/16") || !strings.Contains(c.Message, "10.64.0.0/20") {
		t.Errorf("NetworkReady = %+v; want False naming the peer's CIDR and the pool", c)
	}
	var deployments appsv1.DeploymentList
	must(t, w.admin.List(t.Context(), &deployments, client.InNamespace(w.cns)))
	if len(deployments.Items) > 0 {
		t.Errorf("a gateway started on the consumer without a view: %s", deployments.Items[0].Name)
	}
}
