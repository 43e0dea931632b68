package install

import (
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// Provider is a Kubernetes distribution kubectl offload configures itself for.
type Provider string

// The distributions kubectl offload knows.
const (
	// ProviderKind is a kind (Kubernetes IN Docker) cluster.
	ProviderKind Provider = "kind"
	// ProviderK3s is a k3s (or k3d) cluster.
	ProviderK3s Provider = "k3s"
	// ProviderKubeadm is a cluster set up with kubeadm.
	ProviderKubeadm Provider = "kubeadm"
	// ProviderGeneric is any other cluster; nothing distribution-specific is assumed.
	ProviderGeneric Provider = "generic"
)

// Providers lists the valid --provider values.
var Providers = []Provider{ProviderKind, ProviderK3s, ProviderKubeadm, ProviderGeneric}

// ParseProvider validates a --provider value.
func ParseProvider(s string) (Provider, error) {
	names := make([]string, len(Providers))
	for i, p := range Providers {
		if string(p) == s {
			return p, nil
		}
		names[i] = string(p)
	}
	return "", fmt.Errorf("unknown provider %q: use one of %s", s, strings.Join(names, "|"))
}

// Detection is what install found out about the cluster. Each value comes
// with a Source, shown to the user, that says how it was found, such as
// "ServiceCIDR kubernetes" or "default for k3s"; values that could not be
// found are empty, with Source "not detected".
type Detection struct {
	// Provider is the Kubernetes distribution.
	Provider       Provider `json:"provider"`
	ProviderSource string   `json:"providerSource"`
	// ClusterName is the distribution's own name for the cluster, such as the
	// kind cluster name; empty when unknown.
	ClusterName       string `json:"clusterName,omitempty"`
	ClusterNameSource string `json:"clusterNameSource"`
	// PodCIDR is the IPv4 range pod IPs come from.
	PodCIDR       string `json:"podCIDR,omitempty"`
	PodCIDRSource string `json:"podCIDRSource"`
	// ServiceCIDR is the IPv4 range Service cluster IPs come from.
	ServiceCIDR       string `json:"serviceCIDR,omitempty"`
	ServiceCIDRSource string `json:"serviceCIDRSource"`
	// APIServerURL is the https://host:port URL peers should use to reach the
	// API server.
	APIServerURL       string `json:"apiServerURL,omitempty"`
	APIServerURLSource string `json:"apiServerURLSource"`
	// APIServerLoopback is true when APIServerURL is a loopback address, which
	// peers on other hosts cannot reach.
	APIServerLoopback bool `json:"apiServerLoopback"`
	// MutatingAdmissionPolicy is true when the API server serves
	// admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Kubernetes
	// v1.36 on), which can do the scheduling webhook's work.
	MutatingAdmissionPolicy bool `json:"mutatingAdmissionPolicy"`
}

const (
	sourceNotDetected = "not detected"

	k3sDefaultPodCIDR     = "10.42.0.0/16"
	k3sDefaultServiceCIDR = "10.43.0.0/16"
	kindDefaultPodCIDR    = "10.244.0.0/16"

	k3sInstanceTypeLabel       = "node.kubernetes.io/instance-type"
	k3sAnnotationPrefix        = "k3s.io/"
	k3sNodeArgsAnnotation      = "k3s.io/node-args"
	kubeadmCRISocketAnnotation = "kubeadm.alpha.kubernetes.io/cri-socket"
	kwokNodeAnnotation         = "kwok.x-k8s.io/node"

	// nodePodCIDRBits is how wide a pod CIDR guessed from node podCIDRs is
	// made at least, so that nodes added later fall inside it.
	nodePodCIDRBits = 16
	// minNodePodCIDRBits rejects a supernet of node podCIDRs so wide that the
	// nodes' ranges are evidently unrelated.
	minNodePodCIDRBits = 8
)

// Detect inspects the cluster behind kube; restHost is the API server address
// of the kubeconfig, and provider the distribution the user named with
// --provider ("" to detect it): the distribution's defaults then apply
// where nothing better is found. It fails only when the nodes cannot be listed, which
// makes detection meaningless (the error wraps the API error), or when ctx
// ends. Anything
// merely unknown is left empty with Source "not detected". Detect creates
// nothing: the one write it may send is a server-side dry run.
func Detect(ctx context.Context, kube kubernetes.Interface, restHost string, provider Provider) (*Detection, error) {
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	nodes := realNodes(list.Items)
	d := &Detection{ClusterNameSource: sourceNotDetected}
	d.Provider, d.ProviderSource = DetectProvider(nodes)
	if provider != "" {
		d.Provider, d.ProviderSource = provider, "--provider"
	}
	if d.Provider == ProviderKind {
		if name, providerID := kindClusterName(nodes); name != "" {
			d.ClusterName, d.ClusterNameSource = name, "node providerID "+providerID
		}
	}
	d.PodCIDR, d.PodCIDRSource = detectPodCIDR(ctx, kube, d.Provider, nodes)
	d.ServiceCIDR, d.ServiceCIDRSource = detectServiceCIDR(ctx, kube, d.Provider, nodes)
	detectAPIServerURL(ctx, kube, d, nodes, restHost)
	d.MutatingAdmissionPolicy = servesMutatingAdmissionPolicy(kube.Discovery())
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("detecting cluster settings: %w", err)
	}
	return d, nil
}

