package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/fabric/routing"
	"github.com/kubectl-offload/kubectl-offload/internal/peer"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

// The helpers the e2e tests share: what more than one file uses is here.
// A helper one file uses stays in that file, and a chapter of a scenario,
// with what is its own, stays in its chapter file.

// Running the plugin and kubectl.

// offload runs the built kubectl-offload binary against cluster c.
func offload(t *testing.T, c *localcluster.Cluster, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return offloadWith(filepath.Join(binDir, "kubectl-offload"), c, args...)
}

// offloadWith runs the kubectl-offload binary bin, against cluster c unless
// it is nil: offload runs the one under test, the upgrade test an older
// release's.
func offloadWith(bin string, c *localcluster.Cluster, args ...string) (stdout, stderr string, err error) {
	return localcluster.RunOffload(context.Background(), bin, c, args...)
}

func mustOffload(t *testing.T, c *localcluster.Cluster, args ...string) string {
	t.Helper()
	return mustRunOffload(t, "kubectl offload", filepath.Join(binDir, "kubectl-offload"), c, args...)
}

// mustRunOffload runs the kubectl-offload binary bin, named name in the
// test's log, against cluster c, fails the test if it fails, and returns
// its output.
func mustRunOffload(t *testing.T, name, bin string, c *localcluster.Cluster, args ...string) string {
	t.Helper()
	start := time.Now()
	out, errOut, err := offloadWith(bin, c, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s", name, strings.Join(args, " "), err, out, errOut)
	}
	t.Logf("%s %s: %s", name, strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return out
}

// kubectl runs the pinned kubectl against cluster c.
func kubectl(t *testing.T, c *localcluster.Cluster, args ...string) (string, error) {
	t.Helper()
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

func jsonUnmarshal(doc string, v any) error { return json.Unmarshal([]byte(doc), v) }

func jsonBool(t *testing.T, doc, field string) bool {
	t.Helper()
	var m map[string]any
	if err := jsonUnmarshal(doc, &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, doc)
	}
	b, _ := m[field].(bool)
	return b
}

// Clients, install and the cluster identity.

func ctrlClient(t *testing.T, c *localcluster.Cluster) client.Client {
	t.Helper()
	cl, err := client.New(c.Config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func identity(ctx context.Context, t *testing.T, c *localcluster.Cluster) map[string]string {
	t.Helper()
	cm, err := c.Kube.CoreV1().ConfigMaps(localcluster.InstallNamespace).Get(ctx, "offload-cluster-identity", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("identity ConfigMap: %v", err)
	}
	return cm.Data
}

// installAgent installs kubectl-offload with its agent running as pods on the real node.
func installAgent(t *testing.T, c *localcluster.Cluster, extra ...string) {
	t.Helper()
	mustOffload(t, c, append(append([]string{"install", "--cluster-name", c.Name, "--timeout", "3m"}, localcluster.AgentValues()...), extra...)...)
}

// waitCASecret waits until the auth service has created its CA Secret and
// returns the PEM CA certificate.
func waitCASecret(ctx context.Context, t *testing.T, c *localcluster.Cluster) []byte {
	t.Helper()
	var cert []byte
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := c.Kube.CoreV1().Secrets(localcluster.InstallNamespace).Get(ctx, offloadv1alpha1.AuthCASecret, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		cert = s.Data[offloadv1alpha1.AuthCACertKey]
		return len(cert) > 0, nil
	})
	if err != nil {
		t.Fatalf("the auth CA Secret %s did not appear: %v", offloadv1alpha1.AuthCASecret, err)
	}
	return cert
}

// object identifies one object of a manifest.
type object struct {
	gvk             schema.GroupVersionKind
	namespace, name string
}

func (o object) String() string { return fmt.Sprintf("%s %s/%s", o.gvk.Kind, o.namespace, o.name) }

// manifestObjects lists the objects of a multi-document YAML manifest.
func manifestObjects(t *testing.T, manifest string) []object {
	t.Helper()
	var out []object
	for _, doc := range strings.Split(manifest, "\n---") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("manifest is not YAML: %v\n%s", err, doc)
		}
		if u.Object == nil || u.GetKind() == "" {
			continue
		}
		out = append(out, object{u.GroupVersionKind(), u.GetNamespace(), u.GetName()})
	}
	return out
}

func exists(ctx context.Context, t *testing.T, c client.Client, o object) bool {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(o.gvk)
	err := c.Get(ctx, client.ObjectKey{Namespace: o.namespace, Name: o.name}, u)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil && strings.Contains(err.Error(), "no matches for kind") {
		return false
	}
	if err != nil {
		t.Fatalf("getting %s: %v", o, err)
	}
	return true
}

// schedulingPolicyServed tells whether c's API server serves
// admissionregistration.k8s.io/v1 MutatingAdmissionPolicy, where install
// chooses it over the webhook for the scheduling mutation.
func schedulingPolicyServed(t *testing.T, c *localcluster.Cluster) bool {
	t.Helper()
	list, err := c.Kube.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil {
		t.Fatalf("discovering admissionregistration.k8s.io/v1 on %s: %v", c.Name, err)
	}
	for _, r := range list.APIResources {
		if r.Kind == "MutatingAdmissionPolicy" {
			return true
		}
	}
	return false
}

