package doctor

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/internal/status"
	"github.com/kubectl-offload/kubectl-offload/internal/status/statustest"
)

func TestLoopbackAndClusterInternalHosts(t *testing.T) {
	tests := []struct {
		name, addr         string
		loopback, internal bool
	}{
		{"kind's kubeconfig server is loopback", "https://127.0.0.1:34279", true, false},
		{"any 127/8 address is loopback", "https://127.0.1.1:6443", true, false},
		{"localhost is loopback", "https://localhost:6443", true, false},
		{"a name under localhost is loopback", "https://api.localhost", true, false},
		{"IPv6 loopback in a URL is loopback", "https://[::1]:6443", true, false},
		{"bare IPv6 loopback is loopback", "::1", true, false},
		{"the unspecified address reaches nothing else", "0.0.0.0:51820", true, false},
		{"a node address is reachable", "https://172.18.0.3:31443", false, false},
		{"a host and port is reachable", "gw.example.com:51820", false, false},
		{"a Service name resolves only inside the cluster", "https://offload-auth.offload-system.svc:443", false, true},
		{"a Service FQDN resolves only inside the cluster", "https://offload-auth.offload-system.svc.cluster.local", false, true},
		{"a name that merely contains svc is external", "https://svc.example.com", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := hostOf(tt.addr)
			if got := peering.IsLoopbackHost(h); got != tt.loopback {
				t.Errorf("peering.IsLoopbackHost(%q) = %t, want %t", h, got, tt.loopback)
			}
			if got := isClusterInternal(h); got != tt.internal {
				t.Errorf("isClusterInternal(%q) = %t, want %t", h, got, tt.internal)
			}
		})
	}
}

func TestAPIServerURLCheck(t *testing.T) {
	tests := []struct {
		name, server, advertised string
		want                     status.Status
		says                     string
	}{
		{"a reachable advertised URL passes", "https://127.0.0.1:34279", "https://172.18.0.2:6443", status.StatusOK, "https://172.18.0.2:6443"},
		{"a loopback advertised URL fails", "https://10.0.0.1:6443", "https://127.0.0.1:6443", status.StatusFailed, "kubectl offload upgrade --api-server-url"},
		{"no URL with a loopback kubeconfig fails", "https://127.0.0.1:34279", "", status.StatusFailed, "kubectl offload upgrade --api-server-url"},
		{"no URL with a reachable kubeconfig warns and suggests it", "https://10.0.0.1:6443", "", status.StatusWarning, "--api-server-url https://10.0.0.1:6443"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := apiServerURLCheck(tt.server, tt.advertised)
			if c.Status != tt.want || !strings.Contains(c.Message, tt.says) {
				t.Errorf("got %s %q, want %s saying %q", c.Status, c.Message, tt.want, tt.says)
			}
		})
	}
}

