package install

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

func testNode(name string, opts ...func(*corev1.Node)) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func withProviderID(id string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Spec.ProviderID = id }
}
func withLabel(k, v string) func(*corev1.Node) { return func(n *corev1.Node) { n.Labels[k] = v } }
func withAnnotation(k, v string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Annotations[k] = v }
}
func withPodCIDRs(cidrs ...string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Spec.PodCIDRs = cidrs }
}
func withInternalIP(ip string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
}

var (
	controlPlane = withLabel("node-role.kubernetes.io/control-plane", "")
	criSocket    = withAnnotation(kubeadmCRISocketAnnotation, "unix:///run/containerd/containerd.sock")
	kwokFake     = withAnnotation(kwokNodeAnnotation, "fake")
	virtualNode  = withLabel(offloadv1alpha1.LabelType, "virtual-node")
)

// kindNodes is what `kind create cluster --name dev` with one worker registers.
func kindNodes() []corev1.Node {
	return []corev1.Node{
		testNode("dev-control-plane", withProviderID("kind://docker/dev/dev-control-plane"), criSocket, controlPlane, withPodCIDRs("10.244.0.0/24"), withInternalIP("172.18.0.3")),
		testNode("dev-worker", withProviderID("kind://docker/dev/dev-worker"), criSocket, withPodCIDRs("10.244.1.0/24"), withInternalIP("172.18.0.2")),
	}
}

// k3sNodes is a k3s server and agent; nodeArgs is the server's k3s.io/node-args.
func k3sNodes(nodeArgs string) []corev1.Node {
	return []corev1.Node{
		testNode("server-0", withProviderID("k3s://server-0"), withLabel(k3sInstanceTypeLabel, "k3s"),
			withLabel("node-role.kubernetes.io/control-plane", "true"), withLabel("node-role.kubernetes.io/master", "true"),
			withAnnotation(k3sNodeArgsAnnotation, nodeArgs), withPodCIDRs("10.42.0.0/24"), withInternalIP("192.168.1.10")),
		testNode("agent-0", withProviderID("k3s://agent-0"), withLabel(k3sInstanceTypeLabel, "k3s"),
			withAnnotation(k3sNodeArgsAnnotation, `["agent"]`), withPodCIDRs("10.42.1.0/24"), withInternalIP("192.168.1.11")),
	}
}

func kubeadmNodes() []corev1.Node {
	return []corev1.Node{
		testNode("cp-1", criSocket, controlPlane, withPodCIDRs("10.32.0.0/24"), withInternalIP("10.0.0.10")),
		testNode("worker-1", criSocket, withPodCIDRs("10.32.1.0/24"), withInternalIP("10.0.0.11")),
	}
}

func TestDetectProvider(t *testing.T) {
	tests := []struct {
		name       string
		nodes      []corev1.Node
		want       Provider
		wantSource string
	}{
		{"kind nodes are told by their providerID, although they are kubeadm nodes too", kindNodes(),
			ProviderKind, "node providerID kind://docker/dev/dev-control-plane"},
		{"k3s nodes are told by their providerID", k3sNodes(`["server"]`),
			ProviderK3s, "node providerID k3s://server-0"},
		{"a k3s node without providerID is told by its instance-type label",
			[]corev1.Node{testNode("n1", withLabel(k3sInstanceTypeLabel, "k3s"))}, ProviderK3s, "node n1 label node.kubernetes.io/instance-type=k3s"},
		{"a k3s node without providerID or label is told by its k3s.io annotations",
			[]corev1.Node{testNode("n1", withAnnotation("k3s.io/node-args", "[]"), withAnnotation("k3s.io/hostname", "n1"))}, ProviderK3s, "node n1 annotation k3s.io/hostname"},
		{"k3s wins over kind when nodes disagree",
			append(kindNodes(), testNode("x", withAnnotation("k3s.io/hostname", "x"))), ProviderK3s, "node x annotation k3s.io/hostname"},
		{"kubeadm nodes are told by their CRI socket annotation", kubeadmNodes(),
			ProviderKubeadm, "node cp-1 annotation kubeadm.alpha.kubernetes.io/cri-socket"},
		{"nodes of a managed cloud are generic",
			[]corev1.Node{testNode("gke-1", withProviderID("gce://project/europe-west1-b/gke-1"))}, ProviderGeneric, "no kind, k3s or kubeadm markers on nodes"},
		{"a cluster without nodes is generic", nil, ProviderGeneric, "no kind, k3s or kubeadm markers on nodes"},
		{"kwok fake nodes and virtual nodes are ignored",
			[]corev1.Node{testNode("fake", kwokFake, withProviderID("kind://docker/x/fake")), testNode("offload-p", virtualNode, criSocket)},
			ProviderGeneric, "no kind, k3s or kubeadm markers on nodes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, src := DetectProvider(tt.nodes)
			if got != tt.want || src != tt.wantSource {
				t.Errorf("DetectProvider() = %q, %q; want %q, %q", got, src, tt.want, tt.wantSource)
			}
		})
	}
}