// DetectProvider tells the distribution from node labels, annotations and
// providerIDs, and says which marker gave it away. k3s is checked before
// kind, and kind before kubeadm, because kind nodes are kubeadm nodes too.
// kwok fake nodes and kubectl offload's virtual nodes are ignored.
func DetectProvider(nodes []corev1.Node) (Provider, string) {
	nodes = realNodes(nodes)
	for _, n := range nodes {
		if src := k3sMarker(n); src != "" {
			return ProviderK3s, src
		}
	}
	for _, n := range nodes {
		if strings.HasPrefix(n.Spec.ProviderID, "kind://") {
			return ProviderKind, "node providerID " + n.Spec.ProviderID
		}
	}
	for _, n := range nodes {
		if _, ok := n.Annotations[kubeadmCRISocketAnnotation]; ok {
			return ProviderKubeadm, fmt.Sprintf("node %s annotation %s", n.Name, kubeadmCRISocketAnnotation)
		}
	}
	return ProviderGeneric, "no kind, k3s or kubeadm markers on nodes"
}

// k3sMarker returns what marks n as a k3s node, or "".
func k3sMarker(n corev1.Node) string {
	if strings.HasPrefix(n.Spec.ProviderID, "k3s://") {
		return "node providerID " + n.Spec.ProviderID
	}
	if n.Labels[k3sInstanceTypeLabel] == "k3s" {
		return fmt.Sprintf("node %s label %s=k3s", n.Name, k3sInstanceTypeLabel)
	}
	var keys []string
	for k := range n.Annotations {
		if strings.HasPrefix(k, k3sAnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	sort.Strings(keys)
	return fmt.Sprintf("node %s annotation %s", n.Name, keys[0])
}

// kindClusterName returns the cluster name in a kind providerID
// (kind://<provider>/<cluster>/<node>) and that providerID.
func kindClusterName(nodes []corev1.Node) (name, providerID string) {
	for _, n := range nodes {
		rest, ok := strings.CutPrefix(n.Spec.ProviderID, "kind://")
		parts := strings.Split(rest, "/")
		if !ok || len(parts) != 3 {
			continue
		}
		if name := SanitizeClusterName(parts[1]); name != "" {
			return name, n.Spec.ProviderID
		}
	}
	return "", ""
}

// realNodes drops kwok fake nodes and kubectl offload's virtual nodes, whose
// labels and podCIDRs say nothing about the cluster.
func realNodes(nodes []corev1.Node) []corev1.Node {
	var out []corev1.Node
	for _, n := range nodes {
		if n.Annotations[kwokNodeAnnotation] == "fake" || n.Labels[offloadv1alpha1.LabelType] == "virtual-node" {
			continue
		}
		out = append(out, n)
	}
	return out
}

func detectPodCIDR(ctx context.Context, kube kubernetes.Interface, p Provider, nodes []corev1.Node) (cidr, source string) {
	if c := staticPodFlag(ctx, kube, "kube-controller-manager", "cluster-cidr"); c != "" {
		return c, "kube-controller-manager --cluster-cidr"
	}
	if p == ProviderK3s {
		if c := k3sNodeArg(nodes, "cluster-cidr"); c != "" {
			return c, k3sNodeArgsAnnotation + " --cluster-cidr"
		}
	}
	if s, ok := nodePodCIDRSupernet(nodes); ok && s.Bits() >= minNodePodCIDRBits {
		if s.Bits() <= nodePodCIDRBits {
			return s.String(), "node podCIDRs"
		}
		return netip.PrefixFrom(s.Addr(), nodePodCIDRBits).Masked().String(), "node podCIDRs (widened)"
	}
	switch p {
	case ProviderK3s:
		return k3sDefaultPodCIDR, "default for k3s"
	case ProviderKind:
		return kindDefaultPodCIDR, "default for kind"
	}
	return "", sourceNotDetected
}

// staticPodFlag returns the first IPv4 CIDR in flag of the kube-system pods
// labelled component=component, or "" when there is none or they cannot be
// listed.
func staticPodFlag(ctx context.Context, kube kubernetes.Interface, component, flag string) string {
	pods, err := kube.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "component=" + component})
	if err != nil {
		return ""
	}
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			if v, ok := flagValue(append(append([]string{}, c.Command...), c.Args...), flag); ok {
				if cidr := firstIPv4CIDR(v); cidr != "" {
					return cidr
				}
			}
		}
	}
	return ""
}

