package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	if err := tryGetJSON(url, v); err != nil {
		t.Fatal(err)
	}
}

func TestRealNodeRunsContainersBesideFakeNodes(t *testing.T) {
	before := snapshotHost(t)
	// Registered first, so it runs after the cluster's own teardown.
	t.Cleanup(func() { expectHostRestored(t, before) })
	// Confined to CPU 0, pods included, as a benchmark confines each
	// cluster of a pair.
	c := localcluster.StartClusters(t, localcluster.ClusterOptions{Name: "real", FakeNodes: 2, RealNode: true, CPUs: "0"})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The chapters, each a subtest that reports on its own. The ones after
	// the test application runs need it: that one stops the test when it
	// fails.
	t.Run("one real node and two fake ones", func(t *testing.T) {
		nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes.Items) != 3 {
			t.Errorf("cluster has %d nodes, want 1 real and 2 fake", len(nodes.Items))
		}
	})

	ns := "default"
	var pod corev1.Pod
	if !t.Run("the test application runs on the real node", func(t *testing.T) {
		// The default ServiceAccount may read pods, so /kube can list them.
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "default-view"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: ns}},
		}
		if _, err := c.Kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Kube.AppsV1().Deployments(ns).Create(ctx, testAppDeployment("testapp", 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod = waitPodsReady(ctx, t, c, ns, "app=testapp", 1)[0]
		if pod.Spec.NodeName != c.Node.Name {
			t.Fatalf("testapp runs on %s, want the real node %s", pod.Spec.NodeName, c.Node.Name)
		}
	}) {
		t.FailNow()
	}
	t.Run("confined to CPU 0", func(t *testing.T) { expectConfinedToCPU0(t, c, pod) })

	// port-forward, and a pod calling the API server with in-cluster config.
	t.Run("port-forward, and an in-cluster API call", func(t *testing.T) {
		addr := portForward(t, c, ns, "pod/"+pod.Name, 8080)
		var kube struct {
			ServerVersion string   `json:"serverVersion"`
			Pods          []string `json:"pods"`
			Error         string   `json:"error"`
		}
		getJSON(t, "http://"+addr+"/kube", &kube)
		versions, _ := tools.Versions()
		if kube.Error != "" || kube.ServerVersion != versions["KUBE_VERSION"] || !contains(kube.Pods, pod.Name) {
			t.Errorf("in-cluster API call from the pod: %+v; want version %s and pod %s listed", kube, versions["KUBE_VERSION"], pod.Name)
		}
	})

	// logs and exec go through the kubelet.
	t.Run("logs and exec through the kubelet", func(t *testing.T) {
		logs, err := kubectl(t, c, "-n", ns, "logs", pod.Name)
		if err != nil || !strings.Contains(logs, "/kube") {
			t.Errorf("kubectl logs: err=%v, output %q; want the /kube request logged", err, logs)
		}
		out, err := kubectl(t, c, "-n", ns, "exec", pod.Name, "--", "/testapp", "get", "http://127.0.0.1:8080/hostname")
		if err != nil || !strings.Contains(out, pod.Name) {
			t.Errorf("kubectl exec: err=%v, output %q; want the pod's host name", err, out)
		}
	})

	// Services resolve by name through the cluster's CoreDNS, short and in full.
	t.Run("Services resolve through CoreDNS", func(t *testing.T) {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "testapp"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "testapp"},
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}
		if _, err := c.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitDNS(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"testapp", "testapp." + ns + ".svc." + localcluster.ClusterDomain} {
			var out string
			var err error
			waitFor(ctx, t, 30*time.Second, "a pod resolving Service "+name, func(context.Context) (bool, string) {
				out, err = kubectl(t, c, "-n", ns, "exec", pod.Name, "--", "/testapp", "get", "http://"+name+"/hostname")
				return err == nil && strings.Contains(out, pod.Name), fmt.Sprintf("%v: %s", err, out)
			})
		}
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// expectConfinedToCPU0 checks that the control plane of c, its real
// node's daemons and the processes of pod may run on CPU 0 only.
func expectConfinedToCPU0(t *testing.T, c *localcluster.Cluster, pod corev1.Pod) {
	t.Helper()
	procs := map[string]int{}
	for name, pid := range c.PIDs() {
		procs[name] = pid
	}
	for name, pid := range c.Node.PIDs {
		procs[name] = pid
	}
	// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok;
	// containerd, kubelet, kube-proxy.
	if len(procs) < 8 {
		t.Errorf("found only %d processes of cluster %s: %v", len(procs), c.Name, procs)
	}
	// The pod's processes (its sandbox and container) are in cgroups
	// named after their container IDs.
	var ids []string
	for _, s := range pod.Status.ContainerStatuses {
		_, id, _ := strings.Cut(s.ContainerID, "://")
		ids = append(ids, id)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		for _, id := range ids {
			if err == nil && id != "" && strings.Contains(string(b), id) {
				procs[fmt.Sprintf("pod %s process %d", pod.Name, pid)] = pid
				found++
			}
		}
	}
	if found == 0 {
		t.Errorf("found no process of pod %s (containers %v)", pod.Name, ids)
	}
	for name, pid := range procs {
		if cpus, err := machine.ProcessCPUs(pid); err != nil || cpus != "0" {
			t.Errorf("%s (pid %d) of cluster %s may run on CPUs %q (%v), want 0", name, pid, c.Name, cpus, err)
		}
	}
}