func TestCIDRChecks(t *testing.T) {
	pool := []string{"10.64.0.0/12"}
	tests := []struct {
		name            string
		pod, svc, pools []string
		fabric          bool
		check           string
		want            status.Status
		says            string
	}{
		{"distinct CIDRs and pools pass", []string{"10.244.0.0/16"}, []string{"10.96.0.0/12"}, pool, true, "remapPools", status.StatusOK, "overlap neither"},
		{"a missing pod CIDR fails with the fabric on", nil, []string{"10.96.0.0/12"}, pool, true, "podCIDR", status.StatusFailed, "--pod-cidr"},
		{"a missing pod CIDR warns with the fabric off", nil, []string{"10.96.0.0/12"}, pool, false, "podCIDR", status.StatusWarning, "--pod-cidr"},
		{"a missing service CIDR warns", []string{"10.244.0.0/16"}, nil, pool, true, "serviceCIDR", status.StatusWarning, "--service-cidr"},
		{"a pod CIDR that does not parse fails", []string{"10.244.0.0/33"}, []string{"10.96.0.0/12"}, pool, true, "podCIDR", status.StatusFailed, "--pod-cidr"},
		{"pod and service CIDRs that overlap fail", []string{"10.96.0.0/16"}, []string{"10.96.0.0/12"}, pool, true, "podServiceOverlap", status.StatusFailed, "overlaps the service CIDR 10.96.0.0/12"},
		{"one of several pod CIDRs overlapping fails", []string{"10.244.0.0/16", "10.100.0.0/16"}, []string{"10.96.0.0/12"}, pool, true, "podServiceOverlap", status.StatusFailed, "10.100.0.0/16"},
		{"apart pod and service CIDRs pass", []string{"10.244.0.0/16"}, []string{"10.96.0.0/12"}, pool, true, "podServiceOverlap", status.StatusOK, "do not overlap"},
		{"a pool overlapping the pod CIDR fails", []string{"10.64.0.0/16"}, []string{"10.96.0.0/12"}, pool, true, "remapPools", status.StatusFailed, "overlaps the pod CIDR 10.64.0.0/16"},
		{"a pool overlapping the service CIDR fails", []string{"10.244.0.0/16"}, []string{"10.64.0.0/24"}, pool, true, "remapPools", status.StatusFailed, "overlaps the service CIDR"},
		{"pools overlapping each other fail", []string{"10.244.0.0/16"}, []string{"10.96.0.0/12"}, []string{"10.64.0.0/12", "10.65.0.0/16"}, true, "remapPools", status.StatusFailed, "overlap"},
		{"a pool that does not parse fails", []string{"10.244.0.0/16"}, []string{"10.96.0.0/12"}, []string{"ten/8"}, true, "remapPools", status.StatusFailed, "network.remapPools"},
		{"no pools fail with the fabric on", []string{"10.244.0.0/16"}, []string{"10.96.0.0/12"}, nil, true, "remapPools", status.StatusFailed, "network.remapPools"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checks := cidrChecks(tt.pod, tt.svc, tt.pools, tt.fabric)
			c := checkNamed(checks, tt.check)
			if c == nil {
				t.Fatalf("no check %s in %+v", tt.check, checks)
			}
			if c.Status != tt.want || !strings.Contains(c.Message, tt.says) {
				t.Errorf("%s = %s %q, want %s saying %q", tt.check, c.Status, c.Message, tt.want, tt.says)
			}
		})
	}
}

func TestReservedCheckWantsTheNodeNetworkOutOfThePools(t *testing.T) {
	nodes := []netip.Addr{netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("192.168.1.11")}
	pools := []string{"10.64.0.0/12"}
	tests := []struct {
		name     string
		reserved []string
		nodes    []netip.Addr
		pools    []string
		fabric   bool
		want     status.Status
		says     string
	}{
		{"nothing to check with the fabric off", nil, nodes, pools, false, status.StatusOK, "fabric is off"},
		{"nodes far from the pools pass with nothing reserved", nil, nodes, pools, true, status.StatusOK, "hold no node address"},
		{"a node in a remap pool and not reserved fails", nil, []netip.Addr{netip.MustParseAddr("10.64.3.4")}, pools, true, status.StatusFailed, "remap pool 10.64.0.0/12"},
		{"a node in a remap pool but reserved passes", []string{"10.64.3.0/24"}, []netip.Addr{netip.MustParseAddr("10.64.3.4")}, pools, true, status.StatusOK, "hold no node address"},
		{"a node in the same /16 as a pool warns", nil, []netip.Addr{netip.MustParseAddr("10.80.0.4")}, []string{"10.80.128.0/17"}, true, status.StatusWarning, "10.80.0.4 (pool 10.80.128.0/17)"},
		{"a node in the same /16 as a pool, its /16 reserved, passes", []string{"10.80.0.0/16"}, []netip.Addr{netip.MustParseAddr("10.80.0.4")}, []string{"10.80.128.0/17"}, true, status.StatusOK, "10.80.0.0/16"},
		{"a list that does not parse fails", []string{"node-net"}, nodes, pools, true, status.StatusFailed, "network.reservedCIDRs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := reservedCheck(tt.reserved, tt.nodes, tt.pools, tt.fabric)
			if c.Status != tt.want || !strings.Contains(c.Message, tt.says) {
				t.Errorf("reservedCIDRs = %s %q, want %s saying %q", c.Status, c.Message, tt.want, tt.says)
			}
		})
	}
}