func TestNodePodCIDRs(t *testing.T) {
	tests := []struct {
		name       string
		provider   Provider
		nodes      []corev1.Node
		want       string
		wantSource string
	}{
		{"a single node's range is widened to a /16", ProviderGeneric,
			[]corev1.Node{testNode("a", withPodCIDRs("10.8.3.0/24"))}, "10.8.0.0/16", "node podCIDRs (widened)"},
		{"neighbouring node ranges are widened to the /16 holding them", ProviderGeneric,
			[]corev1.Node{testNode("a", withPodCIDRs("10.8.0.0/24")), testNode("b", withPodCIDRs("10.8.1.0/24"))}, "10.8.0.0/16", "node podCIDRs (widened)"},
		{"node ranges spanning more than a /16 give their smallest supernet", ProviderGeneric,
			[]corev1.Node{testNode("a", withPodCIDRs("10.244.0.0/24")), testNode("b", withPodCIDRs("10.245.7.0/24"))}, "10.244.0.0/15", "node podCIDRs"},
		{"the IPv4 range of dual-stack nodes is used", ProviderGeneric,
			[]corev1.Node{testNode("a", withPodCIDRs("fd00:10:244::/64", "10.1.0.0/24"))}, "10.1.0.0/16", "node podCIDRs (widened)"},
		{"the legacy podCIDR field is read when podCIDRs is empty", ProviderGeneric,
			[]corev1.Node{testNode("a", func(n *corev1.Node) { n.Spec.PodCIDR = "10.9.0.0/24" })}, "10.9.0.0/16", "node podCIDRs (widened)"},
		{"unrelated node ranges are not a pod CIDR", ProviderGeneric,
			[]corev1.Node{testNode("a", withPodCIDRs("10.0.0.0/24")), testNode("b", withPodCIDRs("192.168.0.0/24"))}, "", "not detected"},
		{"IPv6-only nodes give no IPv4 pod CIDR", ProviderGeneric,
			[]corev1.Node{testNode("a", withPodCIDRs("fd00::/64"))}, "", "not detected"},
		{"fake and virtual nodes do not count", ProviderGeneric,
			[]corev1.Node{testNode("a", kwokFake, withPodCIDRs("10.1.0.0/24")), testNode("b", virtualNode, withPodCIDRs("10.2.0.0/24"))}, "", "not detected"},
		{"kind without node ranges falls back to its default", ProviderKind, nil, "10.244.0.0/16", "default for kind"},
		{"k3s node ranges come before its default", ProviderK3s,
			[]corev1.Node{testNode("a", withPodCIDRs("10.52.3.0/24"))}, "10.52.0.0/16", "node podCIDRs (widened)"},
		{"k3s without node-args or node ranges falls back to its default", ProviderK3s,
			[]corev1.Node{testNode("a")}, "10.42.0.0/16", "default for k3s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, src := detectPodCIDR(context.Background(), fake.NewClientset(), tt.provider, realNodes(tt.nodes))
			if got != tt.want || src != tt.wantSource {
				t.Errorf("detectPodCIDR() = %q, %q; want %q, %q", got, src, tt.want, tt.wantSource)
			}
		})
	}
}