// expectSchedulingMutation checks that the scheduling mutation installed
// on c is the one install chooses for its API server: the
// MutatingAdmissionPolicy where it is served, with the webhook for the
// pods that mount claims only (a policy cannot read claims), else the
// webhook for every pod.
func expectSchedulingMutation(ctx context.Context, t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	policy := schedulingPolicyServed(t, c)
	api := c.Kube.AdmissionregistrationV1()
	cfg, errWebhook := api.MutatingWebhookConfigurations().Get(ctx, "offload-webhook", metav1.GetOptions{})
	_, errPolicy := api.MutatingAdmissionPolicies().Get(ctx, "offload-scheduling", metav1.GetOptions{})
	claimsOnly := errWebhook == nil && len(cfg.Webhooks) == 1 && len(cfg.Webhooks[0].MatchConditions) == 1 &&
		cfg.Webhooks[0].MatchConditions[0].Name == "mounts-a-claim"
	if policy && (errPolicy != nil || !claimsOnly) || !policy && (errWebhook != nil || claimsOnly || errPolicy == nil) {
		t.Errorf("on %s (MutatingAdmissionPolicy served: %t): MutatingWebhookConfiguration offload-webhook: %v (for the pods that mount claims only: %t); MutatingAdmissionPolicy offload-scheduling: %v; want %s",
			c.Name, policy, errOrFound(errWebhook), claimsOnly, errOrFound(errPolicy),
			map[bool]string{true: "the policy, and the webhook for the pods that mount claims", false: "the webhook only"}[policy])
	}
}

func errOrFound(err error) string {
	if err == nil {
		return "found"
	}
	return err.Error()
}

// The host a real node runs on.

// hostSnapshot is the host state a real node may change.
type hostSnapshot struct {
	sysctls    map[string]string
	mounts     []string
	interfaces []string
	processes  []string
	netns      []string
	// absent are host directories a real node writes to that did not exist.
	absent []string
}

// nodeHostDirs are the host directories a real node's kubelet, CNI and
// containerd write to, whatever their configuration says.
var nodeHostDirs = []string{"/var/log/containers", "/var/lib/cni", "/run/containerd", "/run/netns"}

func snapshotHost(t *testing.T) hostSnapshot {
	t.Helper()
	s := hostSnapshot{sysctls: machine.HostSysctls()}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			s.mounts = append(s.mounts, fields[4])
		}
	}
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			s.interfaces = append(s.interfaces, strings.TrimSuffix(strings.Split(f[1], "@")[0], ":"))
		}
	}
	for _, name := range []string{"kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "pause", "testapp", "offload-agent", "kine", "servicelb"} {
		if out, err := exec.Command("pgrep", "-x", name).Output(); err == nil {
			for _, pid := range strings.Fields(string(out)) {
				s.processes = append(s.processes, name+"/"+pid)
			}
		}
	}
	for _, d := range nodeHostDirs {
		if _, err := os.Stat(d); os.IsNotExist(err) {
			s.absent = append(s.absent, d)
		}
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		s.netns = append(s.netns, e.Name())
	}
	for _, l := range [][]string{s.mounts, s.interfaces, s.processes, s.netns} {
		sort.Strings(l)
	}
	return s
}

// expectHostRestored fails the test when the host differs from before.
func expectHostRestored(t *testing.T, before hostSnapshot) {
	t.Helper()
	after := snapshotHost(t)
	for k, v := range before.sysctls {
		if after.sysctls[k] != v {
			t.Errorf("sysctl %s = %s after teardown, was %s", k, after.sysctls[k], v)
		}
	}
	diff := func(what string, a, b []string) {
		seen := map[string]bool{}
		for _, x := range a {
			seen[x] = true
		}
		for _, x := range b {
			if !seen[x] {
				t.Errorf("%s %s is left after teardown", what, x)
			}
		}
	}
	diff("mount", before.mounts, after.mounts)
	diff("interface", before.interfaces, after.interfaces)
	diff("process", before.processes, after.processes)
	diff("network namespace", before.netns, after.netns)
	for _, d := range before.absent {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s did not exist before and is left after teardown", d)
		}
	}
	for _, p := range []string{"/var/log/containers", "/var/lib/cni"} {
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			if strings.Contains(e.Name(), "offload") {
				t.Errorf("%s is left after teardown", filepath.Join(p, e.Name()))
			}
		}
	}
}

// Waiting.

// waitFor polls cond every 250 ms until it holds or timeout passes; what
// describes the condition, and last says why it did not hold yet.
func waitFor(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) time.Duration {
	t.Helper()
	took, err := framework.Poll(ctx, 250*time.Millisecond, timeout, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	return took
}

// waitPodsRunning polls until want pods matching selector are Running, and returns them.
func waitPodsRunning(ctx context.Context, t *testing.T, c *localcluster.Cluster, ns, selector string, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				pods = append(pods, p)
			}
		}
		last = fmt.Sprintf("%d of %d pods Running", len(pods), len(list.Items))
		return len(pods) == want, nil
	})
	if err != nil {
		t.Fatalf("%s: waiting for %d Running pods (%s) in %s: %v (%s)", c.Name, want, selector, ns, err, last)
	}
	return pods
}