func TestCIDRListSplitsCommasAndLists(t *testing.T) {
	values := map[string]any{"network": map[string]any{
		"podCIDR":    "10.244.0.0/16, 10.245.0.0/16",
		"remapPools": []any{"10.64.0.0/12", "100.64.0.0/16"},
	}}
	if got := strings.Join(cidrList(values, "podCIDR"), " "); got != "10.244.0.0/16 10.245.0.0/16" {
		t.Errorf("podCIDR = %q", got)
	}
	if got := strings.Join(cidrList(values, "remapPools"), " "); got != "10.64.0.0/12 100.64.0.0/16" {
		t.Errorf("remapPools = %q", got)
	}
	if got := cidrList(values, "serviceCIDR"); got != nil {
		t.Errorf("serviceCIDR = %q, want nothing", got)
	}
}

func TestSkewThresholds(t *testing.T) {
	tests := []struct {
		name string
		skew time.Duration
		want status.Status
		says string
	}{
		{"clocks a second apart agree", time.Second, status.StatusOK, "within 30s"},
		{"exactly 30 s is still ok", 30 * time.Second, status.StatusOK, "within 30s"},
		{"31 s ahead warns", 31 * time.Second, status.StatusWarning, "31s ahead of"},
		{"2 minutes behind warns", -2 * time.Minute, status.StatusWarning, "2m0s behind"},
		{"exactly 5 minutes warns", 5 * time.Minute, status.StatusWarning, "enable NTP"},
		{"over 5 minutes ahead fails", 5*time.Minute + time.Second, status.StatusFailed, "enable NTP"},
		{"an hour behind fails", -time.Hour, status.StatusFailed, "1h0m0s behind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := skewCheck("peer/p", "p", tt.skew)
			if c.Status != tt.want || !strings.Contains(c.Message, tt.says) {
				t.Errorf("got %s %q, want %s saying %q", c.Status, c.Message, tt.want, tt.says)
			}
		})
	}
}

func TestClockOffsetReadsTheDateHeader(t *testing.T) {
	sent := time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		date     string
		received time.Time
		want     time.Duration
		wantErr  bool
	}{
		{"a clock in step is off by under a second", "Wed, 02 Jan 2030 12:00:00 GMT", sent.Add(200 * time.Millisecond), 400 * time.Millisecond, false},
		{"a clock 10 minutes ahead", "Wed, 02 Jan 2030 12:10:00 GMT", sent, 10*time.Minute + 500*time.Millisecond, false},
		{"a clock 2 minutes behind", "Wed, 02 Jan 2030 11:58:00 GMT", sent, -2*time.Minute + 500*time.Millisecond, false},
		{"no Date header is an error", "", sent, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := clockOffset(tt.date, sent, tt.received)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("clockOffset = %s, %v; want %s, error %t", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestKubeVersionCheck(t *testing.T) {
	tests := []struct {
		name, constraint, server string
		want                     status.Status
	}{
		{"a supported version passes", ">=1.30.0-0", "v1.35.4", status.StatusOK},
		{"the lowest supported version passes", ">=1.30.0-0", "v1.30.0", status.StatusOK},
		{"a distribution's build suffix passes", ">=1.30.0-0", "v1.31.2+k3s1", status.StatusOK},
		{"a cloud's pre-release suffix passes", ">=1.30.0-0", "v1.30.5-gke.100", status.StatusOK},
		{"an older version fails", ">=1.30.0-0", "v1.29.9", status.StatusFailed},
		{"a version past the range fails", ">=1.30.0-0 <1.36.0-0", "v1.36.0", status.StatusFailed},
		{"an unreadable version warns", ">=1.30.0-0", "unknown", status.StatusWarning},
		{"no constraint passes", "", "v1.20.0", status.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c := kubeVersionCheck(tt.constraint, tt.server); c.Status != tt.want {
				t.Errorf("got %s %q, want %s", c.Status, c.Message, tt.want)
			}
		})
	}
}

func TestProvidersVersionCheckFailsAProviderOutsideTheSkewPolicy(t *testing.T) {
	node := func(name, kubelet string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: kubelet}}}
	}
	if c := providersVersionCheck("v1.37.2", []corev1.Node{node("offload-a", "v1.34.4"), node("offload-b", ""), node("offload-c", "v1.37.0")}); c.Status != status.StatusOK {
		t.Errorf("providers on v1.34 and v1.37 from v1.37: %s %q; want OK", c.Status, c.Message)
	}
	c := providersVersionCheck("v1.37.2", []corev1.Node{node("offload-a", "v1.36.1"), node("offload-old", "v1.33.2")})
	if c.Status != status.StatusFailed || !strings.Contains(c.Message, "offload-old") || strings.Contains(c.Message, "offload-a") || !strings.Contains(c.Message, peering.SupportedKubernetes()) {
		t.Errorf("a provider on v1.33: %s %q; want failed, naming offload-old alone and the policy", c.Status, c.Message)
	}
}