func TestSupernet(t *testing.T) {
	tests := []struct {
		name     string
		prefixes []string
		want     string
	}{
		{"one prefix is its own supernet", []string{"10.244.1.0/24"}, "10.244.1.0/24"},
		{"a prefix inside another gives the outer one", []string{"10.0.0.0/8", "10.1.2.0/24"}, "10.0.0.0/8"},
		{"adjacent prefixes merge", []string{"10.244.0.0/24", "10.244.1.0/24"}, "10.244.0.0/23"},
		{"prefixes far apart give a short supernet", []string{"10.244.0.0/24", "10.245.255.0/24", "10.244.9.0/24"}, "10.244.0.0/15"},
		{"disjoint private ranges only share the first bit", []string{"10.0.0.0/24", "192.168.0.0/24"}, "0.0.0.0/0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ps []netip.Prefix
			for _, p := range tt.prefixes {
				ps = append(ps, netip.MustParsePrefix(p))
			}
			got, ok := supernet(ps)
			if !ok || got.String() != tt.want {
				t.Errorf("supernet(%v) = %v, %v; want %s", tt.prefixes, got, ok, tt.want)
			}
		})
	}
	if _, ok := supernet(nil); ok {
		t.Error("supernet(nil) reported a prefix")
	}
}

func TestFlagValue(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		want      string
		wantFound bool
	}{
		{"a --flag=value argument", []string{"kube-controller-manager", "--cluster-cidr=10.244.0.0/16"}, "10.244.0.0/16", true},
		{"a --flag value pair", []string{"kube-controller-manager", "--cluster-cidr", "10.244.0.0/16"}, "10.244.0.0/16", true},
		{"a flag inside a shell command", []string{"/bin/sh", "-c", "exec kube-controller-manager --v=2 --cluster-cidr=10.1.0.0/16"}, "10.1.0.0/16", true},
		{"the last occurrence wins", []string{"--cluster-cidr=10.1.0.0/16", "--cluster-cidr=10.2.0.0/16"}, "10.2.0.0/16", true},
		{"a flag with a longer name does not match", []string{"--cluster-cidr-mask=24"}, "", false},
		{"a flag without a value is absent", []string{"--cluster-cidr"}, "", false},
		{"an absent flag is not found", []string{"kube-controller-manager", "--v=2"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found := flagValue(tt.args, "cluster-cidr")
			if got != tt.want || found != tt.wantFound {
				t.Errorf("flagValue(%q) = %q, %v; want %q, %v", tt.args, got, found, tt.want, tt.wantFound)
			}
		})
	}
}

func TestFirstIPv4CIDR(t *testing.T) {
	tests := map[string]string{
		"10.244.0.0/16":                   "10.244.0.0/16",
		"fd00:10:244::/56, 10.244.0.0/16": "10.244.0.0/16",
		"10.96.0.1/12":                    "10.96.0.0/12",
		"fd00::/108":                      "",
		"not-a-cidr":                      "",
		"":                                "",
	}
	for in, want := range tests {
		if got := firstIPv4CIDR(in); got != want {
			t.Errorf("firstIPv4CIDR(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestSanitizeClusterName(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"a valid name is kept", "dev", "dev"},
		{"upper case is lowered", "Prod-EU", "prod-eu"},
		{"runs of other characters become one dash", "gke_my-project_europe-west1_prod", "gke-my-project-europe-west1-prod"},
		{"an EKS ARN becomes a label", "arn:aws:eks:eu-west-1:123456789012:cluster/prod", "arn-aws-eks-eu-west-1-123456789012-cluster-prod"},
		{"leading and trailing dashes are trimmed", "--kind-dev--", "kind-dev"},
		{"non-ASCII letters are dropped", "café", "caf"},
		{"long names are cut to 63 characters without a trailing dash", "a-" + strings.Repeat("b", 61) + "-cc", "a-" + strings.Repeat("b", 61)},
		{"nothing usable gives an empty name", "@@@", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SanitizeClusterName(tt.in); got != tt.want {
				t.Errorf("SanitizeClusterName(%q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseProvider(t *testing.T) {
	for _, p := range Providers {
		if got, err := ParseProvider(string(p)); got != p || err != nil {
			t.Errorf("ParseProvider(%q) = %q, %v; want it accepted", p, got, err)
		}
	}
	tests := []struct{ name, in, wantErr string }{
		{"an unknown name is refused with the valid ones", "foo", `unknown provider "foo": use one of kind|k3s|kubeadm|generic`},
		{"names are case-sensitive", "Kind", `unknown provider "Kind": use one of kind|k3s|kubeadm|generic`},
		{"an empty name is refused", "", `unknown provider "": use one of kind|k3s|kubeadm|generic`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseProvider(tt.in)
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("ParseProvider(%q) error = %v; want %q", tt.in, err, tt.wantErr)
			}
		})
	}
}

func staticPod(component string, command ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: component + "-cp", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"component": component}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: component, Command: command}}},
	}
}

