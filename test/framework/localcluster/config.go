package localcluster

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/kubectl-offload/kubectl-offload/test/framework/images"
)

// kwokctlConfig renders the KwokctlConfiguration for one cluster: every
// binary local (so kwokctl downloads nothing), pinned ports, CSR signing in
// kube-controller-manager, and kwok managing only nodes annotated as fake.
// kubeBin holds the Kubernetes commands of kubeVersion, bin the other tools.
// serviceLB is the ServiceLB binary of a k3s-flavoured cluster (ServiceLBImage).
func kwokctlConfig(bin, kubeBin, cacheDir, clusterDir, kubeVersion string, p clusterPorts, o ClusterOptions, node *RealNode, serviceLB string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  bindAddress: 127.0.0.1
  kubeVersion: %s
  kubeBinaryPrefix: %s
  kubectlBinary: %s
  kwokControllerBinary: %s
  etcdBinary: %s
  cacheDir: %s
  kubeApiserverPort: %d
  etcdPort: %d
  etcdPeerPort: %d
  kubeControllerManagerPort: %d
  kubeSchedulerPort: %d
  kwokControllerPort: %d
  disableQPSLimits: %t
  kubeApiserverCertSANs: %s
componentsPatches:
- name: kwok-controller
  extraArgs:
  - key: manage-all-nodes
    value: "false"
  - key: manage-nodes-with-annotation-selector
    value: %s=%s
  - key: cidr
    value: %s
`, kubeVersion, kubeBin, filepath.Join(kubeBin, "kubectl"), filepath.Join(bin, "kwok"), filepath.Join(bin, "etcd"), cacheDir,
		p.apiserver, p.etcd, p.etcdPeer, p.controllerManager, p.scheduler, p.kwok, o.DisableQPSLimits, certSANs(node, o.Flavour),
		FakeNodeAnnotation, FakeNodeAnnotationValue, o.Flavour.spec().fakePodStart)
	// The CSR signer uses the cluster CA that kwokctl generates in the
	// cluster's pki directory. kwokctl's binary runtime restarts no
	// process, as a kubelet or systemd would: the one controller-manager
	// and scheduler of a cluster run without leader election, which would
	// make them exit for good when a test freezes the API server.
	fmt.Fprintf(&b, `- name: kube-controller-manager
  extraArgs:
  - key: cluster-signing-cert-file
    value: %s
  - key: cluster-signing-key-file
    value: %s
  - key: leader-elect
    value: "false"
- name: kube-scheduler
  extraArgs:
  - key: leader-elect
    value: "false"
`, filepath.Join(clusterDir, "pki", "ca.crt"), filepath.Join(clusterDir, "pki", "ca.key"))
	// The API server advertises 127.0.0.1, or, for a real node, the address
	// the node reaches it at, which its certificate must name too. From
	// v1.37 it refuses to put a loopback address in the kubernetes
	// Service's endpoints: without a real node, no pod needs them, and the
	// Service has none (as behind a proxy the control plane cannot name).
	apiserverArgs := [][2]string{{"advertise-address", "127.0.0.1"}, {"endpoint-reconciler-type", "none"}}
	if node != nil {
		apiserverArgs = node.apiServerPatches(clusterDir)
		if o.MetricsServer {
			apiserverArgs = append(apiserverArgs, frontProxyPatches(clusterDir)...)
		}
	}
	if o.Flavour == FlavourK3s {
		// k3s's API server stores in kine, and has k3s's Service range.
		apiserverArgs = append(apiserverArgs, [2]string{"etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", p.kine)},
			[2]string{"service-cluster-ip-range", o.Flavour.spec().serviceCIDR})
	}
	apiserverArgs = append(apiserverArgs, o.APIServerArgs...)
	b.WriteString("- name: kube-apiserver\n  extraArgs:\n")
	for _, a := range apiserverArgs {
		// kwokctl replaces only flags it sets itself (override), and
		// appends the others.
		fmt.Fprintf(&b, "  - key: %s\n    value: %q\n    override: %t\n", a[0], a[1], a[0] == "bind-address" || a[0] == "etcd-servers")
	}
	if o.Flavour == FlavourK3s {
		// kine over SQLite, as a k3s server runs it: kwokctl cannot do
		// without its etcd, which stays up, unused. kine's default
		// datastore is db/state.db under its working directory, as
		// under k3s's server directory. ServiceLB's controller runs
		// beside the API server, as inside a k3s server.
		fmt.Fprintf(&b, `components:
- name: kine
  binary: %s
  workDir: %s
  args:
  - --listen-address=127.0.0.1:%d
  - --metrics-bind-address=0
- name: servicelb
  binary: %s
  workDir: %s
  links: [kube-apiserver]
  args:
  - controller
  - --kubeconfig=%s
  - --image=%s
`, filepath.Join(bin, "kine"), clusterDir, p.kine, serviceLB, clusterDir, filepath.Join(clusterDir, "kubeconfig.yaml"), images.ServiceLBImageRef)
	}
	return b.String()
}

// Addresses of local clusters. Every cluster declares PodCIDR, as kind and
// kubeadm do by default, so two clusters' ranges overlap as users' do.
// Within it, real node i gets 10.244.i.0/24 (i < 128) and kwok's fake pods
// count up from 10.244.128.1; both stay clear of ServiceCIDR, which kwok's
// default (10.0.0.1/24, growing past its end) did not.
const (
	PodCIDR      = "10.244.0.0/16"
	FakePodCIDR  = "10.244.128.0/17"
	ServiceCIDR  = "10.0.0.0/24"
	fakePodStart = "10.244.128.1/17"
	// maxRealNodes bounds the real-node index, so node pod ranges stay
	// below FakePodCIDR.
	maxRealNodes = 127
)

// certSANs are the extra API server certificate names a real node needs: the
// address it reaches the API server at, and the kubernetes Service IP pods
// use; on k3s also the node's own address, where the API server answers too.
func certSANs(node *RealNode, f Flavour) string {
	if node == nil {
		return "[]"
	}
	if f == FlavourK3s {
		return fmt.Sprintf("[%q, %q, %q]", node.HostIP, node.IP, f.spec().kubernetesServiceIP)
	}
	return fmt.Sprintf("[%q, %q]", node.HostIP, f.spec().kubernetesServiceIP)
}