// waitPodsReady polls until want pods matching selector are Running and Ready, and returns them.
func waitPodsReady(ctx context.Context, t *testing.T, c *localcluster.Cluster, ns, selector string, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		pods = pods[:0]
		var states []string
		for _, p := range list.Items {
			ready := false
			for _, cond := range p.Status.Conditions {
				ready = ready || (cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue)
			}
			if p.Status.Phase == corev1.PodRunning && ready && p.DeletionTimestamp == nil {
				pods = append(pods, p)
			}
			states = append(states, fmt.Sprintf("%s:%s ready=%t %s", p.Name, p.Status.Phase, ready, containerWaiting(p)))
		}
		last = strings.Join(states, ", ")
		return len(pods) == want, nil
	})
	if err != nil {
		t.Fatalf("%s: waiting for %d Ready pods (%s) in %s: %v (%s)", c.Name, want, selector, ns, err, last)
	}
	return pods
}

func containerWaiting(p corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting != nil {
			return s.State.Waiting.Reason + ": " + s.State.Waiting.Message
		}
	}
	return ""
}

// nodeReady returns the Ready condition status of node name, "" when missing.
func nodeReady(ctx context.Context, c *localcluster.Cluster, name string) corev1.ConditionStatus {
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status
		}
	}
	return ""
}

func waitNodeReady(ctx context.Context, t *testing.T, c *localcluster.Cluster, name string, want corev1.ConditionStatus, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return nodeReady(ctx, c, name) == want, nil
	}); err != nil {
		t.Fatalf("node %s is not Ready=%s after %s", name, want, timeout)
	}
	return time.Since(start)
}

// holdFault keeps an injected fault in place for d: the length of an
// outage is what the test is about, not a wait for something to happen.
func holdFault(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Workloads, and reaching them.

const testAppImage = "registry.local/offload/testapp:test"

// testAppDeployment runs the test application on the real node.
func testAppDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{localcluster.RealNodeLabel: localcluster.RealNodeLabelValue},
					Containers: []corev1.Container{{
						Name:            "app",
						Image:           testAppImage,
						ImagePullPolicy: corev1.PullNever,
						Ports:           []corev1.ContainerPort{{ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intOrString(8080)}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
}

func intOrString(port int) intstr.IntOrString { return intstr.FromInt(port) }

// offloadedApp is the test application as a Deployment for an offloaded
// namespace: no node selector, so the scheduler and the webhook decide.
func offloadedApp(name string, replicas int32) *appsv1.Deployment {
	d := testAppDeployment(name, replicas)
	d.Spec.Template.Spec.NodeSelector = nil
	d.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
	return d
}

func createNamespace(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

func tolerates(pod *corev1.Pod, key string) bool {
	for _, tol := range pod.Spec.Tolerations {
		if tol.Key == key {
			return true
		}
	}
	return false
}

// scaleDeployment sets the replicas of Deployment ns/name on c. Its
// controller writes the status meanwhile: a conflict is retried on the new
// version, as kubectl scale does.
func scaleDeployment(ctx context.Context, t *testing.T, c *localcluster.Cluster, ns, name string, n int32) {
	t.Helper()
	deployments := c.Kube.AppsV1().Deployments(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := deployments.GetScale(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = n
		_, err = deployments.UpdateScale(ctx, name, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("scaling %s/%s to %d: %v", ns, name, n, err)
	}
}

// scaleAgent scales the consumer's controller-manager to replicas and waits
// until that many are Ready.
func scaleAgent(ctx context.Context, t *testing.T, c *localcluster.Cluster, replicas int32) {
	t.Helper()
	scaleDeployment(ctx, t, c, localcluster.InstallNamespace, offloadv1alpha1.ControllerManager, replicas)
	waitFor(ctx, t, 2*time.Minute, fmt.Sprintf("%d controller-manager pods", replicas), func(ctx context.Context) (bool, string) {
		pods, err := c.Kube.CoreV1().Pods(localcluster.InstallNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=controller-manager"})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		ready := 0
		for _, p := range pods.Items {
			states = append(states, p.Name+":"+string(p.Status.Phase))
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready++
				}
			}
		}
		return ready == int(replicas) && len(pods.Items) == int(replicas), strings.Join(states, ", ")
	})
}

// agentRestarts returns the restart count of every container of the
// agent's pods (controller-manager, auth, gateways) in c, by pod/container.
func agentRestarts(ctx context.Context, t *testing.T, c *localcluster.Cluster) map[string]int32 {
	t.Helper()
	pods, err := c.Kube.CoreV1().Pods(localcluster.InstallNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			out[p.Name+"/"+s.Name] = s.RestartCount
		}
	}
	return out
}

// everywhere is a DaemonSet of the test application whose pods tolerate
// every taint, as CNI agents, log shippers and kube-proxy do.
func everywhere(name string, annotations map[string]string) *appsv1.DaemonSet {
	d := offloadedApp(name, 1)
	d.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       appsv1.DaemonSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template},
	}
}

// createDaemonSet creates ds in ns of c, and deletes it when the test
// ends, before the clusters go: its pods tolerate the taint that drains a
// real node at teardown.
func createDaemonSet(ctx context.Context, t testing.TB, c *localcluster.Cluster, ns string, ds *appsv1.DaemonSet) {
	t.Helper()
	if _, err := c.Kube.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := c.Kube.AppsV1().DaemonSets(ns).Delete(ctx, ds.Name, metav1.DeleteOptions{PropagationPolicy: new(metav1.DeletePropagationBackground)})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting DaemonSet %s/%s: %v", ns, ds.Name, err)
		}
	})
}

