// Package network holds the network fabric's controllers: on the consumer,
// the exchange with each provider through its NetworkPeering and the
// client Tunnel; on the provider, the answer to each consumer's
// NetworkPeering and the server Tunnel. Both sides allocate their views
// of the peer's pod CIDRs (internal/agent/ipam), keep them in the Tunnel,
// and run one gateway per Tunnel (internal/agent/fabric/gateway) with its own
// ServiceAccount, allowed to read only that Tunnel. See docs/networking.md.
package network

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/yaml"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/ipam"
)

// Settings are this cluster's network settings, from the install.
type Settings struct {
	// Namespace is the install namespace, where Tunnels and gateways live.
	Namespace string
	// PodCIDRs and ServiceCIDRs are this cluster's; they are reserved.
	PodCIDRs, ServiceCIDRs []netip.Prefix
	// Pools are where every peer CIDR is remapped; Reserved are further
	// ranges no view may use (node networks, say).
	Pools, Reserved []netip.Prefix
	// PeerRanges bound what a peer may announce as its pod CIDRs.
	PeerRanges ipam.PeerRanges
	// GatewayServiceType is NodePort or LoadBalancer: how consumers reach
	// this cluster's gateways.
	GatewayServiceType corev1.ServiceType
	// GatewayAddress overrides the address consumers dial (host or
	// host:port), for NAT or a fixed load balancer address.
	GatewayAddress string
}

// space is the IPAM space given the views already taken.
// host are this cluster's own addresses (its nodes', its API server's),
// which no view may cover either.
func (s Settings) space(taken, host []netip.Prefix) ipam.Space {
	reserved := slices.Concat(s.PodCIDRs, s.ServiceCIDRs, s.Reserved, ipam.NeverViews, host)
	return ipam.Space{Pools: s.Pools, Reserved: reserved, Taken: taken}
}

// podCIDRStrings are the pod CIDRs as the API writes them.
func (s Settings) podCIDRStrings() []string {
	out := make([]string, len(s.PodCIDRs))
	for i, p := range s.PodCIDRs {
		out[i] = p.String()
	}
	return out
}

// allocation serialises the allocation of views in this process: the
// consumer and the provider controllers both allocate from the same pools,
// and a view is only taken once the Tunnel holding it is written.
var allocation sync.Mutex

// views returns the views of the peer's real CIDRs for Tunnel self: those
// it already holds in the pools for the same real CIDRs are kept, so restarts and
// re-reconciles never renumber; the rest are allocated around every other
// Tunnel's views. When it allocates, it holds the allocation lock and
// reads the Tunnels uncached (reader), so that no two Tunnels get the same
// view; done releases the lock (once, however often it is called), and the
// caller calls it once it wrote self's Tunnel with the views, or gave up.
//
// New views also stay clear of avoid: on the consumer, the provider's own
// views and pod CIDRs, so that the provider can mirror this cluster's view
// of its pods (ProviderReconciler.mirror). Views held already are kept
// even when they overlap it: a peering is never renumbered.
func views(ctx context.Context, reader client.Reader, s Settings, self *offloadv1alpha1.Tunnel, reals []string, avoid ...netip.Prefix) (out []offloadv1alpha1.CIDRMapping, done func(), err error) {
	done = func() {}
	// A view is kept only while it lies in the pools: one from before
	// views were always remapped, or from a pool the admin has since
	// removed, is allocated again.
	kept := map[string]string{}
	pools := ipam.Space{Pools: s.Pools}
	for _, m := range self.Spec.Mappings {
		if v, err := netip.ParsePrefix(m.View); err == nil && pools.InPools(v) {
			kept[m.Real] = m.View
		}
	}
	if out, ok := keptViews(kept, reals); ok {
		return out, done, nil
	}
	allocation.Lock()
	done = sync.OnceFunc(allocation.Unlock)
	defer func() {
		if err != nil {
			done()
		}
	}()
	var tunnels offloadv1alpha1.TunnelList
	if err := reader.List(ctx, &tunnels, client.InNamespace(s.Namespace)); err != nil {
		return nil, done, fmt.Errorf("listing Tunnels: %w", err)
	}
	taken := routedViews(tunnels.Items, self.Name)
	if self.Spec.Role == offloadv1alpha1.TunnelServer {
		taken = append(taken, viewPrefixes(self.Spec.PeerViews)...) // its own mirror
	}
	host, err := HostAddresses(ctx, reader, reader)
	if err != nil {
		return nil, done, err
	}
	space := s.space(slices.Concat(taken, avoid), host)
	for _, r := range reals {
		real, err := netip.ParsePrefix(r)
		if err != nil {
			return nil, done, fmt.Errorf("the peer's pod CIDR %q is not a CIDR", r)
		}
		if v, ok := kept[real.Masked().String()]; ok {
			out = append(out, offloadv1alpha1.CIDRMapping{Real: real.Masked().String(), View: v})
			space.Taken = append(space.Taken, netip.MustParsePrefix(v))
			continue
		}
		v, err := space.View(real)
		if err != nil {
			return nil, done, err
		}
		space.Taken = append(space.Taken, v)
		out = append(out, offloadv1alpha1.CIDRMapping{Real: real.Masked().String(), View: v.String()})
	}
	return out, done, nil
}

