package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubectl-offload/kubectl-offload/test/framework/images"
	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
)

// RealNodeLabel marks the real node (kubelet + containerd) of a cluster.
const RealNodeLabel = "offload.io/test-node"

// RealNodeLabelValue is the value of RealNodeLabel on real nodes.
const RealNodeLabelValue = "real"

// PauseImage is the sandbox image every real node is configured with.
const PauseImage = "registry.local/offload/pause:test"

// RealNode is a kubelet, kube-proxy and containerd running in a network
// namespace made for them, registered in a local cluster.
type RealNode struct {
	// Name is the node name.
	Name string `json:"name"`
	// IP is the node's InternalIP, inside its network namespace.
	IP string `json:"ip"`
	// HostIP is the host end of the node's veth; the API server advertises it.
	HostIP string `json:"hostIP"`
	// PodCIDR is the range pods of this node get their IPs from.
	PodCIDR string `json:"podCIDR"`
	// NetNS is the name of the node's network namespace (ip netns).
	NetNS string `json:"netns"`
	// Dir holds the node's configuration, state and logs.
	Dir string `json:"dir"`
	// ContainerdAddress is the node containerd's socket.
	ContainerdAddress string `json:"containerdAddress"`
	// CgroupRoot is the cgroup the node's pods live under.
	CgroupRoot string `json:"cgroupRoot"`
	// PIDs are the node's processes.
	PIDs map[string]int `json:"pids"`
	// Bridge is the host bridge of the cluster's nodes when it has several
	// (nodeLAN), recorded on the first node, which removes it last.
	Bridge string `json:"bridge,omitempty"`
}

// nodeLAN puts the real nodes of one cluster on one subnet behind a host
// bridge, as kind's docker network and a kubeadm cluster's LAN do: nodes
// reach each other's addresses on link, which the fabric's routes through
// another node need. The first node creates the bridge.
type nodeLAN struct {
	bridge  string
	subnet  int
	members int
}

