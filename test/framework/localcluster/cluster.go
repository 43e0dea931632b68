// Package localcluster runs real local Kubernetes control planes for tests,
// the demo and the benchmarks: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok, started by kwokctl as
// local processes, with kwok's fake nodes for capacity and, where pods must
// really run, real nodes (kubelet, containerd, kube-proxy, CoreDNS) in
// network namespaces of their own. A real node is part of its cluster's
// life (created, started, frozen and deleted with it), so both live here.
// It also injects faults (frozen or stopped control planes, partitions)
// and starts the peered pair the demo, the conformance runner, the e2e
// tests and the benchmark share (StartPeeredPair).
package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubectl-offload/kubectl-offload/test/framework/images"
	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

// ClusterOptions describe one local cluster.
type ClusterOptions struct {
	// Name is the cluster name, a DNS-1123 label unique within the Env.
	Name string
	// KubeVersion is the Kubernetes release of the cluster's control plane
	// and real nodes ("v1.34.4"); empty means the pinned KUBE_VERSION. Its
	// binaries are built once into .cache/bin/kubernetes-VERSION.
	KubeVersion string
	// FakeNodes is how many kwok fake nodes to create.
	FakeNodes int
	// NodeCapacity is the capacity of each fake node; zero fields take DefaultCapacity's.
	NodeCapacity Capacity
	// TaintFakeNodes gives the fake nodes FakeNodeTaint, so that only pods
	// that tolerate it run on them.
	TaintFakeNodes bool
	// DisableQPSLimits lifts the client rate limits of the control plane, for benchmarks.
	DisableQPSLimits bool
	// RealNode adds a real node (kubelet, kube-proxy and containerd in a
	// network namespace of its own) that really runs containers.
	RealNode bool
	// ExtraRealNodes adds that many more real nodes (it needs RealNode), so
	// that a test covers a pod on a node without some other pod.
	ExtraRealNodes int
	// Images are image archives to import into the real node; empty means TestImages.
	Images []string
	// Isolated makes the cluster as isolated from the others as a separate
	// machine: the host forwards to its real node's pods only what comes
	// from the cluster itself, while node addresses and API servers stay
	// reachable from everywhere. Without it the host routes every
	// cluster's pods to every other, so a network test would pass with no
	// fabric at all. Only a real node's pods are routable; it needs RealNode.
	Isolated bool
	// APIServerArgs are more kube-apiserver flags, name and value, such as
	// a shorter default-unreachable-toleration-seconds.
	APIServerArgs [][2]string
	// MetricsServer deploys metrics-server on the real node, which serves
	// the metrics API (kubectl top); it needs RealNode. WaitMetrics waits
	// for it.
	MetricsServer bool
	// Storage deploys Rancher's local-path provisioner on the real node
	// and makes its StorageClassName the default class: a claim gets a
	// directory of the host under its node's directory, removed with the
	// cluster. It needs RealNode. WaitStorage waits for it.
	Storage bool
	// Flavour is the distribution the cluster imitates: kubeadm-style (the
	// default) or k3s (FlavourK3s), which needs RealNode, has one real
	// node, and is alone of its flavour on the machine.
	Flavour Flavour
	// CPUs confines the cluster to those host CPUs ("0", "1-3"), as if
	// it had a machine of its own: its control plane and kwok, and its
	// real nodes' containerd, kubelet and kube-proxy, in cgroup
	// offload-cluster-NAME; its pods in each node's cgroup root, with the
	// CPU manager's static policy reserving the other CPUs strictly (the
	// nodes' allocatable CPU is theirs). Empty shares every CPU.
	CPUs string
}

// cpuSetName is the cgroup of cluster name's processes when it has CPUs.
func cpuSetName(name string) string { return "offload-cluster-" + name }

type clusterPorts struct {
	apiserver, etcd, etcdPeer, controllerManager, scheduler, kwok, kine int
}

// Env is a working directory holding any number of local clusters (kwokctl's
// KWOK_WORKDIR).
type Env struct {
	// Dir is the working directory; clusters live in Dir/clusters/<name>.
	Dir string
	bin string
}