// rolledOut runs kubectl rollout status on DaemonSet ns/name, as a user
// waiting for it would.
func rolledOut(t *testing.T, c *localcluster.Cluster, ns, name string) {
	t.Helper()
	if out, err := kubectl(t, c, "-n", ns, "rollout", "status", "daemonset/"+name, "--timeout", "90s"); err != nil {
		t.Errorf("kubectl rollout status daemonset %s/%s: %v\n%s", ns, name, err, out)
	}
}

// daemonPodsOn lists the nodes the pods of DaemonSet ns/name are bound to.
func daemonPodsOn(ctx context.Context, t *testing.T, c *localcluster.Cluster, ns, name string) []string {
	t.Helper()
	pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	return nodes
}

// harmlessPod is a pod every policy admits: it drops NET_RAW and takes no
// token of the provider's, as the consumer's agent makes every pod it sends.
func harmlessPod(name, ns string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"attack": name}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			Containers: []corev1.Container{{Name: "app", Image: testAppImage, ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW"}}}}},
		},
	}
}

// httpGet returns the body of GET url.
func httpGet(url string) (string, error) {
	client := &http.Client{Timeout: 15 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), err
}

// tryGetJSON decodes the JSON body of GET url into v, whatever the status.
func tryGetJSON(url string, v any) error {
	client := &http.Client{Timeout: 15 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %s, not JSON: %v: %s", url, resp.Status, err, body)
	}
	return nil
}