// nodeNetwork creates the network namespace and veth for a node. Index i
// gives the subnet 10.99.i.0/24 (the node is .1 inside, the host .254) and
// the pod range podCIDR formatted with i (10.244.i.0/24). With lan, the node joins the LAN's bridge
// and subnet instead: its address is the next in the first node's subnet.
func nodeNetwork(ctx context.Context, dir string, lan *nodeLAN, podCIDR string) (*RealNode, error) {
	if err := removeAbandonedNodes(ctx, machine.AbandonedAfter); err != nil {
		return nil, err
	}
	if err := machine.AcquireHostState(); err != nil {
		return nil, err
	}
	for i := 1; i <= maxRealNodes; i++ {
		ns := fmt.Sprintf("offload-%d", i)
		// ip netns add fails when the name exists, so concurrent clusters
		// (in this or another process) never share a namespace.
		if _, err := machine.Run(ctx, "ip", "netns", "add", ns); err != nil {
			continue
		}
		// Rules a crashed run left for a namespace of this name go.
		if err := removeIsolation(ns); err != nil {
			_, _ = machine.Run(context.Background(), "ip", "netns", "delete", ns)
			return nil, errors.Join(err, machine.ReleaseHostState())
		}
		n := &RealNode{
			IP:         fmt.Sprintf("10.99.%d.1", i),
			HostIP:     fmt.Sprintf("10.99.%d.254", i),
			PodCIDR:    fmt.Sprintf(podCIDR, i),
			NetNS:      ns,
			Dir:        dir,
			CgroupRoot: ns,
			PIDs:       map[string]int{},
		}
		host, peer := fmt.Sprintf("ovh%d", i), fmt.Sprintf("ovn%d", i)
		link := [][]string{{"ip", "addr", "add", n.HostIP + "/24", "dev", host}}
		via := host
		if lan != nil {
			if lan.bridge == "" {
				lan.bridge, lan.subnet = fmt.Sprintf("ovb%d", i), i
				n.Bridge = lan.bridge
				link = [][]string{
					{"ip", "link", "add", lan.bridge, "type", "bridge"},
					{"ip", "addr", "add", n.HostIP + "/24", "dev", lan.bridge},
					{"ip", "link", "set", lan.bridge, "up"},
				}
			} else {
				link = nil
			}
			lan.members++
			n.IP = fmt.Sprintf("10.99.%d.%d", lan.subnet, lan.members)
			n.HostIP = fmt.Sprintf("10.99.%d.254", lan.subnet)
			link = append(link, []string{"ip", "link", "set", host, "master", lan.bridge})
			via = lan.bridge
		}
		steps := [][]string{
			{"ip", "link", "add", host, "type", "veth", "peer", "name", peer},
			{"ip", "link", "set", peer, "netns", ns},
		}
		steps = append(steps, link...)
		steps = append(steps, [][]string{
			{"ip", "link", "set", host, "up"},
			{"ip", "-n", ns, "link", "set", "lo", "up"},
			{"ip", "-n", ns, "link", "set", peer, "name", "eth0"},
			{"ip", "-n", ns, "addr", "add", n.IP + "/24", "dev", "eth0"},
			{"ip", "-n", ns, "link", "set", "eth0", "up"},
			{"ip", "-n", ns, "route", "add", "default", "via", n.HostIP},
			// The API server, on the host, reaches pods (webhooks) through
			// the node; the route goes with the veth at teardown.
			{"ip", "route", "add", n.PodCIDR, "via", n.IP, "dev", via},
			{"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		}...)
		for _, s := range steps {
			if _, err := machine.Run(ctx, s[0], s[1:]...); err != nil {
				_, _ = machine.Run(context.Background(), "ip", "netns", "delete", ns)
				_, _ = machine.Run(context.Background(), "ip", "link", "delete", host)
				if n.Bridge != "" {
					_, _ = machine.Run(context.Background(), "ip", "link", "delete", n.Bridge)
				}
				return nil, errors.Join(fmt.Errorf("setting up the node network: %w", err), machine.ReleaseHostState())
			}
		}
		return n, nil
	}
	return nil, errors.Join(fmt.Errorf("no free node network: %d namespaces offload-N exist (run make clusters-down)", maxRealNodes), machine.ReleaseHostState())
}

// apiServerPatches are the kube-apiserver settings a real node needs: listen
// where the node reaches it, advertise that address, and authenticate to
// kubelets (for logs and exec) with the admin certificate (system:masters).
func (n *RealNode) apiServerPatches(clusterDir string) [][2]string {
	return [][2]string{
		{"bind-address", "0.0.0.0"},
		{"advertise-address", n.HostIP},
		{"kubelet-client-certificate", filepath.Join(clusterDir, "pki", "admin.crt")},
		{"kubelet-client-key", filepath.Join(clusterDir, "pki", "admin.key")},
		{"kubelet-preferred-address-types", "InternalIP,Hostname"},
		// Webhooks are called at their endpoints' pod IPs: the host has no
		// kube-proxy rules for ClusterIPs, which live in the node.
		{"enable-aggregator-routing", "true"},
	}
}

func (n *RealNode) path(p ...string) string { return filepath.Join(append([]string{n.Dir}, p...)...) }

func (n *RealNode) save() error {
	b, err := json.MarshalIndent(n, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(n.path("node.json"), b, 0o600)
}

func loadRealNode(dir string) (*RealNode, error) {
	b, err := os.ReadFile(filepath.Join(dir, "node.json"))
	if err != nil {
		return nil, err
	}
	n := &RealNode{}
	return n, json.Unmarshal(b, n)
}

// start writes the node's configuration and starts containerd, imports the
// images, then starts the kubelet and kube-proxy.
func (n *RealNode) start(ctx context.Context, c *Cluster, bin string, archives []string) error {
	for _, d := range []string{"containerd", "cni/net.d", "cni/ipam", "kubelet", "pki", "logs", "pod-logs"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	if err := machine.CreateCgroupRoot(n.CgroupRoot); err != nil {
		return err
	}
	if c.CPUs != "" {
		// The pods' cgroups, made right under the root, copy its CPUs.
		if _, err := machine.MakeCPUSet(n.CgroupRoot, c.CPUs); err != nil {
			return err
		}
	}
	n.ContainerdAddress = n.path("containerd.sock")
	if err := n.save(); err != nil {
		return err
	}
	if err := n.writeConfig(c); err != nil {
		return err
	}
	if err := n.spawn("containerd", "containerd", "--config", n.path("containerd", "config.toml")); err != nil {
		return err
	}
	if err := machine.WaitFor(ctx, 30*time.Second, func() bool {
		_, err := machine.Run(ctx, "ctr", "--address", n.ContainerdAddress, "version")
		return err == nil
	}); err != nil {
		return fmt.Errorf("containerd did not start (log %s): %w", n.path("logs", "containerd.log"), err)
	}
	if err := images.ImportImages(ctx, n.ContainerdAddress, archives...); err != nil {
		return err
	}
	if err := n.spawn("kubelet", filepath.Join(bin, "kubelet"),
		"--config", n.path("kubelet", "config.yaml"),
		"--kubeconfig", n.path("kubelet", "kubeconfig"),
		"--root-dir", n.path("kubelet", "root"),
		"--cert-dir", n.path("kubelet", "pki"),
		"--hostname-override", n.Name,
		"--node-ip", n.IP,
		"--node-labels", RealNodeLabel+"="+RealNodeLabelValue,
		"--v", "2"); err != nil {
		return err
	}
	if err := n.spawn("kube-proxy", filepath.Join(bin, "kube-proxy"), "--config", n.path("kube-proxy.yaml"), "--v", "2"); err != nil {
		return err
	}
	if c.CPUs != "" {
		// containerd's shims, forked later, are born in its cgroup.
		dir, err := machine.MakeCPUSet(cpuSetName(c.Name), c.CPUs)
		if err != nil {
			return err
		}
		if err := machine.MoveToCPUSet(dir, n.PIDs["containerd"], n.PIDs["kubelet"], n.PIDs["kube-proxy"]); err != nil {
			return fmt.Errorf("confining node %s to CPUs %s: %w", n.Name, c.CPUs, err)
		}
	}
	if err := c.WaitNodeReady(ctx, n.Name, 2*time.Minute); err != nil {
		return fmt.Errorf("%w (logs in %s)", err, n.path("logs"))
	}
	return n.recordPodCIDR(ctx, c)
}

// recordPodCIDR sets the node's spec.podCIDR to the range its pods get,
// as kube-controller-manager's node IPAM does in kind and kubeadm
// clusters, so that what reads the Node (install's detection) sees it.
func (n *RealNode) recordPodCIDR(ctx context.Context, c *Cluster) error {
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, n.PodCIDR, n.PodCIDR)
	node, err := c.Kube.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("recording pod CIDR %s on node %s: %w", n.PodCIDR, n.Name, err)
	}
	if node.Spec.PodCIDR != n.PodCIDR {
		return fmt.Errorf("node %s keeps pod CIDR %s, not %s", n.Name, node.Spec.PodCIDR, n.PodCIDR)
	}
	return nil
}

// spawn starts a long-running process inside the node's network namespace.
// nsenter --net is used, not ip netns exec, which would also give the
// process a private mount namespace and hide the kubelet's volume mounts
// from runc.
func (n *RealNode) spawn(name, binary string, args ...string) error {
	logf, err := os.OpenFile(n.path("logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + n.NetNS, "--", binary}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	// Its own process group: a Ctrl-C in the terminal that started it does
	// not kill the node; teardown does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = cmd.Wait() }()
	n.PIDs[name] = cmd.Process.Pid
	return n.save()
}

// removeAbandonedNodes removes what a killed run left of its real nodes:
// each node namespace older than age with no process in it (see
// machine.NamespaceAbandoned), its host interfaces with their routes, its
// isolation rules and its cgroups. The namespaces of its pods go when the
// last node stops (machine.ReleaseHostState), which such a leftover would
// otherwise prevent for every later run.
func removeAbandonedNodes(ctx context.Context, age time.Duration) error {
	entries, _ := os.ReadDir("/run/netns")
	var errs []error
	for _, e := range entries {
		ns := e.Name()
		i, ok := strings.CutPrefix(ns, "offload-")
		if !ok || !machine.NamespaceAbandoned(ns, age) {
			continue
		}
		errs = append(errs, removeNodeHostParts(ctx, ns, ns, ""))
		// A LAN's bridge is named after its first node; it goes when no
		// other node's port is on it any more.
		if ports, err := machine.Run(ctx, "ip", "-o", "link", "show", "master", "ovb"+i); err == nil && strings.TrimSpace(ports) == "" {
			errs = append(errs, removeNodeHostParts(ctx, "", "", "ovb"+i))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing the nodes a killed run left: %w", err)
	}
	return nil
}

// removeNodeHostParts removes what a node put on the host beside its
// processes and files: what is left in its cgroups and the cgroups, the
// host end of its veth with the routes through it, its network namespace,
// its isolation rules and bridge, when not empty.
func removeNodeHostParts(ctx context.Context, ns, cgroupRoot, bridge string) error {
	var errs []error
	if cgroupRoot != "" {
		errs = append(errs, machine.KillCgroupProcesses(cgroupRoot, 5*time.Second), machine.RemoveCgroupRoot(cgroupRoot))
	}
	if ns != "" {
		// The host end of the veth goes first and explicitly: the kernel
		// destroys a deleted namespace's interfaces later, in the
		// background, so the host end would outlive "ip netns delete".
		host := "ovh" + strings.TrimPrefix(ns, "offload-")
		if _, err := machine.Run(ctx, "ip", "link", "delete", host); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
			errs = append(errs, err)
		}
		if _, err := machine.Run(ctx, "ip", "netns", "delete", ns); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
		errs = append(errs, removeIsolation(ns))
	}
	if bridge != "" {
		if _, err := machine.Run(ctx, "ip", "link", "delete", bridge); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// nodeAPIServerURL is the API server as real nodes reach it: at the host end
// of the cluster's first real node, which the API server advertises and
// its certificate names; other nodes reach it through the host's routes.
func (c *Cluster) nodeAPIServerURL() (string, error) {
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		return "", err
	}
	return "https://" + net.JoinHostPort(c.Node.HostIP, u.Port()), nil
}

// stop removes everything the node put on the host: pods, processes,
// mounts, cgroups, the network namespace with its interfaces and iptables
// rules, and restores the host settings.
func (n *RealNode) stop(ctx context.Context, c *Cluster) error {
	var errs []error
	if c != nil && c.Kube != nil {
		errs = append(errs, n.drain(ctx, c))
	}
	// kubelet and kube-proxy first, then containerd and the shims it left.
	for _, name := range []string{"kubelet", "kube-proxy"} {
		if pid, ok := n.PIDs[name]; ok {
			errs = append(errs, machine.StopProcesses([]int{pid}, 10*time.Second))
		}
	}
	if _, ok := n.PIDs["containerd"]; ok {
		errs = append(errs, n.killContainers(ctx))
		errs = append(errs, machine.StopProcesses([]int{n.PIDs["containerd"]}, 10*time.Second))
	}
	// A node that failed before its start has no containerd address, and
	// every process's command line contains the empty string: matching
	// on it would stop every process of the machine.
	if n.ContainerdAddress != "" {
		errs = append(errs, machine.StopProcesses(machine.ProcessesMatching(n.ContainerdAddress), 5*time.Second))
		errs = append(errs, machine.StopProcesses(machine.ProcessesMatching(n.Dir), 5*time.Second))
	}
	machine.UnmountUnder(n.Dir)
	// The other nodes' ports left the bridge with their namespaces.
	errs = append(errs, removeNodeHostParts(ctx, n.NetNS, n.CgroupRoot, n.Bridge))
	removeContainerLogLinks(n.path("pod-logs"))
	if err := os.RemoveAll(n.Dir); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, machine.ReleaseHostState())
	return errors.Join(errs...)
}

// killContainers stops every pod sandbox and container left in containerd.
func (n *RealNode) killContainers(ctx context.Context) error {
	out, err := machine.Run(ctx, "ctr", "--address", n.ContainerdAddress, "-n", "k8s.io", "tasks", "ls", "-q")
	if err != nil {
		return nil // containerd is already gone
	}
	for _, id := range strings.Fields(out) {
		_, _ = machine.Run(ctx, "ctr", "--address", n.ContainerdAddress, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id)
	}
	return nil
}

// removeContainerLogLinks removes the /var/log/containers links into podLogs.
func removeContainerLogLinks(podLogs string) {
	entries, _ := os.ReadDir("/var/log/containers")
	for _, e := range entries {
		p := filepath.Join("/var/log/containers", e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, podLogs) {
			_ = os.Remove(p)
		}
	}
}

// RSS returns the resident memory of the node's processes (containerd,
// kubelet, kube-proxy and the container shims), in bytes.
func (n *RealNode) RSS() uint64 {
	pids := map[int]bool{}
	for _, pid := range n.PIDs {
		pids[pid] = true
	}
	for _, pid := range machine.ProcessesMatching(n.ContainerdAddress) {
		pids[pid] = true
	}
	var total uint64
	for pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 1 {
			var pages uint64
			_, _ = fmt.Sscan(f[1], &pages)
			total += pages * uint64(os.Getpagesize())
		}
	}
	return total
}