func serviceCIDRObject(cidrs ...string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
}

func kubernetesSlice(addr string, port int32) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Namespace: metav1.NamespaceDefault, Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(port)}},
	}
}

func clusterObjects(nodes []corev1.Node, more ...runtime.Object) []runtime.Object {
	var out []runtime.Object
	for i := range nodes {
		out = append(out, &nodes[i])
	}
	return append(out, more...)
}

// outOfRange is the API server's answer to a Service whose cluster IP is outside validRange.
func outOfRange(validRange string) error {
	return apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, "probe", field.ErrorList{field.Invalid(
		field.NewPath("spec", "clusterIPs"), []string{probeClusterIP},
		"failed to allocate IP 1.1.1.1: the provided IP (1.1.1.1) is not in the valid range. The range of valid IPs is "+validRange)})
}

// answerProbe makes the fake API server answer Service creation with err, as
// a real one would for a dry run, and fails t when the create is not a dry run.
func answerProbe(t *testing.T, cs *fake.Clientset, err error) {
	cs.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		create := a.(k8stesting.CreateActionImpl)
		if !reflect.DeepEqual(create.CreateOptions.DryRun, []string{metav1.DryRunAll}) {
			t.Errorf("Service created with DryRun=%v; want a dry run", create.CreateOptions.DryRun)
		}
		if err != nil {
			return true, nil, err
		}
		return true, create.GetObject(), nil
	})
}