// portForward forwards a local port to port of target and returns the local
// address; the forward stops when the test ends.
func portForward(t *testing.T, c *localcluster.Cluster, ns, target string, port int) string {
	t.Helper()
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), "--kubeconfig", c.Kubeconfig, "-n", ns,
		"port-forward", target, fmt.Sprintf(":%d", port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &lockedWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	re := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+)`)
	lines := bufio.NewScanner(stdout)
	found := make(chan string, 1)
	go func() {
		for lines.Scan() {
			if m := re.FindStringSubmatch(lines.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case addr := <-found:
		return addr
	case <-time.After(30 * time.Second):
		t.Fatalf("kubectl port-forward %s did not start: %s", target, cmd.Stderr.(*lockedWriter).String())
	}
	return ""
}

// lockedWriter is a writer safe for a process and the test to share.
type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

// execIn runs the test application's client in pod ns/name of c.
func execIn(t *testing.T, c *localcluster.Cluster, ns, pod string, args ...string) (string, error) {
	t.Helper()
	out, err := kubectl(t, c, append([]string{"-n", ns, "exec", pod, "--", "/testapp"}, args...)...)
	return strings.TrimSpace(out), err
}

// expectAnswers asks url from pod, from, until every one of want has
// answered, n answers have come, or 30 s have passed, and fails t unless
// every one of want answered, saying the last failure. The deadline covers
// a Service's endpoints reaching kube-proxy, on the consumer and, for its
// reflection, on the provider, which take seconds after a pod is Ready;
// n answers bound the load balancer's chance of never picking one of want
// (2^-(n-1) for two).
func expectAnswers(ctx context.Context, t *testing.T, c *localcluster.Cluster, ns, pod, from, url string, n int, want ...string) {
	t.Helper()
	seen := map[string]bool{}
	got := 0
	_, err := framework.Poll(ctx, 250*time.Millisecond, 30*time.Second, func(ctx context.Context) (bool, string) {
		out, err := execIn(t, c, ns, pod, "get", url)
		if err != nil {
			return false, fmt.Sprintf("%v: %.200s", err, out)
		}
		seen[strings.Fields(out + " ")[0]] = true
		got++
		return got >= n || all(seen, want), ""
	})
	if !all(seen, want) {
		t.Errorf("%s from %s answered from %v, want every one of %v (%d answers; %v)", url, from, seen, want, got, err)
	}
}

func all(seen map[string]bool, want []string) bool {
	for _, w := range want {
		if !seen[w] {
			return false
		}
	}
	return len(want) > 0
}

// Peering.

// generate runs peer generate -o json on the provider and returns the
// arguments of the command it prints.
func generate(t *testing.T, provider *localcluster.Cluster, args ...string) peer.PeerCommandArgs {
	t.Helper()
	var pc peer.PeerCommand
	if err := jsonUnmarshal(mustOffload(t, provider, append([]string{"peer", "generate", "-o", "json"}, args...)...), &pc); err != nil {
		t.Fatalf("peer generate -o json: %v", err)
	}
	return peer.PeerCommandArgs{Name: pc.Name, AuthURL: pc.AuthURL, ClusterID: pc.ClusterID, AuthToken: pc.AuthToken, CACertHash: pc.CACertHash}
}

// outOfBand runs the command on the consumer, as a user pastes it.
func outOfBand(t *testing.T, consumer *localcluster.Cluster, a peer.PeerCommandArgs, extra ...string) (string, error) {
	t.Helper()
	args := append(strings.Fields(strings.TrimPrefix(a.Command(), "kubectl offload ")), extra...)
	_, errOut, err := offload(t, consumer, args...)
	return errOut, err
}

// peerableClustersWith starts a consumer and a provider with the agent
// installed and running on each one's real node.
func peerableClustersWith(ctx context.Context, t *testing.T, consumerOpts, providerOpts localcluster.ClusterOptions, extra ...string) (consumer, provider *localcluster.Cluster) {
	t.Helper()
	clusters := localcluster.StartClusters(t, consumerOpts, providerOpts)
	installPeerable(ctx, t, clusters[0], clusters[1], extra...)
	return clusters[0], clusters[1]
}

// installPeerable installs the agent with extra on a consumer and a
// provider at once, each advertising the API server URL peers reach, and
// waits until the agent pods are Ready and the provider's auth CA exists:
// the first half of the peered-pair fixture (localcluster.InstallPair).
func installPeerable(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, extra ...string) {
	t.Helper()
	start := time.Now()
	if err := localcluster.InstallPair(ctx, consumer, provider, localcluster.PairOptions{Bin: binDir, Install: extra}); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl offload install on %s and %s, agents Ready: %s", consumer.Name, provider.Name, time.Since(start).Round(time.Millisecond))
}

// peeredClustersWith starts a consumer and a provider and peers them with
// the peered-pair fixture (localcluster.StartPeeredPair): install with extra,
// peer generate with generateArgs, and the printed command, which returns
// once the virtual node is Ready.
func peeredClustersWith(ctx context.Context, t *testing.T, consumerOpts, providerOpts localcluster.ClusterOptions, generateArgs []string, extra ...string) *localcluster.PeeredPair {
	t.Helper()
	clusters := localcluster.StartClusters(t, consumerOpts, providerOpts)
	p, err := localcluster.StartPeeredPair(ctx, clusters[0], clusters[1], localcluster.PairOptions{Bin: binDir, Install: extra, Generate: generateArgs})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("peer out-of-band to node offload-%s Ready: %s", p.Peer.Name, p.OutOfBand.Round(time.Millisecond))
	return p
}

// expectVirtualNodeReady waits until the consumer's node offload-<name> is
// Ready with the allocatable resources of the provider's ResourceOffer.
func expectVirtualNodeReady(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, name, tenantNamespace string) {
	t.Helper()
	var fc offloadv1alpha1.ForeignCluster
	if err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: name}, &fc); err != nil {
		t.Fatal(err)
	}
	var node corev1.Node
	var offer offloadv1alpha1.ResourceOffer
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := ctrlClient(t, provider).Get(ctx, client.ObjectKey{Namespace: tenantNamespace, Name: fc.Spec.ClusterName}, &offer); err != nil {
			return false, nil
		}
		if err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: "offload-" + name}, &node); err != nil {
			return false, nil
		}
		ready := false
		for _, c := range node.Status.Conditions {
			ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}
		return ready && sameResources(node.Status.Allocatable, offer.Spec.Resources), nil
	})
	if err != nil {
		t.Fatalf("node offload-%s is not Ready with the offer's resources %v: conditions %+v, allocatable %v",
			name, offer.Spec.Resources, node.Status.Conditions, node.Status.Allocatable)
	}
	if node.Labels["offload.io/type"] != "virtual-node" || node.Labels["offload.io/remote-cluster-id"] != fc.Spec.ClusterID {
		t.Errorf("node offload-%s has labels %v", name, node.Labels)
	}
	if err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: name}, &fc); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(fc.Status.Conditions, offloadv1alpha1.ConditionOutgoingPeering) || fc.Status.Outgoing != offloadv1alpha1.PhaseEstablished {
		t.Errorf("ForeignCluster %s: outgoing peering is not Established: %+v", name, fc.Status)
	}
}

// sameResources reports whether a and b hold the same quantities.
func sameResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

// heldCredentials are the consumer's credentials for a peer, as its agent
// keeps them in the kubeconfig Secret.
type heldCredentials struct {
	config           *rest.Config
	namespace        string
	expiry, issued   time.Time
	secretVersion    string
	tokenFingerprint string
}

func readHeldCredentials(ctx context.Context, t *testing.T, consumer *localcluster.Cluster, name string) heldCredentials {
	t.Helper()
	s, err := consumer.Kube.CoreV1().Secrets(localcluster.InstallNamespace).Get(ctx, peering.PeerKubeconfigSecretName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the kubeconfig Secret of %s: %v", name, err)
	}
	cc, err := clientcmd.NewClientConfigFromBytes(s.Data[peering.PeerKubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		t.Fatal(err)
	}
	h := heldCredentials{config: cfg, namespace: ns, secretVersion: s.ResourceVersion}
	if h.expiry, err = time.Parse(time.RFC3339, string(s.Data[peering.PeerExpirationKey])); err != nil {
		t.Fatalf("the kubeconfig Secret has no expiration: %v", err)
	}
	if h.issued, err = time.Parse(time.RFC3339, string(s.Data[peering.PeerIssuedKey])); err != nil {
		t.Fatalf("the kubeconfig Secret has no issue time: %v", err)
	}
	// Compare tokens without logging them.
	h.tokenFingerprint = cfg.BearerToken[len(cfg.BearerToken)-12:]
	return h
}

// readOffer reads the offer on the provider with held credentials and
// returns the API error, if any.
func readOffer(ctx context.Context, h heldCredentials, name string) error {
	c, err := client.New(h.config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return err
	}
	return c.Get(ctx, client.ObjectKey{Namespace: h.namespace, Name: name}, &offloadv1alpha1.ResourceOffer{})
}

// peerFields returns the fields of kubectl offload status peer NAME -o json on c.
func peerFields(t *testing.T, c *localcluster.Cluster, name string) map[string]string {
	t.Helper()
	out, _, _ := offload(t, c, "status", "peer", name, "-o", "json")
	var r struct {
		Sections []struct {
			Fields []struct {
				Name  string `json:"name"`
				Value string `json:"value"`
			} `json:"fields"`
		} `json:"sections"`
	}
	if err := jsonUnmarshal(out, &r); err != nil {
		t.Fatalf("kubectl offload status peer %s -o json: %v\n%s", name, err, out)
	}
	fields := map[string]string{}
	for _, s := range r.Sections {
		for _, f := range s.Fields {
			fields[f.Name] = f.Value
		}
	}
	return fields
}

// tenantClient returns the consumer's credentials for its provider
// "provider", as its agent holds them, and a client that uses them.
func tenantClient(ctx context.Context, t *testing.T, consumer *localcluster.Cluster) (heldCredentials, kubernetes.Interface) {
	t.Helper()
	held := readHeldCredentials(ctx, t, consumer, "provider")
	tenant, err := kubernetes.NewForConfig(held.config)
	if err != nil {
		t.Fatal(err)
	}
	return held, tenant
}

// expectNoPeeringLeft checks that nothing of a peering is left on either
// side. A tenant namespace takes a moment to be deleted, so it is waited for.
func expectNoPeeringLeft(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, name string) {
	t.Helper()
	err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: name}, &offloadv1alpha1.ForeignCluster{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("ForeignCluster %s is left on the consumer (err=%v)", name, err)
	}
	var tenants offloadv1alpha1.TenantList
	if err := ctrlClient(t, provider).List(ctx, &tenants); err != nil {
		t.Fatal(err)
	}
	if len(tenants.Items) != 0 {
		t.Errorf("the provider has tenants left: %v", tenants.Items)
	}
	ns := "offload-tenant-" + consumer.Name
	var nsErr error
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, nsErr = provider.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(nsErr), nil
	})
	if !apierrors.IsNotFound(nsErr) {
		t.Errorf("tenant namespace %s left on the provider (err=%v)", ns, nsErr)
	}
}

// expectPeeringPartsGone waits until every part of the consumer's peering
// with peer is gone: the virtual node and its Lease, the Secrets, and the
// ForeignCluster's children, which go with it (garbage collection).
func expectPeeringPartsGone(ctx context.Context, t *testing.T, consumer *localcluster.Cluster, peer string) {
	t.Helper()
	node := offloadv1alpha1.VirtualNodeName(peer)
	tunnel := offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, peer)
	for _, o := range []client.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: peering.PeerKubeconfigSecretName(peer), Namespace: localcluster.InstallNamespace}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: peering.PeerTokenSecretName(peer), Namespace: localcluster.InstallNamespace}},
		&offloadv1alpha1.PeeringCredentials{ObjectMeta: metav1.ObjectMeta{Name: peer}},
		&offloadv1alpha1.VirtualNode{ObjectMeta: metav1.ObjectMeta{Name: peer}},
		&offloadv1alpha1.Tunnel{ObjectMeta: metav1.ObjectMeta{Name: tunnel, Namespace: localcluster.InstallNamespace}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.GatewayName(tunnel), Namespace: localcluster.InstallNamespace}},
	} {
		var err error
		_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			err = ctrlClient(t, consumer).Get(ctx, client.ObjectKeyFromObject(o), o)
			return apierrors.IsNotFound(err), nil
		})
		if !apierrors.IsNotFound(err) {
			t.Errorf("%T %s is left on the consumer after unpeer (err=%v)", o, o.GetName(), err)
		}
	}
}

// Offloaded pods.

// remotePods lists the pods that the consumer of clusterID reflected into twin.
func remotePods(ctx context.Context, t *testing.T, provider *localcluster.Cluster, twin, clusterID string) []corev1.Pod {
	t.Helper()
	list, err := provider.Kube.CoreV1().Pods(twin).List(ctx, metav1.ListOptions{LabelSelector: offloadv1alpha1.LabelOriginClusterID + "=" + clusterID})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// samePods reports whether the remote pods reflect exactly the consumer
// pods: one remote pod per consumer pod, by name and origin UID.
func samePods(local, remote []corev1.Pod) (bool, string) {
	want := map[string]string{}
	for _, p := range local {
		want[p.Name] = string(p.UID)
	}
	got := map[string]string{}
	for _, p := range remote {
		if _, dup := got[p.Name]; dup {
			return false, "duplicate remote pod " + p.Name
		}
		got[p.Name] = p.Labels[offloadv1alpha1.LabelOriginPodUID]
	}
	return fmt.Sprint(want) == fmt.Sprint(got), fmt.Sprintf("consumer pods %v, remote pods %v", want, got)
}

// onVirtualNode keeps the pods bound to the virtual node offload-provider
// that are neither being deleted nor finished.
func onVirtualNode(pods []corev1.Pod) []corev1.Pod { return onNode(pods, "offload-provider") }

// onNode keeps the pods bound to node that are neither being deleted nor
// finished.
func onNode(pods []corev1.Pod, node string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil &&
			p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			out = append(out, p)
		}
	}
	return out
}

// expectReflected waits until the live pods of selector in the offloaded
// namespace work are exactly want pods on the virtual node, each Ready,
// with one remote pod each in twin.
func expectReflected(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, twin, clusterID, selector string, want int) {
	t.Helper()
	took := waitFor(ctx, t, 3*time.Minute, fmt.Sprintf("%d reflected pods %s", want, selector), func(ctx context.Context) (bool, string) {
		list, err := consumer.Kube.CoreV1().Pods("work").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		live := onVirtualNode(list.Items)
		ready := 0
		for _, p := range live {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		var remote []corev1.Pod
		for _, r := range remotePods(ctx, t, provider, twin, clusterID) {
			if r.DeletionTimestamp == nil && strings.HasPrefix(r.Name, strings.SplitN(selector, "=", 2)[1]) {
				remote = append(remote, r)
			}
		}
		same, why := samePods(live, remote)
		return len(live) == want && ready == want && same, fmt.Sprintf("%d on the virtual node, %d Ready; %s", len(live), ready, why)
	})
	t.Logf("%d pods %s reflected and Ready: %s", want, selector, took.Round(time.Millisecond))
}

// status and doctor.

// statusReport is the part of `kubectl offload status -o json` the tests read.
type statusReport struct {
	Kind     string `json:"kind"`
	Healthy  bool   `json:"healthy"`
	Sections []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		Checks []struct {
			Name    string `json:"name"`
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"checks"`
		Tunnels []reportedTunnel `json:"tunnels"`
	} `json:"sections"`
}