// routedViews are the views this cluster routes for its Tunnels but
// except's: each Tunnel's views of its peer, and the consumers' views of
// this cluster's pods that server Tunnels mirror.
func routedViews(tunnels []offloadv1alpha1.Tunnel, except string) []netip.Prefix {
	var out []netip.Prefix
	for i := range tunnels {
		if tunnels[i].Name != except {
			out = append(out, viewPrefixes(tunnels[i].RoutedViews())...)
		}
	}
	return out
}

// viewPrefixes are the views of ms that parse.
func viewPrefixes(ms []offloadv1alpha1.CIDRMapping) []netip.Prefix {
	var out []netip.Prefix
	for _, m := range ms {
		if v, err := netip.ParsePrefix(m.View); err == nil {
			out = append(out, v.Masked())
		}
	}
	return out
}

// keptViews returns the views of reals from kept (real to view), when it
// has one for each.
func keptViews(kept map[string]string, reals []string) ([]offloadv1alpha1.CIDRMapping, bool) {
	out := make([]offloadv1alpha1.CIDRMapping, 0, len(reals))
	for _, r := range reals {
		real, err := netip.ParsePrefix(r)
		if err != nil {
			return nil, false
		}
		v, ok := kept[real.Masked().String()]
		if !ok {
			return nil, false
		}
		out = append(out, offloadv1alpha1.CIDRMapping{Real: real.Masked().String(), View: v})
	}
	return out, true
}

// gatewayKey returns the public key of tunnel's gateway, creating its
// Secret with a new private key the first time. The private key never
// leaves this cluster. Secrets are read uncached (reader): the agent may
// read Secrets only in its own namespace.
func gatewayKey(ctx context.Context, c client.Client, reader client.Reader, ns, tunnel string, owner *offloadv1alpha1.Tunnel) (string, error) {
	name := offloadv1alpha1.GatewayName(tunnel)
	var sec corev1.Secret
	err := reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &sec)
	if apierrors.IsNotFound(err) {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return "", err
		}
		sec = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: gatewayLabels(tunnel)},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{offloadv1alpha1.GatewayPrivateKeyKey: []byte(k.String())},
		}
		if err := controllerutil.SetControllerReference(owner, &sec, c.Scheme()); err != nil {
			return "", err
		}
		if err := c.Create(ctx, &sec); err != nil {
			return "", fmt.Errorf("creating the gateway's key Secret %s/%s: %w", ns, name, err)
		}
		return k.PublicKey().String(), nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the gateway's key Secret %s/%s: %w", ns, name, err)
	}
	k, err := wgtypes.ParseKey(string(sec.Data[offloadv1alpha1.GatewayPrivateKeyKey]))
	if err != nil {
		return "", fmt.Errorf("the gateway's key Secret %s/%s holds no valid key (delete it to get a new one): %w", ns, name, err)
	}
	return k.PublicKey().String(), nil
}

func gatewayLabels(tunnel string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       offloadv1alpha1.ChartName,
		offloadv1alpha1.LabelComponent: offloadv1alpha1.ComponentGateway,
		offloadv1alpha1.LabelTunnel:    tunnel,
	}
}

// ensureGateway creates or updates everything tunnel t's gateway runs
// with: its ServiceAccount, a Role that reads only t and writes only its
// status, the binding, and the Deployment from the chart's pod template.
// All are owned by t, so they go with it.
func ensureGateway(ctx context.Context, c client.Client, reader client.Reader, t *offloadv1alpha1.Tunnel) error {
	name := offloadv1alpha1.GatewayName(t.Name)
	labels := gatewayLabels(t.Name)
	meta := func() metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: t.Namespace, Labels: labels} }

	sa := &corev1.ServiceAccount{ObjectMeta: meta()}
	role := &rbacv1.Role{ObjectMeta: meta()}
	binding := &rbacv1.RoleBinding{ObjectMeta: meta()}
	deploy := &appsv1.Deployment{ObjectMeta: meta()}
	template, err := podTemplate(ctx, reader, t.Namespace)
	if err != nil {
		return err
	}
	for _, o := range []struct {
		obj    client.Object
		mutate func()
	}{
		{sa, func() { sa.AutomountServiceAccountToken = ptr.To(true) }},
		{role, func() {
			role.Rules = []rbacv1.PolicyRule{
				{APIGroups: []string{offloadv1alpha1.GroupVersion.Group}, Resources: []string{"tunnels"}, ResourceNames: []string{t.Name}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{offloadv1alpha1.GroupVersion.Group}, Resources: []string{"tunnels/status"}, ResourceNames: []string{t.Name}, Verbs: []string{"get", "patch", "update"}},
			}
		}},
		{binding, func() {
			binding.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}
			binding.Subjects = []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: t.Namespace}}
		}},
		{deploy, func() { deploy.Spec = GatewayDeployment(t, template).Spec }},
	} {
		if _, err := controllerutil.CreateOrUpdate(ctx, c, o.obj, func() error {
			o.mutate()
			o.obj.SetLabels(labels)
			return controllerutil.SetControllerReference(t, o.obj, c.Scheme())
		}); err != nil {
			return fmt.Errorf("applying the gateway's %T %s: %w", o.obj, name, err)
		}
	}
	return nil
}

