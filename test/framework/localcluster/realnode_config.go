package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
)

// writeConfig writes the configuration of containerd, CNI, the kubelet and
// kube-proxy. Every path is inside the node directory, so nothing of one
// node is shared with another or with the host.
func (n *RealNode) writeConfig(c *Cluster) error {
	pki := filepath.Join(c.Dir, "pki")
	server, err := c.nodeAPIServerURL()
	if err != nil {
		return err
	}
	// The kubelet authenticates as the node (Node authorizer); kube-proxy as admin.
	cert, key, err := signClientCert(pki, "system:node:"+n.Name, []string{"system:nodes"}, []net.IP{net.ParseIP(n.IP)})
	if err != nil {
		return err
	}
	// A node confined to some CPUs (ClusterOptions.CPUs) has a cgroup
	// root with those CPUs only, and reserves the others for the system
	// with the CPU manager's static policy, strictly: its containers get
	// its CPUs only. (With the none policy the kubelet gives its pods'
	// cgroup every host CPU, which the root refuses.)
	confined := ""
	if c.CPUs != "" {
		others, err := machine.OtherCPUs(c.CPUs)
		if err != nil {
			return err
		}
		if others != "" {
			confined = fmt.Sprintf("cpuManagerPolicy: static\ncpuManagerPolicyOptions: {strict-cpu-reservation: \"true\"}\nreservedSystemCPUs: %q\n", others)
		}
	}
	files := map[string]string{
		"pki/node.crt": string(cert),
		"pki/node.key": string(key),
		"containerd/config.toml": fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # The VM lacks CAP_SYS_RESOURCE: without this every sandbox fails.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
`, n.path("containerd", "root"), n.path("containerd", "state"), n.ContainerdAddress, n.ContainerdAddress+".ttrpc",
			PauseImage, n.path("cni", "net.d")),
		"cni/net.d/10-offload.conflist": fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, n.NetNS, n.path("cni", "ipam"), n.PodCIDR),
		"kubelet/kubeconfig":    kubeconfig(server, filepath.Join(pki, "ca.crt"), n.path("pki", "node.crt"), n.path("pki", "node.key")),
		"kube-proxy.kubeconfig": kubeconfig(server, filepath.Join(pki, "ca.crt"), filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key")),
		"kubelet/config.yaml": fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: 10250
readOnlyPort: 0
cgroupDriver: cgroupfs
cgroupRoot: /%s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization: {mode: Webhook}
# CoreDNS (coredns.go) answers behind Service kube-system/kube-dns.
clusterDNS: [%s]
clusterDomain: %s
# Imported images have no registry to come back from: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "0%%", imagefs.available: "0%%", nodefs.inodesFree: "0%%"}
serializeImagePulls: false
protectKernelDefaults: false
maxPods: 110
%s%s`, n.IP, n.CgroupRoot, n.ContainerdAddress, n.path("pod-logs"), filepath.Join(pki, "ca.crt"), c.DNSServiceIP(), ClusterDomain, unsafeSysctls(c.Flavour), confined),
		"kube-proxy.yaml": fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
mode: iptables
hostnameOverride: %s
clusterCIDR: %s
iptables: {masqueradeAll: true}
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
`, n.path("kube-proxy.kubeconfig"), n.Name, n.PodCIDR),
	}
	for name, content := range files {
		if err := os.WriteFile(n.path(name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func kubeconfig(server, ca, cert, key string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: %q, certificate-authority: %q}
users:
- name: local
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: local
  context: {cluster: local, user: local}
current-context: local
`, server, ca, cert, key)
}

// drain keeps new pods off the node and deletes the pods on it, then waits
// until containerd runs no more tasks, so that the kubelet tears down every
// sandbox (and its network namespace) itself.
func (n *RealNode) drain(ctx context.Context, c *Cluster) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := c.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
		return nil // not registered: nothing runs there
	}
	// NoExecute, not NoSchedule: DaemonSets that tolerate every NoSchedule
	// taint (node agents such as the network fabric) would put their pods
	// back at once, and the node would never be empty. Retried on conflict:
	// the kubelet writes the node's status meanwhile.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := c.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "offload.io/teardown", Effect: corev1.TaintEffectNoExecute})
		_, err = c.Kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("tainting node %s for teardown: %w", n.Name, err)
	}
	pods, err := c.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String()})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		_ = c.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
	return machine.WaitFor(ctx, time.Minute, func() bool {
		out, err := machine.Run(ctx, "ctr", "--address", n.ContainerdAddress, "-n", "k8s.io", "tasks", "ls", "-q")
		return err != nil || len(out) == 0
	})
}

// unsafeSysctls is the kubelet setting that lets ServiceLB's pods forward,
// as a k3s server's kubelet has it.
func unsafeSysctls(f Flavour) string {
	if f != FlavourK3s {
		return ""
	}
	return "allowedUnsafeSysctls: [net.ipv4.ip_forward, net.ipv6.conf.all.forwarding]\n"
}
