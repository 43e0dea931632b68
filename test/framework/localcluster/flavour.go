package localcluster

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
)

// Flavour is the Kubernetes distribution a local cluster imitates: what
// users' clusters differ by, as far as the product can tell.
type Flavour string

const (
	// FlavourKubeadm is the default: kubeadm's and kind's defaults, an
	// etcd datastore, an API server on a port of its own.
	FlavourKubeadm Flavour = ""
	// FlavourK3s imitates a one-server k3s install with its defaults: the
	// datastore is kine over SQLite; pods in 10.42.0.0/16, Services in
	// 10.43.0.0/16, DNS at 10.43.0.10; the server node's labels,
	// annotations and providerID; the kubeconfig says
	// https://127.0.0.1:6443, and the API server answers on the node's
	// address at 6443 too. One per machine: port 6443 is the host's.
	FlavourK3s Flavour = "k3s"
)

// ParseFlavour reads a flavour's name: kubeadm (or empty) or k3s.
func ParseFlavour(s string) (Flavour, error) {
	switch s {
	case "", "kubeadm":
		return FlavourKubeadm, nil
	case "k3s":
		return FlavourK3s, nil
	}
	return "", fmt.Errorf("unknown flavour %q: want kubeadm or k3s", s)
}

func (f Flavour) String() string {
	if f == FlavourKubeadm {
		return "kubeadm"
	}
	return string(f)
}

// The k3s defaults.
const (
	K3sPodCIDR      = "10.42.0.0/16"
	K3sServiceCIDR  = "10.43.0.0/16"
	K3sDNSServiceIP = "10.43.0.10"
	// K3sAPIServerPort is where a k3s server's API server listens, on
	// every address.
	K3sAPIServerPort = 6443
)

// flavourSpec are the addresses of a flavour's clusters.
type flavourSpec struct {
	podCIDR, fakePodStart, serviceCIDR, kubernetesServiceIP, dnsServiceIP string
	// nodePodCIDR formats real node i's pod range.
	nodePodCIDR string
}

func (f Flavour) spec() flavourSpec {
	if f == FlavourK3s {
		return flavourSpec{podCIDR: K3sPodCIDR, fakePodStart: "10.42.128.1/17", serviceCIDR: K3sServiceCIDR,
			kubernetesServiceIP: "10.43.0.1", dnsServiceIP: K3sDNSServiceIP, nodePodCIDR: "10.42.%d.0/24"}
	}
	return flavourSpec{podCIDR: PodCIDR, fakePodStart: fakePodStart, serviceCIDR: ServiceCIDR,
		kubernetesServiceIP: "10.0.0.1", dnsServiceIP: DNSServiceIP, nodePodCIDR: "10.244.%d.0/24"}
}

// PodCIDR is the cluster's pod range.
func (c *Cluster) PodCIDR() string { return c.Flavour.spec().podCIDR }

// ServiceCIDR is the cluster's Service range.
func (c *Cluster) ServiceCIDR() string { return c.Flavour.spec().serviceCIDR }

// DNSServiceIP is the address of the cluster's Service kube-system/kube-dns.
func (c *Cluster) DNSServiceIP() string { return c.Flavour.spec().dnsServiceIP }

// flavourFile records the flavour of cluster name, so that Env.Open finds
// it again.
func (e *Env) flavourFile(name string) string { return filepath.Join(e.Dir, name+".flavour") }

func (e *Env) saveFlavour(name string, f Flavour) error {
	if f == FlavourKubeadm {
		return nil
	}
	return os.WriteFile(e.flavourFile(name), []byte(f), 0o600)
}

func (e *Env) loadFlavour(name string) Flavour {
	b, err := os.ReadFile(e.flavourFile(name))
	if err != nil {
		return FlavourKubeadm
	}
	f, _ := ParseFlavour(strings.TrimSpace(string(b)))
	return f
}

// checkK3sPort fails when the host's port 6443 is taken: by another
// k3s-flavoured cluster, or anything else. A retry would not help.
func checkK3sPort() error {
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", K3sAPIServerPort))
	if err != nil {
		return fmt.Errorf("port %d is in use (%w): there is one k3s-flavoured cluster per machine, as its kubeconfig says https://127.0.0.1:%d as k3s's does; delete the other with hack/local-clusters down NAME",
			K3sAPIServerPort, err, K3sAPIServerPort)
	}
	return l.Close()
}

// errNotRetried marks a cluster creation error that another attempt would
// meet again.
var errNotRetried = errors.New("not retried")

// k3sNodeMetadata is the patch that gives real node n what a k3s server
// gives its own node: the server's role labels, the embedded cloud
// controller's instance type and providerID, the agent's and flannel's
// annotations, and ServiceLB's opt-in label (so that its pods stay off
// kwok's fake nodes).
func (n *RealNode) k3sNodeMetadata() ([]byte, error) {
	args, env := `["server"]`, `{}`
	// As k3s's nodeconfig computes its node-config-hash.
	sum := sha256.Sum256([]byte(args + env))
	hash := strings.ToUpper(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:]))
	mac, err := n.macAddress()
	if err != nil {
		return nil, err
	}
	backend, err := json.Marshal(map[string]any{"VNI": 1, "VtepMAC": mac})
	if err != nil {
		return nil, err
	}
	patch := map[string]any{
		"metadata": map[string]any{
			"labels": map[string]string{
				"node-role.kubernetes.io/control-plane": "true",
				"node-role.kubernetes.io/master":        "true",
				"node.kubernetes.io/instance-type":      "k3s",
				"beta.kubernetes.io/instance-type":      "k3s",
				"svccontroller.k3s.cattle.io/enablelb":  "true",
			},
			"annotations": map[string]string{
				"k3s.io/hostname":                              n.Name,
				"k3s.io/internal-ip":                           n.IP,
				"k3s.io/node-args":                             args,
				"k3s.io/node-env":                              env,
				"k3s.io/node-config-hash":                      hash,
				"flannel.alpha.coreos.com/backend-type":        "vxlan",
				"flannel.alpha.coreos.com/backend-data":        string(backend),
				"flannel.alpha.coreos.com/kube-subnet-manager": "true",
				"flannel.alpha.coreos.com/public-ip":           n.IP,
				"alpha.kubernetes.io/provided-node-ip":         n.IP,
			},
		},
		"spec": map[string]any{"providerID": "k3s://" + n.Name},
	}
	return json.Marshal(patch)
}

// applyK3sMetadata writes k3sNodeMetadata on the node.
func (n *RealNode) applyK3sMetadata(ctx context.Context, c *Cluster) error {
	patch, err := n.k3sNodeMetadata()
	if err != nil {
		return err
	}
	if _, err := c.Kube.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("labelling node %s as a k3s server's: %w", n.Name, err)
	}
	return nil
}

// macAddress is the MAC address of the node's eth0.
func (n *RealNode) macAddress() (string, error) {
	out, err := machine.Run(context.Background(), "ip", "-n", n.NetNS, "-j", "link", "show", "eth0")
	if err != nil {
		return "", err
	}
	var links []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		return "", fmt.Errorf("reading the MAC address of node %s: %v (%s)", n.Name, err, out)
	}
	return links[0].Address, nil
}