// podTemplate reads the chart's gateway pod template.
func podTemplate(ctx context.Context, c client.Reader, ns string) (*corev1.PodTemplateSpec, error) {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: offloadv1alpha1.GatewayTemplateConfigMap}, &cm); err != nil {
		return nil, fmt.Errorf("reading the gateway pod template ConfigMap %s/%s (reinstall to restore it): %w", ns, offloadv1alpha1.GatewayTemplateConfigMap, err)
	}
	var tpl corev1.PodTemplateSpec
	if err := yaml.UnmarshalStrict([]byte(cm.Data[offloadv1alpha1.GatewayTemplateKey]), &tpl); err != nil {
		return nil, fmt.Errorf("the gateway pod template in ConfigMap %s/%s: %w", ns, offloadv1alpha1.GatewayTemplateConfigMap, err)
	}
	if len(tpl.Spec.Containers) == 0 {
		return nil, fmt.Errorf("the gateway pod template in ConfigMap %s/%s has no container", ns, offloadv1alpha1.GatewayTemplateConfigMap)
	}
	return &tpl, nil
}

// GatewayDeployment is the Deployment ensureGateway keeps for tunnel t,
// made from the chart's gateway pod template tpl.
func GatewayDeployment(t *offloadv1alpha1.Tunnel, tpl *corev1.PodTemplateSpec) *appsv1.Deployment {
	name := offloadv1alpha1.GatewayName(t.Name)
	labels := gatewayLabels(t.Name)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: t.Namespace, Labels: labels},
		Spec:       deploymentSpec(t, name, labels, tpl),
	}
}

// deploymentSpec fills the template with what is tunnel t's own: its
// Tunnel, its ServiceAccount and its key. One replica at a time, so two
// gateways never share one tunnel.
func deploymentSpec(t *offloadv1alpha1.Tunnel, name string, labels map[string]string, tpl *corev1.PodTemplateSpec) appsv1.DeploymentSpec {
	pod := tpl.DeepCopy()
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	for k, v := range labels {
		pod.Labels[k] = v
	}
	pod.Spec.ServiceAccountName = name
	pod.Spec.Volumes = append(pod.Spec.Volumes,
		corev1.Volume{Name: "key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name, DefaultMode: ptr.To[int32](0o400)}}},
		corev1.Volume{Name: "wireguard-run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	)
	gw := &pod.Spec.Containers[0]
	gw.Args = append(gw.Args, "--tunnel="+t.Name, "--private-key-file=/etc/offload/gateway/"+offloadv1alpha1.GatewayPrivateKeyKey)
	gw.VolumeMounts = append(gw.VolumeMounts,
		corev1.VolumeMount{Name: "key", MountPath: "/etc/offload/gateway", ReadOnly: true},
		corev1.VolumeMount{Name: "wireguard-run", MountPath: "/var/run/wireguard"},
	)
	if t.Spec.Role == offloadv1alpha1.TunnelServer {
		gw.Ports = append(gw.Ports, corev1.ContainerPort{Name: "wireguard", ContainerPort: offloadv1alpha1.GatewayPort, Protocol: corev1.ProtocolUDP})
	}
	return appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](1),
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
		Template: *pod,
	}
}

// ensureService publishes the server gateway t for its consumer: UDP, of
// the configured type.
func ensureService(ctx context.Context, c client.Client, t *offloadv1alpha1.Tunnel, typ corev1.ServiceType) (*corev1.Service, error) {
	name := offloadv1alpha1.GatewayName(t.Name)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: t.Namespace}}
	_, err := controllerutil.CreateOrUpdate(ctx, c, svc, func() error {
		svc.Labels = gatewayLabels(t.Name)
		svc.Spec.Type = typ
		svc.Spec.Selector = gatewayLabels(t.Name)
		port := corev1.ServicePort{Name: "wireguard", Protocol: corev1.ProtocolUDP, Port: offloadv1alpha1.GatewayPort, TargetPort: intstr.FromInt32(offloadv1alpha1.GatewayPort)}
		if len(svc.Spec.Ports) == 1 {
			port.NodePort = svc.Spec.Ports[0].NodePort // keep the allocated one
		}
		svc.Spec.Ports = []corev1.ServicePort{port}
		return controllerutil.SetControllerReference(t, svc, c.Scheme())
	})
	if err != nil {
		return nil, fmt.Errorf("applying the gateway's Service %s: %w", name, err)
	}
	return svc, nil
}