// k3sNodeArg returns the first IPv4 CIDR in flag of a k3s server's
// command line, which k3s records in the k3s.io/node-args node annotation.
func k3sNodeArg(nodes []corev1.Node, flag string) string {
	for _, n := range nodes {
		var args []string
		if err := json.Unmarshal([]byte(n.Annotations[k3sNodeArgsAnnotation]), &args); err != nil {
			continue
		}
		if v, ok := flagValue(args, flag); ok {
			if cidr := firstIPv4CIDR(v); cidr != "" {
				return cidr
			}
		}
	}
	return ""
}

// flagValue returns the value of --name in a command line given either as
// separate arguments or as shell words ("sh -c 'kube-apiserver --x=y'").
// Like pflag, the last occurrence wins.
func flagValue(args []string, name string) (value string, found bool) {
	var words []string
	for _, a := range args {
		words = append(words, strings.Fields(a)...)
	}
	for i, w := range words {
		if v, ok := strings.CutPrefix(w, "--"+name+"="); ok {
			value, found = v, true
		} else if w == "--"+name && i+1 < len(words) {
			value, found = words[i+1], true
		}
	}
	return value, found
}

// firstIPv4CIDR returns the first IPv4 CIDR, masked, of a comma-separated
// list, or "" when there is none.
func firstIPv4CIDR(list string) string {
	for _, s := range strings.Split(list, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err == nil && p.Addr().Is4() {
			return p.Masked().String()
		}
	}
	return ""
}

// nodePodCIDRSupernet returns the smallest prefix holding the IPv4 podCIDR
// of every node that has one.
func nodePodCIDRSupernet(nodes []corev1.Node) (netip.Prefix, bool) {
	var prefixes []netip.Prefix
	for _, n := range nodes {
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		if c := firstIPv4CIDR(strings.Join(cidrs, ",")); c != "" {
			prefixes = append(prefixes, netip.MustParsePrefix(c))
		}
	}
	return supernet(prefixes)
}

// supernet returns the smallest prefix holding all of prefixes, which must be
// IPv4, or false when there are none.
func supernet(prefixes []netip.Prefix) (netip.Prefix, bool) {
	if len(prefixes) == 0 {
		return netip.Prefix{}, false
	}
	first := prefixes[0].Addr().As4()
	n := prefixes[0].Bits()
	for _, p := range prefixes[1:] {
		a := p.Addr().As4()
		diff := uint32(first[0]^a[0])<<24 | uint32(first[1]^a[1])<<16 | uint32(first[2]^a[2])<<8 | uint32(first[3]^a[3])
		n = min(n, p.Bits(), bits.LeadingZeros32(diff))
	}
	return netip.PrefixFrom(prefixes[0].Addr(), n).Masked(), true
}

func detectServiceCIDR(ctx context.Context, kube kubernetes.Interface, p Provider, nodes []corev1.Node) (cidr, source string) {
	if sc, err := kube.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{}); err == nil {
		if c := firstIPv4CIDR(strings.Join(sc.Spec.CIDRs, ",")); c != "" {
			return c, "ServiceCIDR kubernetes"
		}
	}
	if c := staticPodFlag(ctx, kube, "kube-apiserver", "service-cluster-ip-range"); c != "" {
		return c, "kube-apiserver --service-cluster-ip-range"
	}
	if p == ProviderK3s {
		if c := k3sNodeArg(nodes, "service-cidr"); c != "" {
			return c, k3sNodeArgsAnnotation + " --service-cidr"
		}
	}
	if c := probeServiceCIDR(ctx, kube); c != "" {
		return c, "dry-run Service probe"
	}
	if p == ProviderK3s {
		return k3sDefaultServiceCIDR, "default for k3s"
	}
	return "", sourceNotDetected
}