// tunnel returns the tunnel called name in section, or nil.
func (r statusReport) tunnel(section, name string) *reportedTunnel {
	for _, s := range r.Sections {
		for i, tn := range s.Tunnels {
			if s.Name == section && tn.Name == name {
				return &s.Tunnels[i]
			}
		}
	}
	return nil
}

// checkMessage returns the message of check name in section, or "".
func (r statusReport) checkMessage(section, name string) string {
	_, msg := r.check(section, name)
	return msg
}

// sectionStatus returns the status of the section called name, or "".
func (r statusReport) sectionStatus(name string) string {
	for _, s := range r.Sections {
		if s.Name == name {
			return s.Status
		}
	}
	return ""
}

// checkStatus returns the status of check name in section, or "".
func (r statusReport) checkStatus(section, name string) string {
	status, _ := r.check(section, name)
	return status
}

// check returns the status and message of check name in section, or "".
func (r statusReport) check(section, name string) (status, message string) {
	for _, s := range r.Sections {
		for _, c := range s.Checks {
			if s.Name == section && c.Name == name {
				return c.Status, c.Message
			}
		}
	}
	return "", ""
}

// failedSections lists the sections whose status is failed.
func (r statusReport) failedSections() []string {
	var out []string
	for _, s := range r.Sections {
		if s.Status == "failed" {
			out = append(out, s.Name)
		}
	}
	return out
}