// NewEnv returns an Env in dir, which is created if needed. It builds the
// tools first if they are not built yet.
func NewEnv(ctx context.Context, dir string) (*Env, error) {
	if err := tools.EnsureTools(ctx); err != nil {
		return nil, err
	}
	bin, err := tools.BinDir()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Env{Dir: dir, bin: bin}, nil
}

// Cluster is a running local control plane.
type Cluster struct {
	// Name is the cluster name.
	Name string
	// Dir holds the cluster's state, PKI, logs and PID files.
	Dir string
	// Kubeconfig is the path of an admin kubeconfig for the cluster.
	Kubeconfig string
	// Config is the admin client configuration.
	Config *rest.Config
	// Kube is an admin clientset.
	Kube kubernetes.Interface
	// Node is the real node, when the cluster has one.
	Node *RealNode
	// ExtraNodes are the real nodes after the first (ClusterOptions.ExtraRealNodes).
	ExtraNodes []*RealNode
	// CPUs are the CPUs the cluster is confined to; empty when it shares
	// every CPU (ClusterOptions.CPUs).
	CPUs string
	// Flavour is the distribution the cluster imitates.
	Flavour Flavour

	env *Env
}

// RealNodes returns the cluster's real nodes, the first one first; none
// when it has no real node.
func (c *Cluster) RealNodes() []*RealNode {
	if c.Node == nil {
		return nil
	}
	return append([]*RealNode{c.Node}, c.ExtraNodes...)
}

// kwokctl runs kwokctl with the Env's working directory and tools.
func (e *Env) kwokctl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(e.bin, "kwokctl"), args...)
	// kwokctl prefers the kubectl it finds first on PATH.
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+e.Dir, "PATH="+e.bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.Bytes(), fmt.Errorf("kwokctl %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.Bytes(), nil
}

func (e *Env) clusterDir(name string) string { return filepath.Join(e.Dir, "clusters", name) }

func (e *Env) nodeDir(name string) string { return filepath.Join(e.Dir, "nodes", name) }

// extraNodeDir is the directory of a cluster's real node number i (from 2),
// next to the first's: DIR.i, which no cluster name (a DNS label) can be.
func extraNodeDir(first string, i int) string { return fmt.Sprintf("%s.%d", first, i) }

// extraNodeDirs lists the directories of a cluster's extra real nodes.
func extraNodeDirs(first string) []string {
	dirs, _ := filepath.Glob(first + ".*")
	return dirs
}

// Create starts a cluster and waits until it serves requests, has its
// default ServiceAccount and its fake nodes are Ready.
func (e *Env) Create(ctx context.Context, o ClusterOptions) (*Cluster, error) {
	if o.Name == "" {
		return nil, errors.New("cluster name is required")
	}
	if o.Isolated && !o.RealNode {
		return nil, errors.New("an isolated cluster needs a real node: only its pods are routable")
	}
	if o.ExtraRealNodes > 0 && !o.RealNode {
		return nil, errors.New("extra real nodes need RealNode")
	}
	if o.Storage && !o.RealNode {
		return nil, errors.New("storage needs a real node, where its volumes live: set RealNode too")
	}
	if o.Flavour == FlavourK3s {
		if !o.RealNode || o.ExtraRealNodes > 0 {
			return nil, errors.New("a k3s-flavoured cluster has one real node, its server: it needs RealNode and no ExtraRealNodes")
		}
		if err := tools.EnsureTools(ctx, "kine"); err != nil {
			return nil, err
		}
	}
	versions, err := tools.Versions()
	if err != nil {
		return nil, err
	}
	kubeVersion := o.KubeVersion
	if kubeVersion == "" {
		kubeVersion = versions["KUBE_VERSION"]
	}
	kubeBin, err := tools.EnsureKube(ctx, kubeVersion)
	if err != nil {
		return nil, err
	}
	var lastErr error
	// A port picked as free can be taken by another process before the
	// component binds it; a second attempt with new ports covers that.
	for attempt := 0; attempt < 3; attempt++ {
		c, err := e.create(ctx, o, kubeVersion, kubeBin)
		if err == nil {
			return c, nil
		}
		lastErr = err
		_ = e.deleteByName(context.WithoutCancel(ctx), o.Name)
		if ctx.Err() != nil || errors.Is(err, errNotRetried) {
			break
		}
	}
	return nil, fmt.Errorf("creating cluster %q: %w", o.Name, lastErr)
}