func TestTheChartsKubeVersionIsEmbedded(t *testing.T) {
	c, err := chartKubeVersion()
	if err != nil || !strings.HasPrefix(c, ">=") {
		t.Errorf("chartKubeVersion() = %q, %v; want the constraint of charts/offload/Chart.yaml", c, err)
	}
}

func TestAgentVersionCheck(t *testing.T) {
	tests := []struct {
		name, plugin, agent string
		want                status.Status
		says                string
	}{
		{"the same version passes", "v1.2.3", "v1.2.3", status.StatusOK, "same minor"},
		{"another patch release passes", "v1.2.4", "v1.2.3", status.StatusOK, "same minor"},
		{"a newer plugin says to upgrade the agent", "v1.3.0", "v1.2.3", status.StatusWarning, "run kubectl offload upgrade"},
		{"an older plugin says to update the plugin", "v1.1.0", "v1.2.3", status.StatusWarning, "kubectl krew upgrade offload"},
		{"another major version warns", "v2.2.0", "v1.2.0", status.StatusWarning, "kubectl offload upgrade"},
		{"development builds compare", "v0.0.0-dev", "v0.0.0-dev", status.StatusOK, "same minor"},
		{"an agent without a version warns", "v1.2.3", "", status.StatusWarning, "app.kubernetes.io/version"},
		{"an unreadable version warns", "v1.2.3", "latest", status.StatusWarning, "cannot compare"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := agentVersionCheck(tt.plugin, tt.agent)
			if c.Status != tt.want || !strings.Contains(c.Message, tt.says) {
				t.Errorf("got %s %q, want %s saying %q", c.Status, c.Message, tt.want, tt.says)
			}
		})
	}
}

func TestGatewayAddressChecks(t *testing.T) {
	lb := func(ingress ...corev1.LoadBalancerIngress) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "offload-gateway-in-c", Namespace: statustest.Namespace},
			Spec:   corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 51820, NodePort: 30999}}},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress}}}
	}
	nodePort := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "offload-gateway-in-c"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 51820, NodePort: 30999}}}}
	tests := []struct {
		name  string
		check status.Check
		want  status.Status
	}{
		{"a reachable gateway address passes", gatewayAddressCheck("gw.example.com:51820"), status.StatusOK},
		{"a loopback gateway address fails", gatewayAddressCheck("127.0.0.1"), status.StatusFailed},
		{"a load balancer without an address warns", gatewayServiceCheck(lb(), false), status.StatusWarning},
		{"a load balancer with an address passes", gatewayServiceCheck(lb(corev1.LoadBalancerIngress{IP: "203.0.113.7"}), false), status.StatusOK},
		{"a load balancer with a loopback address fails", gatewayServiceCheck(lb(corev1.LoadBalancerIngress{IP: "127.0.0.1"}), false), status.StatusFailed},
		{"the gateway address replaces a pending load balancer's", gatewayServiceCheck(lb(), true), status.StatusOK},
		{"a node port passes", gatewayServiceCheck(nodePort, false), status.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.check.Status != tt.want {
				t.Errorf("got %s %q, want %s", tt.check.Status, tt.check.Message, tt.want)
			}
		})
	}
}

// checkNamed returns the check called name, or nil.
func checkNamed(checks []status.Check, name string) *status.Check {
	for i := range checks {
		if checks[i].Name == name {
			return &checks[i]
		}
	}
	return nil
}