// failures lists the messages of the failed checks, for test logs.
func (r statusReport) failures() []string {
	var out []string
	for _, s := range r.Sections {
		for _, c := range s.Checks {
			if c.Status == "failed" {
				out = append(out, s.Name+"/"+c.Name+": "+c.Message)
			}
		}
	}
	return out
}

// reportedTunnel is the part of a tunnel in the status report the tests read.
type reportedTunnel struct {
	Name           string        `json:"name"`
	Implementation string        `json:"implementation"`
	Endpoint       string        `json:"endpoint"`
	PeerPods       []cidrMapping `json:"peerPods"`
	LocalPods      []cidrMapping `json:"localPods"`
	MTU            int           `json:"mtu"`
	RxBytes        int64         `json:"rxBytes"`
	TxBytes        int64         `json:"txBytes"`
	Connected      bool          `json:"connected"`
	Hop            string        `json:"hop"`
}

// cidrMapping is a real CIDR and its view, in a reported tunnel.
type cidrMapping struct {
	Real string `json:"real"`
	View string `json:"view"`
}

// offloadStatus runs `kubectl offload status -o json args...` against c and
// returns the report and the exit code.
func offloadStatus(t *testing.T, c *localcluster.Cluster, args ...string) (statusReport, int) {
	t.Helper()
	return statusJSON(t, c, append([]string{"status", "-o", "json"}, args...)...)
}

// statusJSON runs `kubectl offload args...`, a status command with -o json,
// against c and returns the report and the exit code.
func statusJSON(t *testing.T, c *localcluster.Cluster, args ...string) (statusReport, int) {
	t.Helper()
	return reportJSON(t, c, "StatusReport", args...)
}

// reportJSON runs `kubectl offload args...`, a reporting command (status,
// doctor) with -o json, against c and returns its report, of kind, and the
// exit code.
func reportJSON(t *testing.T, c *localcluster.Cluster, kind string, args ...string) (statusReport, int) {
	t.Helper()
	out, errOut, err := offload(t, c, args...)
	code := 0
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("kubectl offload %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Kind != kind {
		t.Fatalf("kubectl offload %s printed no %s (exit %d, %v):\nstdout: %s\nstderr: %s", strings.Join(args, " "), kind, code, err, out, errOut)
	}
	return r, code
}