func (e *Env) create(ctx context.Context, o ClusterOptions, kubeVersion, kubeBin string) (*Cluster, error) {
	p, err := netlab.FreePorts(7)
	if err != nil {
		return nil, err
	}
	cp := clusterPorts{apiserver: p[0], etcd: p[1], etcdPeer: p[2], controllerManager: p[3], scheduler: p[4], kwok: p[5], kine: p[6]}
	if o.Flavour == FlavourK3s {
		if err := checkK3sPort(); err != nil {
			return nil, fmt.Errorf("%w (%w)", err, errNotRetried)
		}
		cp.apiserver = K3sAPIServerPort
	}
	if err := e.saveFlavour(o.Name, o.Flavour); err != nil {
		return nil, err
	}
	dir := e.clusterDir(o.Name)
	var node *RealNode
	var extra, all []*RealNode
	if o.RealNode {
		var lan *nodeLAN
		if o.ExtraRealNodes > 0 {
			lan = &nodeLAN{}
		}
		for i := 0; i <= o.ExtraRealNodes; i++ {
			dir, name := e.nodeDir(o.Name), o.Name+"-real"
			if i > 0 {
				dir, name = extraNodeDir(e.nodeDir(o.Name), i+1), fmt.Sprintf("%s-real-%d", o.Name, i+1)
			}
			n, err := nodeNetwork(ctx, dir, lan, o.Flavour.spec().nodePodCIDR)
			if err != nil {
				return nil, err
			}
			n.Name = name
			if err := os.MkdirAll(n.Dir, 0o755); err != nil {
				return nil, err
			}
			if err := n.save(); err != nil {
				return nil, err
			}
			if i == 0 {
				node = n
			} else {
				extra = append(extra, n)
			}
		}
		// Nodes on one LAN route each other's pods directly, as kindnet
		// does: pod traffic between them never passes the host.
		all = append([]*RealNode{node}, extra...)
		for _, n := range all {
			for _, m := range all {
				if m == n {
					continue
				}
				if _, err := machine.Run(ctx, "ip", "-n", n.NetNS, "route", "add", m.PodCIDR, "via", m.IP); err != nil {
					return nil, fmt.Errorf("routing node %s's pods on node %s: %w", m.Name, n.Name, err)
				}
			}
		}
		if o.Isolated {
			bridge := ""
			if lan != nil {
				bridge = lan.bridge
			}
			for _, n := range all {
				iso, err := isolationOf(n, all, bridge)
				if err != nil {
					return nil, err
				}
				if err := iso.apply(); err != nil {
					return nil, err
				}
			}
		}
	}
	var serviceLBArchive, serviceLB string
	if o.Flavour == FlavourK3s {
		if serviceLBArchive, serviceLB, err = images.ServiceLBImage(ctx); err != nil {
			return nil, err
		}
	}
	cfgPath := filepath.Join(e.Dir, o.Name+".kwokctl.yaml")
	cfg := kwokctlConfig(e.bin, kubeBin, filepath.Join(e.Dir, "cache"), dir, kubeVersion, cp, o, node, serviceLB)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	// --kubeconfig points at a file of the Env, so the user's ~/.kube/config is never edited.
	if _, err := e.kwokctl(ctx, "create", "cluster", "--name", o.Name, "-c", cfgPath,
		"--kubeconfig", filepath.Join(e.Dir, "kubeconfig.merged"), "--wait", "0s"); err != nil {
		return nil, err
	}
	c, err := e.cluster(o.Name)
	if err != nil {
		return nil, err
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	if o.CPUs != "" {
		c.CPUs = o.CPUs
		if err := c.confineControlPlane(); err != nil {
			return nil, err
		}
	}
	if o.FakeNodes > 0 {
		var taints []corev1.Taint
		if o.TaintFakeNodes {
			taints = append(taints, FakeNodeTaint)
		}
		if err := c.AddFakeNodes(ctx, o.FakeNodes, o.NodeCapacity, taints...); err != nil {
			return nil, err
		}
	}
	if node != nil {
		archives := o.Images
		if len(archives) == 0 {
			test, err := images.TestImages(ctx)
			if err != nil {
				return nil, err
			}
			for _, a := range test {
				archives = append(archives, a)
			}
		}
		if o.MetricsServer {
			archive, err := MetricsServerImage(ctx)
			if err != nil {
				return nil, err
			}
			archives = append(archives, archive)
		}
		if o.Storage {
			storage, err := StorageImages(ctx)
			if err != nil {
				return nil, err
			}
			archives = append(archives, storage...)
		}
		if serviceLBArchive != "" {
			archives = append(archives, serviceLBArchive)
		}
		c.Node, c.ExtraNodes = node, extra
		for _, n := range all {
			if err := n.start(ctx, c, kubeBin, archives); err != nil {
				return nil, err
			}
		}
		if o.Flavour == FlavourK3s {
			if err := node.applyK3sMetadata(ctx, c); err != nil {
				return nil, err
			}
			if err := node.forwardAPIServer(K3sAPIServerPort); err != nil {
				return nil, err
			}
		}
		if err := c.deployCoreDNS(ctx); err != nil {
			return nil, err
		}
		if o.MetricsServer {
			if err := c.deployMetricsServer(ctx); err != nil {
				return nil, err
			}
		}
		if o.Storage {
			if err := c.deployStorage(ctx); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// cluster returns a Cluster with admin clients from the kubeconfig kwokctl wrote.
func (e *Env) cluster(name string) (*Cluster, error) {
	dir := e.clusterDir(name)
	c := &Cluster{Name: name, Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig.yaml"), Flavour: e.loadFlavour(name), env: e}
	var err error
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return nil, fmt.Errorf("reading kubeconfig of cluster %s: %w", name, err)
	}
	c.Config.QPS, c.Config.Burst = 100, 200
	if c.Kube, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	return c, nil
}

// waitReady polls until the API server is ready and the default
// ServiceAccount exists (pods are rejected before it does).
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		body, err := c.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil || string(body) != "ok" {
			last = fmt.Errorf("API server not ready: %v %s", err, body)
			return false, nil
		}
		if _, err := c.Kube.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			last = fmt.Errorf("default ServiceAccount: %w", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for cluster %s: %w (last: %v; logs in %s)", c.Name, err, last, filepath.Join(c.Dir, "logs"))
	}
	return nil
}

// Delete stops every process of the cluster, waits until they have exited
// and removes its state.
func (c *Cluster) Delete(ctx context.Context) error {
	return c.env.deleteByName(ctx, c.Name)
}

func (e *Env) deleteByName(ctx context.Context, name string) error {
	dir := e.clusterDir(name)
	pids := readPIDs(filepath.Join(dir, "pids"))
	var errs []error
	// The real nodes go first, while the API server can still drain them.
	for _, dir := range append(extraNodeDirs(e.nodeDir(name)), e.nodeDir(name)) {
		if node, err := loadRealNode(dir); err == nil {
			c, _ := e.cluster(name)
			errs = append(errs, node.stop(ctx, c))
		}
	}
	if _, err := os.Stat(dir); err == nil {
		if _, err := e.kwokctl(ctx, "delete", "cluster", "--name", name,
			"--kubeconfig", filepath.Join(e.Dir, "kubeconfig.merged")); err != nil {
			errs = append(errs, err)
		}
	}
	if err := machine.WaitExited(ctx, pids, 30*time.Second); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, os.RemoveAll(dir), removeIfExists(filepath.Join(e.Dir, name+".kwokctl.yaml")), removeIfExists(e.flavourFile(name)),
		machine.RemoveCPUSet(cpuSetName(name)))
	return errors.Join(errs...)
}

// PIDs returns the process IDs of the cluster's components.
func (c *Cluster) PIDs() map[string]int { return readPIDs(filepath.Join(c.Dir, "pids")) }

func readPIDs(dir string) map[string]int {
	out := map[string]int{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			out[strings.TrimSuffix(e.Name(), ".pid")] = pid
		}
	}
	return out
}

// RSS returns the resident memory of the cluster's processes, in bytes.
func (c *Cluster) RSS() (map[string]uint64, error) {
	out := map[string]uint64{}
	for name, pid := range c.PIDs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
		if err != nil {
			return nil, fmt.Errorf("reading memory of %s: %w", name, err)
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		pages, _ := strconv.ParseUint(f[1], 10, 64)
		out[name] = pages * uint64(os.Getpagesize())
	}
	return out, nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// Open returns the running cluster called name in the Env, or an error when
// it does not exist or does not answer.
func (e *Env) Open(ctx context.Context, name string) (*Cluster, error) {
	c, err := e.cluster(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return nil, fmt.Errorf("cluster %s does not answer: %w", name, err)
	}
	if node, err := loadRealNode(e.nodeDir(name)); err == nil {
		c.Node = node
	}
	for _, dir := range extraNodeDirs(e.nodeDir(name)) {
		if node, err := loadRealNode(dir); err == nil {
			c.ExtraNodes = append(c.ExtraNodes, node)
		}
	}
	return c, nil
}

// PeerAPIServerURL is the API server URL the cluster's peers use: through
// the real node's host address when it has one, which pods on other
// clusters' real nodes can reach, else the kubeconfig's loopback URL. A
// k3s-flavoured cluster's is its server node's address and port 6443, as
// install detects it there.
func (c *Cluster) PeerAPIServerURL() string {
	if c.Node == nil {
		return c.Config.Host
	}
	if c.Flavour == FlavourK3s {
		return fmt.Sprintf("https://%s:%d", c.Node.IP, K3sAPIServerPort)
	}
	u := c.Config.Host
	return "https://" + c.Node.HostIP + ":" + u[strings.LastIndex(u, ":")+1:]
}

// Names returns the names of the clusters in the Env.
func (e *Env) Names() []string {
	entries, _ := os.ReadDir(filepath.Join(e.Dir, "clusters"))
	var out []string
	for _, d := range entries {
		if d.IsDir() {
			out = append(out, d.Name())
		}
	}
	return out
}

// Delete deletes the cluster called name, if it exists.
func (e *Env) Delete(ctx context.Context, name string) error { return e.deleteByName(ctx, name) }

// StopControlPlane stops every control-plane process of the cluster (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kwok) and waits
// until they have exited, keeping their state: an outage of the cluster as
// its peers see it. A real node keeps running.
func (c *Cluster) StopControlPlane(ctx context.Context) error {
	pids := c.PIDs()
	if _, err := c.env.kwokctl(ctx, "stop", "cluster", "--name", c.Name); err != nil {
		return err
	}
	return machine.WaitExited(ctx, pids, 30*time.Second)
}

// StartControlPlane starts again what StopControlPlane stopped and waits
// until the API server is ready.
func (c *Cluster) StartControlPlane(ctx context.Context) error {
	if _, err := c.env.kwokctl(ctx, "start", "cluster", "--name", c.Name); err != nil {
		return err
	}
	if c.CPUs != "" {
		if err := c.confineControlPlane(); err != nil {
			return err
		}
	}
	return c.waitReady(ctx)
}

// confineControlPlane moves the control-plane processes into the
// cluster's CPU set.
func (c *Cluster) confineControlPlane() error {
	dir, err := machine.MakeCPUSet(cpuSetName(c.Name), c.CPUs)
	if err != nil {
		return err
	}
	pids := c.PIDs()
	all := make([]int, 0, len(pids))
	for _, pid := range pids {
		all = append(all, pid)
	}
	if err := machine.MoveToCPUSet(dir, all...); err != nil {
		return fmt.Errorf("confining cluster %s to CPUs %s: %w", c.Name, c.CPUs, err)
	}
	return nil
}