func TestDetect(t *testing.T) {
	tests := []struct {
		name     string
		objects  []runtime.Object
		probe    error
		restHost string
		// provider is the --provider flag, "" when not given.
		provider Provider
		want     Detection
	}{{
		name: "a kind cluster is read from providerIDs and static pods, and peers reach the control-plane node on 6443",
		objects: clusterObjects(kindNodes(),
			staticPod("kube-controller-manager", "kube-controller-manager", "--cluster-cidr=10.244.0.0/16"),
			staticPod("kube-apiserver", "kube-apiserver", "--service-cluster-ip-range=10.96.0.0/16")),
		restHost: "https://127.0.0.1:41234",
		want: Detection{
			Provider: ProviderKind, ProviderSource: "node providerID kind://docker/dev/dev-control-plane",
			ClusterName: "dev", ClusterNameSource: "node providerID kind://docker/dev/dev-control-plane",
			PodCIDR: "10.244.0.0/16", PodCIDRSource: "kube-controller-manager --cluster-cidr",
			ServiceCIDR: "10.96.0.0/16", ServiceCIDRSource: "kube-apiserver --service-cluster-ip-range",
			APIServerURL: "https://172.18.0.3:6443", APIServerURLSource: "control-plane node dev-control-plane InternalIP, port 6443",
		},
	}, {
		name:     "a kind cluster without static pods takes node podCIDRs and the ServiceCIDR object",
		objects:  clusterObjects(kindNodes(), serviceCIDRObject("10.96.0.0/12")),
		restHost: "https://127.0.0.1:41234",
		want: Detection{
			Provider: ProviderKind, ProviderSource: "node providerID kind://docker/dev/dev-control-plane",
			ClusterName: "dev", ClusterNameSource: "node providerID kind://docker/dev/dev-control-plane",
			PodCIDR: "10.244.0.0/16", PodCIDRSource: "node podCIDRs (widened)",
			ServiceCIDR: "10.96.0.0/12", ServiceCIDRSource: "ServiceCIDR kubernetes",
			APIServerURL: "https://172.18.0.3:6443", APIServerURLSource: "control-plane node dev-control-plane InternalIP, port 6443",
		},
	}, {
		name:     "a k3s cluster is read from the server's node-args, and its API server port is kept",
		objects:  clusterObjects(k3sNodes(`["server","--cluster-cidr","10.52.0.0/16","--service-cidr=10.53.0.0/16"]`)),
		restHost: "https://127.0.0.1:6443",
		want: Detection{
			Provider: ProviderK3s, ProviderSource: "node providerID k3s://agent-0", ClusterNameSource: "not detected",
			PodCIDR: "10.52.0.0/16", PodCIDRSource: "k3s.io/node-args --cluster-cidr",
			ServiceCIDR: "10.53.0.0/16", ServiceCIDRSource: "k3s.io/node-args --service-cidr",
			APIServerURL: "https://192.168.1.10:6443", APIServerURLSource: "control-plane node server-0 InternalIP",
		},
	}, {
		name:     "a k3s cluster without flags takes its nodes' ranges, and the ServiceCIDR object",
		objects:  clusterObjects(k3sNodes(`["server"]`), serviceCIDRObject("10.55.0.0/16")),
		restHost: "https://localhost:6443",
		want: Detection{
			Provider: ProviderK3s, ProviderSource: "node providerID k3s://agent-0", ClusterNameSource: "not detected",
			PodCIDR: "10.42.0.0/16", PodCIDRSource: "node podCIDRs (widened)",
			ServiceCIDR: "10.55.0.0/16", ServiceCIDRSource: "ServiceCIDR kubernetes",
			APIServerURL: "https://192.168.1.10:6443", APIServerURLSource: "control-plane node server-0 InternalIP",
		},
	}, {
		name:     "a k3s cluster the service range probe answers for takes the probe's range before the k3s default",
		objects:  clusterObjects(k3sNodes(`["server"]`)),
		probe:    outOfRange("10.56.0.0/16"),
		restHost: "https://localhost:6443",
		want: Detection{
			Provider: ProviderK3s, ProviderSource: "node providerID k3s://agent-0", ClusterNameSource: "not detected",
			PodCIDR: "10.42.0.0/16", PodCIDRSource: "node podCIDRs (widened)",
			ServiceCIDR: "10.56.0.0/16", ServiceCIDRSource: "dry-run Service probe",
			APIServerURL: "https://192.168.1.10:6443", APIServerURLSource: "control-plane node server-0 InternalIP",
		},
	}, {
		name:     "--provider k3s on nodes without markers or ranges gives the k3s defaults, each said to be one",
		objects:  clusterObjects([]corev1.Node{testNode("n1", withInternalIP("192.168.1.20"))}),
		probe:    apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("denied")),
		restHost: "https://127.0.0.1:6443",
		provider: ProviderK3s,
		want: Detection{
			Provider: ProviderK3s, ProviderSource: "--provider", ClusterNameSource: "not detected",
			PodCIDR: "10.42.0.0/16", PodCIDRSource: "default for k3s",
			ServiceCIDR: "10.43.0.0/16", ServiceCIDRSource: "default for k3s",
			APIServerURL: "https://127.0.0.1:6443", APIServerURLSource: "kubeconfig server (loopback)", APIServerLoopback: true,
		},
	}, {
		name: "a dual-stack kubeadm cluster gives its IPv4 ranges, and a routable kubeconfig server is kept",
		objects: clusterObjects(kubeadmNodes(), serviceCIDRObject("fd00:10:96::/112", "10.96.0.0/12"),
			staticPod("kube-controller-manager", "kube-controller-manager", "--cluster-cidr", "fd00:10:32::/56,10.32.0.0/12")),
		restHost: "https://10.0.0.10:6443",
		want: Detection{
			Provider: ProviderKubeadm, ProviderSource: "node cp-1 annotation kubeadm.alpha.kubernetes.io/cri-socket", ClusterNameSource: "not detected",
			PodCIDR: "10.32.0.0/12", PodCIDRSource: "kube-controller-manager --cluster-cidr",
			ServiceCIDR: "10.96.0.0/12", ServiceCIDRSource: "ServiceCIDR kubernetes",
			APIServerURL: "https://10.0.0.10:6443", APIServerURLSource: "kubeconfig server",
		},
	}, {
		name: "a generic cluster behind localhost is reached at the kubernetes EndpointSlice, and its service range is probed",
		objects: clusterObjects([]corev1.Node{testNode("gke-1", withProviderID("gce://p/z/gke-1"), withPodCIDRs("10.8.0.0/24")), testNode("gke-2", withPodCIDRs("10.8.1.0/24"))},
			kubernetesSlice("203.0.113.5", 443)),
		probe:    outOfRange("10.100.0.0/16"),
		restHost: "localhost:8443",
		want: Detection{
			Provider: ProviderGeneric, ProviderSource: "no kind, k3s or kubeadm markers on nodes", ClusterNameSource: "not detected",
			PodCIDR: "10.8.0.0/16", PodCIDRSource: "node podCIDRs (widened)",
			ServiceCIDR: "10.100.0.0/16", ServiceCIDRSource: "dry-run Service probe",
			APIServerURL: "https://203.0.113.5:443", APIServerURLSource: "EndpointSlice default/kubernetes",
		},
	}, {
		name:     "a cluster of fake nodes on a loopback address is flagged, and nothing is guessed",
		objects:  clusterObjects([]corev1.Node{testNode("f-0", kwokFake, withPodCIDRs("10.1.0.0/24"))}, kubernetesSlice("127.0.0.1", 39529)),
		probe:    apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("denied")),
		restHost: "https://127.0.0.1:39529",
		want: Detection{
			Provider: ProviderGeneric, ProviderSource: "no kind, k3s or kubeadm markers on nodes", ClusterNameSource: "not detected",
			PodCIDRSource: "not detected", ServiceCIDRSource: "not detected",
			APIServerURL: "https://127.0.0.1:39529", APIServerURLSource: "kubeconfig server (loopback)", APIServerLoopback: true,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset(tt.objects...)
			answerProbe(t, cs, tt.probe)
			got, err := Detect(context.Background(), cs, tt.restHost, tt.provider)
			if err != nil {
				t.Fatalf("Detect() error = %v", err)
			}
			if *got != tt.want {
				t.Errorf("Detect() =\n%+v\nwant\n%+v", *got, tt.want)
			}
		})
	}
}