// offloadDoctor runs `kubectl offload doctor -o json` against c and returns
// the report, which has the shape of a status report, and the exit code.
func offloadDoctor(t *testing.T, c *localcluster.Cluster) (statusReport, int) {
	t.Helper()
	return reportJSON(t, c, "DoctorReport", "doctor", "-o", "json")
}

// expectStatusHealthy waits until kubectl offload status of the release
// under test exits 0 and reports c healthy.
func expectStatusHealthy(ctx context.Context, t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	waitFor(ctx, t, 2*time.Minute, "kubectl offload status healthy on "+c.Name, func(ctx context.Context) (bool, string) {
		r, code := offloadStatus(t, c)
		return code == 0 && r.Healthy, fmt.Sprintf("exit code %d, healthy %t, failed checks %q", code, r.Healthy, r.failures())
	})
}

// The network fabric.

// gatewayReport is what a gateway's /status says, as far as the tests read.
type gatewayReport struct {
	RxBytes, TxBytes int64
	// Filtered counts the packets its tenant filter dropped, both ways.
	Filtered uint64 `json:"filteredPackets"`
}

// gatewayStatus reads the /status of tunnel's gateway through a port-forward.
func gatewayStatus(ctx context.Context, t *testing.T, c *localcluster.Cluster, tunnel string) gatewayReport {
	t.Helper()
	pod := waitPodsReady(ctx, t, c, localcluster.InstallNamespace, offloadv1alpha1.LabelTunnel+"="+tunnel, 1)[0]
	addr := portForward(t, c, localcluster.InstallNamespace, "pod/"+pod.Name, 8083)
	body, err := httpGet("http://" + addr + "/status")
	if err != nil {
		t.Fatalf("reading the gateway's status: %v", err)
	}
	var st gatewayReport
	if err := jsonUnmarshal(body, &st); err != nil {
		t.Fatalf("the gateway's status %q: %v", body, err)
	}
	return st
}

// expectNoNetworkLeft waits until c has no Tunnel, gateway object, fabric
// route or rule, in the API and on its node.
func expectNoNetworkLeft(ctx context.Context, t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	waitFor(ctx, t, 2*time.Minute, "no network left on "+c.Name, func(ctx context.Context) (bool, string) {
		var left []string
		var tunnels offloadv1alpha1.TunnelList
		if err := ctrlClient(t, c).List(ctx, &tunnels, client.InNamespace(localcluster.InstallNamespace)); err != nil {
			return false, err.Error()
		}
		for _, tn := range tunnels.Items {
			left = append(left, "Tunnel "+tn.Name)
		}
		sel := metav1.ListOptions{LabelSelector: offloadv1alpha1.LabelComponent + "=" + offloadv1alpha1.ComponentGateway}
		if l, err := c.Kube.AppsV1().Deployments(localcluster.InstallNamespace).List(ctx, sel); err == nil && len(l.Items) > 0 {
			left = append(left, "gateway Deployment "+l.Items[0].Name)
		}
		if l, err := c.Kube.CoreV1().Services(localcluster.InstallNamespace).List(ctx, sel); err == nil && len(l.Items) > 0 {
			left = append(left, "gateway Service "+l.Items[0].Name)
		}
		if l, err := c.Kube.CoreV1().Secrets(localcluster.InstallNamespace).List(ctx, sel); err == nil && len(l.Items) > 0 {
			left = append(left, "gateway Secret "+l.Items[0].Name)
		}
		if l, err := c.Kube.CoreV1().ServiceAccounts(localcluster.InstallNamespace).List(ctx, sel); err == nil && len(l.Items) > 0 {
			left = append(left, "gateway ServiceAccount "+l.Items[0].Name)
		}
		if l, err := c.Kube.RbacV1().Roles(localcluster.InstallNamespace).List(ctx, sel); err == nil && len(l.Items) > 0 {
			left = append(left, "gateway Role "+l.Items[0].Name)
		}
		for _, n := range c.RealNodes() {
			routes, err := nodeFabricRoutes(n.NetNS)
			if err != nil {
				return false, err.Error()
			}
			if routes != "" {
				left = append(left, n.Name+" routes "+routes)
			}
			if err := netlab.InNetNS(n.NetNS, func() error {
				tables, err := (&nftables.Conn{}).ListTables()
				if slices.ContainsFunc(tables, func(tb *nftables.Table) bool { return tb.Name == "offload-fabric" }) {
					left = append(left, n.Name+" nftables table offload-fabric")
				}
				return err
			}); err != nil {
				return false, err.Error()
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
}

// nodeFabricRoutes are the routes the fabric added in network namespace
// netns (protocol 0x6f, in any table) and the rules to its table, one per
// line.
func nodeFabricRoutes(netns string) (string, error) {
	var out []string
	for _, args := range [][]string{{"route", "show", "table", "all", "proto", "0x6f"}, {"rule", "show", "table", fmt.Sprint(routing.RouteTable)}} {
		b, err := exec.Command("ip", append([]string{"-n", netns}, args...)...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, b)
		}
		if s := strings.TrimSpace(string(b)); s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, "\n"), nil
}