// probeClusterIP is an address no sane cluster uses for Services.
const probeClusterIP = "1.1.1.1"

var validRangeRE = regexp.MustCompile(`(?i)range of valid IPs is ([0-9a-f.:/,]+)`)

// probeServiceCIDR asks the API server, in a dry run that creates nothing, to
// create a Service with cluster IP 1.1.1.1; the refusal names the valid
// range. Any other answer gives "".
func probeServiceCIDR(ctx context.Context, kube kubernetes.Interface) string {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "offload-service-cidr-probe-"},
		Spec: corev1.ServiceSpec{
			ClusterIP: probeClusterIP,
			Ports:     []corev1.ServicePort{{Name: "https", Port: 443}},
		},
	}
	_, err := kube.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, svc, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsInvalid(err) {
		return ""
	}
	// The API has no structured form of the range; the message is all there is.
	m := validRangeRE.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	return firstIPv4CIDR(strings.TrimRight(m[1], ".,"))
}

// detectAPIServerURL fills in the URL peers should use for the API server.
func detectAPIServerURL(ctx context.Context, kube kubernetes.Interface, d *Detection, nodes []corev1.Node, restHost string) {
	host, port, ok := peering.SplitServer(restHost)
	if ok && !peering.IsLoopbackHost(host) {
		d.APIServerURL, d.APIServerURLSource = httpsURL(host, port), "kubeconfig server"
		return
	}
	switch d.Provider {
	case ProviderKind, ProviderK3s, ProviderKubeadm:
		name, ip := controlPlaneIP(nodes)
		if ip == "" {
			break
		}
		src := fmt.Sprintf("control-plane node %s InternalIP", name)
		p := port
		if d.Provider == ProviderKind || p == "" {
			// kind maps the API server to a random host port; peers on
			// the docker network reach it on 6443.
			p, src = "6443", src+", port 6443"
		}
		d.APIServerURL, d.APIServerURLSource = httpsURL(ip, p), src
		return
	}
	eh, ep, eok := kubernetesEndpoint(ctx, kube)
	switch {
	case eok && !peering.IsLoopbackHost(eh):
		d.APIServerURL, d.APIServerURLSource = httpsURL(eh, ep), "EndpointSlice default/kubernetes"
	case ok:
		d.APIServerURL, d.APIServerURLSource = httpsURL(host, port), "kubeconfig server (loopback)"
		d.APIServerLoopback = true
	case eok:
		d.APIServerURL, d.APIServerURLSource = httpsURL(eh, ep), "EndpointSlice default/kubernetes (loopback)"
		d.APIServerLoopback = true
	default:
		d.APIServerURLSource = sourceNotDetected
	}
}

func httpsURL(host, port string) string { return "https://" + net.JoinHostPort(host, port) }

// controlPlaneIP returns the first control-plane node, by name, that has an
// InternalIP, and that address.
func controlPlaneIP(nodes []corev1.Node) (name, ip string) {
	nodes = append([]corev1.Node(nil), nodes...)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	for _, n := range nodes {
		_, cp := n.Labels["node-role.kubernetes.io/control-plane"]
		_, master := n.Labels["node-role.kubernetes.io/master"]
		if !cp && !master {
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && a.Address != "" {
				return n.Name, a.Address
			}
		}
	}
	return "", ""
}

// kubernetesEndpoint returns the address and port the API server advertises
// in the EndpointSlices of the default/kubernetes Service.
func kubernetesEndpoint(ctx context.Context, kube kubernetes.Interface) (host, port string, ok bool) {
	slices, err := kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=kubernetes",
	})
	if err != nil {
		return "", "", false
	}
	for _, s := range slices.Items {
		port := ""
		for _, p := range s.Ports {
			if p.Port != nil && (port == "" || p.Name != nil && *p.Name == "https") {
				port = strconv.Itoa(int(*p.Port))
			}
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) > 0 && port != "" && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
				return e.Addresses[0], port, true
			}
		}
	}
	return "", "", false
}

// servesMutatingAdmissionPolicy tells whether the API server serves
// admissionregistration.k8s.io/v1 MutatingAdmissionPolicy. An API server
// that cannot say is taken not to: the webhook works everywhere.
func servesMutatingAdmissionPolicy(dc discovery.DiscoveryInterface) bool {
	list, err := dc.ServerResourcesForGroupVersion(admissionregistrationv1.SchemeGroupVersion.String())
	if err != nil {
		return false
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Kind == "MutatingAdmissionPolicy" })
}