func TestDetectFailsWhenNodesCannotBeListed(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("denied"))
	})
	_, err := Detect(context.Background(), cs, "https://127.0.0.1:6443", "")
	if !apierrors.IsForbidden(err) || !strings.HasPrefix(err.Error(), "listing nodes: ") {
		t.Errorf("Detect() error = %v; want a wrapped Forbidden error saying nodes could not be listed", err)
	}
}

func TestProbeServiceCIDR(t *testing.T) {
	tests := []struct {
		name   string
		answer error
		want   string
	}{
		{"the range named in the refusal is the service CIDR", outOfRange("10.96.0.0/12"), "10.96.0.0/12"},
		{"a sentence-ending dot is not part of the range", outOfRange("10.96.0.0/12."), "10.96.0.0/12"},
		{"the first IPv4 range of several is taken", outOfRange("fd00::/108,10.0.0.0/24"), "10.0.0.0/24"},
		{"an IPv6-only range is not detected", outOfRange("fd00::/108"), ""},
		{"a refusal for another reason is not detected", apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, "probe",
			field.ErrorList{field.Required(field.NewPath("spec", "ports"), "")}), ""},
		{"a denied probe is not detected", apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("denied")), ""},
		{"an accepted probe is not detected", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset()
			answerProbe(t, cs, tt.answer)
			if got := probeServiceCIDR(context.Background(), cs); got != tt.want {
				t.Errorf("probeServiceCIDR() = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestSplitServer(t *testing.T) {
	tests := []struct {
		server, host, port string
		loopback           bool
	}{
		{"https://127.0.0.1:6443", "127.0.0.1", "6443", true},
		{"https://localhost:8443", "localhost", "8443", true},
		{"https://[::1]:6443", "::1", "6443", true},
		{"https://0.0.0.0:6443", "0.0.0.0", "6443", true},
		{"127.0.0.2:6443", "127.0.0.2", "6443", true},
		{"https://api.example.com", "api.example.com", "443", false},
		{"https://10.0.0.10:6443/prefix", "10.0.0.10", "6443", false},
		{"http://insecure.example.com", "insecure.example.com", "80", false},
	}
	for _, tt := range tests {
		host, port, ok := peering.SplitServer(tt.server)
		if !ok || host != tt.host || port != tt.port || peering.IsLoopbackHost(host) != tt.loopback {
			t.Errorf("peering.SplitServer(%q) = %q, %q, %v (loopback %v); want %q, %q (loopback %v)",
				tt.server, host, port, ok, peering.IsLoopbackHost(host), tt.host, tt.port, tt.loopback)
		}
	}
	if _, _, ok := peering.SplitServer(""); ok {
		t.Error("peering.SplitServer(\"\") reported an address")
	}
	if got := httpsURL("fd00::1", "6443"); got != "https://[fd00::1]:6443" {
		t.Errorf("httpsURL of an IPv6 address = %q", got)
	}
}
