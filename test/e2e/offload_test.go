package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

func TestOffloadedPodsRunInTheProvidersTwinNamespace(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// The provider has only its real node, so every remote pod really runs.
	consumer, provider := peerableClustersWith(ctx, t,
		localcluster.ClusterOptions{Name: "consumer", FakeNodes: 1, RealNode: true, APIServerArgs: shortTolerationArgs, MetricsServer: true},
		localcluster.ClusterOptions{Name: "provider", RealNode: true, MetricsServer: true, Storage: true})
	// A DaemonSet that tolerates every taint, there before the peering.
	createDaemonSet(ctx, t, consumer, metav1.NamespaceSystem, everywhere(preexistingDaemonSet, nil))
	if errOut, err := outOfBand(t, consumer, generate(t, provider, storageArgs...), "--timeout", "2m"); err != nil {
		t.Fatalf("peer out-of-band: %v\n%s", err, errOut)
	}
	cc := ctrlClient(t, consumer)
	consumerID := identity(ctx, t, consumer)["clusterID"]
	createNamespace(ctx, t, cc, "work")
	mustOffload(t, consumer, "namespace", "work", "--pod-offloading-strategy", "Remote", "--timeout", "2m")
	twin := offloadv1alpha1.TwinNamespace("work", consumer.Name, consumerID)
	if !regexp.MustCompile(`^work-consumer-[0-9a-f]{6}$`).MatchString(twin) {
		t.Errorf("twin namespace %q does not read NS-<consumer>-<hash6>", twin)
	}

	// Remote: every replica runs on the virtual node, as a pod of the twin
	// namespace on the provider's real node, and is Ready on the consumer.
	start := time.Now()
	// From before the pods exist, every address the consumer shows them
	// with: none may be the provider's own before the translation is known
	// (both clusters use 10.244.0.0/16, so it may be a consumer pod's).
	shown := watchShownIPs(ctx, t, consumer, "work", "app=web")
	if _, err := consumer.Kube.AppsV1().Deployments("work").Create(ctx, offloadedApp("web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	local := waitPodsReady(ctx, t, consumer, "work", "app=web", 2)
	t.Logf("2 offloaded replicas Ready on the consumer: %s", time.Since(start).Round(time.Millisecond))
	for _, p := range local {
		if p.Spec.NodeName != "offload-provider" {
			t.Errorf("pod %s runs on %q, want the virtual node offload-provider", p.Name, p.Spec.NodeName)
		}
	}
	remote := waitPodsReady(ctx, t, provider, twin, "app=web", 2)
	if ok, why := samePods(local, remote); !ok {
		t.Errorf("the remote pods do not reflect the consumer pods: %s", why)
	}
	for _, r := range remote {
		if r.Spec.NodeName != provider.Node.Name || r.Labels[offloadv1alpha1.LabelOriginClusterID] != consumerID {
			t.Errorf("remote pod %s: node %q, labels %v", r.Name, r.Spec.NodeName, r.Labels)
		}
	}
	// The network fabric is on (install detected both pod CIDRs, the
	// same 10.244.0.0/16), so the consumer sees each pod's provider IP in
	// its view of the provider's pods, once the tunnel is up.
	waitFor(ctx, t, 2*time.Minute, "the consumer seeing the offloaded pods' IPs in its view", func(ctx context.Context) (bool, string) {
		var tunnel offloadv1alpha1.Tunnel
		if err := cc.Get(ctx, client.ObjectKey{Namespace: localcluster.InstallNamespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, "provider")}, &tunnel); err != nil {
			return false, err.Error()
		}
		if len(tunnel.Spec.Mappings) == 0 {
			return false, "the tunnel has no view of the provider's pods yet"
		}
		addrs := reflection.AddressesOf(&tunnel)
		for _, r := range remote {
			p, err := consumer.Kube.CoreV1().Pods("work").Get(ctx, r.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if want := addrs.ConsumerIP(r.Status.PodIP); p.Status.PodIP != want || want == r.Status.PodIP {
				return false, fmt.Sprintf("pod %s: consumer sees %q, the provider %q, want %q", p.Name, p.Status.PodIP, r.Status.PodIP, want)
			}
		}
		return true, ""
	})
	expectNoBorrowedAddress(ctx, t, consumer, shown)

	// status shows the virtual node and the offloaded namespace, healthy.
	report, code := offloadStatus(t, consumer)
	if code != 0 || report.checkStatus("virtualNodes", "node/offload-provider") != "ok" ||
		report.checkStatus("offloadedNamespaces", "namespace/work/provider") != "ok" {
		t.Errorf("kubectl offload status: exit %d, virtual node %q, namespace work %q; failures %v", code,
			report.checkStatus("virtualNodes", "node/offload-provider"), report.checkStatus("offloadedNamespaces", "namespace/work/provider"), report.failures())
	}

	// logs and exec through the consumer's API server and the virtual
	// node's kubelet API reach the container on the provider's real node.
	pod := local[0].Name
	logs, err := kubectl(t, consumer, "-n", "work", "logs", pod)
	if err != nil || !strings.Contains(logs, "listening on") {
		t.Errorf("kubectl logs of an offloaded pod: err=%v, output %q; want the application's first line", err, logs)
	}
	if tail, err := kubectl(t, consumer, "-n", "work", "logs", pod, "--tail", "1"); err != nil || strings.Count(strings.TrimSpace(tail), "\n") != 0 {
		t.Errorf("kubectl logs --tail 1: err=%v, output %q; want one line", err, tail)
	}
	followLogs(t, consumer, "work", pod, "GET /healthz")
	out, err := kubectl(t, consumer, "-n", "work", "exec", pod, "--", "/testapp", "get", "http://127.0.0.1:8080/hostname")
	if err != nil || strings.TrimSpace(out) != pod {
		t.Errorf("kubectl exec in an offloaded pod: err=%v, output %q; want its host name %s", err, out, pod)
	}
	if _, err := kubectl(t, consumer, "-n", "work", "exec", pod, "--", "/testapp", "get", "http://127.0.0.1:1/"); err == nil {
		t.Errorf("kubectl exec of a failing command succeeded; want its exit code back")
	}

	addr := portForward(t, consumer, "work", "pod/"+pod, 8080)
	if body, err := httpGet("http://" + addr + "/hostname"); err != nil || strings.TrimSpace(body) != pod {
		t.Errorf("kubectl port-forward to an offloaded pod: err=%v, body %q; want its host name %s", err, body, pod)
	}

	// Only what offloaded pods reference leaves the consumer: a Secret no pod
	// uses stays. A ConfigMap labelled offload.io/reflect=true goes anyway,
	// and follows: created and updated on the consumer, it reaches the twin
	// namespace, and once there it shows the Secret was seen and kept.
	private := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "local-only", Namespace: "work"}, StringData: map[string]string{"password": "s3cr3t"}}
	if _, err := consumer.Kube.CoreV1().Secrets("work").Create(ctx, private, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "work",
		Labels: map[string]string{offloadv1alpha1.LabelReflect: "true"}}, Data: map[string]string{"mode": "one"}}
	if _, err := consumer.Kube.CoreV1().ConfigMaps("work").Create(ctx, settings, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, time.Minute, "ConfigMap settings in the twin namespace", func(ctx context.Context) (bool, string) {
		cm, err := provider.Kube.CoreV1().ConfigMaps(twin).Get(ctx, "settings", metav1.GetOptions{})
		return err == nil && cm.Data["mode"] == "one", fmt.Sprint(err)
	})
	if _, err := provider.Kube.CoreV1().Secrets(twin).Get(ctx, private.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Secret %s, which no offloaded pod references, reached the provider: %v", private.Name, err)
	}
	settings.Data["mode"] = "two"
	if _, err := consumer.Kube.CoreV1().ConfigMaps("work").Update(ctx, settings, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	took := waitFor(ctx, t, time.Minute, "the ConfigMap update in the twin namespace", func(ctx context.Context) (bool, string) {
		cm, err := provider.Kube.CoreV1().ConfigMaps(twin).Get(ctx, "settings", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return cm.Data["mode"] == "two", cm.Data["mode"]
	})
	t.Logf("a ConfigMap update reached the twin namespace in %s", took.Round(time.Millisecond))
	if err := consumer.Kube.CoreV1().ConfigMaps("work").Delete(ctx, "settings", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, time.Minute, "the deleted ConfigMap to go from the twin namespace", func(ctx context.Context) (bool, string) {
		_, err := provider.Kube.CoreV1().ConfigMaps(twin).Get(ctx, "settings", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	// Deleting a consumer pod deletes its remote pod; the Deployment's
	// replacement is reflected.
	victim := local[0]
	if err := consumer.Kube.CoreV1().Pods("work").Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 2*time.Minute, "the remote pod of a deleted consumer pod to go", func(ctx context.Context) (bool, string) {
		_, err := provider.Kube.CoreV1().Pods(twin).Get(ctx, victim.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	local = waitPodsReady(ctx, t, consumer, "work", "app=web", 2)

	// A remote pod deleted behind the agent's back: the consumer pod is
	// reported Failed, and its controller replaces it.
	gone := local[0]
	if err := provider.Kube.CoreV1().Pods(twin).Delete(ctx, gone.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 2*time.Minute, "the consumer pod of a deleted remote pod to be Failed or replaced", func(ctx context.Context) (bool, string) {
		p, err := consumer.Kube.CoreV1().Pods("work").Get(ctx, gone.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodFailed, string(p.Status.Phase)
	})
	local = waitPodsReady(ctx, t, consumer, "work", "app=web", 2)

	// The agent restarts while a pod is deleted: the restarted agent
	// collects the orphan and creates nothing twice.
	scaleAgent(ctx, t, consumer, 0)
	expectSchedulingWhileTheAgentIsDown(ctx, t, consumer, "work")
	orphan := local[0]
	if err := consumer.Kube.CoreV1().Pods("work").Delete(ctx, orphan.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	scaleAgent(ctx, t, consumer, 1)
	waitFor(ctx, t, 3*time.Minute, "one remote pod per consumer pod after the agent restarted", func(ctx context.Context) (bool, string) {
		pods, err := consumer.Kube.CoreV1().Pods("work").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		live := pods.Items[:0]
		for _, p := range pods.Items {
			// Pods made while the agent was down run locally where the
			// scheduling mutation is its webhook.
			if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Spec.NodeName == "offload-provider" {
				live = append(live, p)
			}
		}
		return samePods(live, remotePods(ctx, t, provider, twin, consumerID))
	})
	// A replacement made while the webhook was down runs locally; its own
	// replacement is offloaded again.
	pods, err := consumer.Kube.CoreV1().Pods("work").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "offload-provider" {
			if err := consumer.Kube.CoreV1().Pods("work").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The chapters, each a subtest that reports on its own; a failed one
	// does not hide the ones after it.
	t.Run("reflection", func(t *testing.T) { expectReflected(ctx, t, consumer, provider, twin, consumerID, "app=web", 2) })
	t.Run("kubectl top", func(t *testing.T) { expectKubectlTop(ctx, t, consumer, provider, twin, "app=web") })
	t.Run("a partition", func(t *testing.T) {
		expectPodsSurviveAPartition(ctx, t, consumer, provider, twin, consumerID, "app=web", 2)
	})
	t.Run("the provider refuses unsafe pods", func(t *testing.T) {
		expectProviderRefusesUnsafePods(ctx, t, consumer, provider, twin, consumerID)
	})
	t.Run("workloads", func(t *testing.T) { expectWorkloads(ctx, t, consumer, provider, twin, consumerID) })
	scope := t
	t.Run("DaemonSets stay off virtual nodes", func(t *testing.T) {
		expectDaemonSetsStayOffVirtualNodes(ctx, t, scope, consumer, provider, twin)
	})
	t.Run("remote failures shown", func(t *testing.T) { expectRemoteFailuresShown(ctx, t, consumer, provider) })
	t.Run("metrics", func(t *testing.T) { expectMetrics(ctx, t, consumer, provider, "work", "metered") })
	t.Run("spec updates", func(t *testing.T) { expectSpecUpdatesReachTheRemotePod(ctx, t, consumer, provider, twin) })
	t.Run("kubectl debug", func(t *testing.T) { expectKubectlDebug(ctx, t, consumer, provider, "work", twin) })
	t.Run("in-place resize", func(t *testing.T) { expectInPlaceResize(ctx, t, consumer, provider, "work", twin) })
	t.Run("storage", func(t *testing.T) { expectStatefulSetStorage(ctx, t, consumer, provider, "work", twin) })
	t.Run("strategies", func(t *testing.T) { expectStrategies(ctx, t, consumer, cc) })
	t.Run("the provider chooses its nodes", func(t *testing.T) {
		expectTheProviderChoosesItsNodes(ctx, t, consumer, provider, twin, consumerID)
	})
	t.Run("unpeer ends one direction", func(t *testing.T) { expectUnpeerEndsOneDirection(ctx, t, consumer, provider, twin, consumerID) })
	t.Run("unoffload, and a revoked consumer", func(t *testing.T) {
		// unoffload removes the remote pods with the twin namespace.
		mustOffload(t, consumer, "unoffload", "namespace", "work", "--timeout", "2m")
		waitFor(ctx, t, 2*time.Minute, "the twin namespace and its pods to go", func(ctx context.Context) (bool, string) {
			_, err := provider.Kube.CoreV1().Namespaces().Get(ctx, twin, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		expectRevokedConsumerSaysUnauthorized(ctx, t, consumer, provider)
	})
	t.Run("unpeered, DaemonSets are back", func(t *testing.T) {
		mustOffload(t, consumer, "unpeer", provider.Name, "--timeout", "2m")
		expectDaemonSetsBackOnEveryNode(ctx, t, consumer)
	})
}

// followLogs runs kubectl logs -f on pod and waits until a line containing
// want streams in, which proves the logs follow rather than end.
func followLogs(t *testing.T, c *localcluster.Cluster, ns, pod, want string) {
	t.Helper()
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), "--kubeconfig", c.Kubeconfig, "-n", ns, "logs", "-f", "--since", "1s", pod)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if strings.Contains(sc.Text(), want) {
			return
		}
	}
	t.Errorf("kubectl logs -f %s/%s: no line with %q streamed within a minute (%v)", ns, pod, want, ctx.Err())
}

// expectWorkloads checks that Deployments scale and roll, StatefulSets keep
// their names and Jobs complete, unchanged, in the offloaded namespace work.
func expectWorkloads(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, twin, clusterID string) {
	t.Helper()
	deployments := consumer.Kube.AppsV1().Deployments("work")
	scale := func(n int32) { scaleDeployment(ctx, t, consumer, "work", "web", n) }
	scale(3)
	expectReflected(ctx, t, consumer, provider, twin, clusterID, "app=web", 3)
	scale(1)
	expectReflected(ctx, t, consumer, provider, twin, clusterID, "app=web", 1)

	// A rolling update replaces the pods, on the provider too.
	before, err := consumer.Kube.CoreV1().Pods("work").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	// The Deployment controller writes the status meanwhile: a conflict is
	// retried on the new version.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := deployments.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Env = append(d.Spec.Template.Spec.Containers[0].Env, corev1.EnvVar{Name: "RELEASE", Value: "2"})
		_, err = deployments.Update(ctx, d, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 3*time.Minute, "the rolling update to replace the pod", func(ctx context.Context) (bool, string) {
		list, err := consumer.Kube.CoreV1().Pods("work").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		live := onVirtualNode(list.Items)
		if len(live) != 1 || len(before.Items) == 0 || live[0].UID == before.Items[0].UID {
			return false, fmt.Sprintf("%d live pods", len(live))
		}
		for _, e := range live[0].Spec.Containers[0].Env {
			if e.Name == "RELEASE" {
				return true, ""
			}
		}
		return false, "the new pod has no RELEASE"
	})
	expectReflected(ctx, t, consumer, provider, twin, clusterID, "app=web", 1)
	var remote *corev1.Pod
	for _, r := range remotePods(ctx, t, provider, twin, clusterID) {
		if strings.HasPrefix(r.Name, "web-") && r.DeletionTimestamp == nil {
			remote = &r
		}
	}
	if remote == nil || len(remote.Spec.Containers[0].Env) == 0 || remote.Spec.Containers[0].Env[len(remote.Spec.Containers[0].Env)-1].Name != "RELEASE" {
		t.Errorf("the remote pod after the rolling update lacks the new environment: %+v", remote)
	}

	// A StatefulSet: stable names, and a deleted replica comes back under its name.
	labels := map[string]string{"app": "db"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "work"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            offloadedApp("db", 1).Spec.Template,
		},
	}
	sts.Spec.Template.Labels = labels
	if _, err := consumer.Kube.AppsV1().StatefulSets("work").Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectReflected(ctx, t, consumer, provider, twin, clusterID, "app=db", 2)
	old, err := consumer.Kube.CoreV1().Pods("work").Get(ctx, "db-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := consumer.Kube.CoreV1().Pods("work").Delete(ctx, "db-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 3*time.Minute, "db-0 to come back with a new remote pod", func(ctx context.Context) (bool, string) {
		p, err := consumer.Kube.CoreV1().Pods("work").Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil || p.UID == old.UID {
			return false, fmt.Sprint(err)
		}
		r, err := provider.Kube.CoreV1().Pods(twin).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return r.Labels[offloadv1alpha1.LabelOriginPodUID] == string(p.UID) && r.Status.Phase == corev1.PodRunning,
			fmt.Sprintf("remote db-0 of %s, %s", r.Labels[offloadv1alpha1.LabelOriginPodUID], r.Status.Phase)
	})
	if err := consumer.Kube.AppsV1().StatefulSets("work").Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// A Job runs to completion on the provider, and completes on the consumer.
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: "work"},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "once", Image: testAppImage, ImagePullPolicy: corev1.PullNever,
					Command: []string{"/testapp", "exit", "0"}}},
			}},
		},
	}
	if _, err := consumer.Kube.BatchV1().Jobs("work").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	took := waitFor(ctx, t, 3*time.Minute, "Job once to complete", func(ctx context.Context) (bool, string) {
		j, err := consumer.Kube.BatchV1().Jobs("work").Get(ctx, "once", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return j.Status.Succeeded == 1, fmt.Sprintf("active %d, succeeded %d, failed %d", j.Status.Active, j.Status.Succeeded, j.Status.Failed)
	})
	t.Logf("Job completed through the virtual node in %s", took.Round(time.Millisecond))
	pods, err := consumer.Kube.CoreV1().Pods("work").List(ctx, metav1.ListOptions{LabelSelector: "job-name=once"})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != "offload-provider" {
		t.Fatalf("the Job's pod: %+v (err=%v); want one, on the virtual node", pods, err)
	}
	if logs, err := kubectl(t, consumer, "-n", "work", "logs", pods.Items[0].Name); err != nil || !strings.Contains(logs, "exiting with 0") {
		t.Errorf("kubectl logs of the completed Job pod: err=%v, output %q", err, logs)
	}
}

// expectStrategies checks the Local and LocalAndRemote pod offloading
// strategies in namespaces of their own.
func expectStrategies(ctx context.Context, t *testing.T, consumer *localcluster.Cluster, cc client.Client) {
	t.Helper()
	// Local: the namespace spans the provider, but no pod goes there.
	createNamespace(ctx, t, cc, "stay")
	mustOffload(t, consumer, "namespace", "stay", "--pod-offloading-strategy", "Local", "--timeout", "2m")
	local := offloadedApp("web", 2)
	if _, err := consumer.Kube.AppsV1().Deployments("stay").Create(ctx, local, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range waitPodsRunning(ctx, t, consumer, "stay", "app=web", 2) {
		if p.Spec.NodeName == "offload-provider" {
			t.Errorf("Local strategy: pod %s runs on the virtual node", p.Name)
		}
	}

	// LocalAndRemote: a Deployment spread over every node lands on both sides.
	createNamespace(ctx, t, cc, "spread")
	mustOffload(t, consumer, "namespace", "spread", "--pod-offloading-strategy", "LocalAndRemote", "--timeout", "2m")
	nodes, err := consumer.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spread := offloadedApp("web", int32(len(nodes.Items)))
	spread.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
	}}
	if _, err := consumer.Kube.AppsV1().Deployments("spread").Create(ctx, spread, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	offloaded, kept := 0, 0
	for _, p := range waitPodsRunning(ctx, t, consumer, "spread", "app=web", len(nodes.Items)) {
		if p.Spec.NodeName == "offload-provider" {
			offloaded++
		} else {
			kept++
		}
	}
	if offloaded == 0 || kept == 0 {
		t.Errorf("LocalAndRemote with a spread over %d nodes: %d pods offloaded, %d local; want both", len(nodes.Items), offloaded, kept)
	}
	for _, ns := range []string{"stay", "spread"} {
		mustOffload(t, consumer, "unoffload", "namespace", ns, "--timeout", "2m")
	}
}

// expectSchedulingWhileTheAgentIsDown checks, while c's agent is down, what
// a pod created in the offloaded namespace ns gets: the offloading
// toleration where the scheduling mutation is the MutatingAdmissionPolicy,
// which the API server evaluates itself; nothing where it is the agent's
// webhook (failurePolicy Ignore: the pod is admitted as it is, and stays
// off virtual nodes).
func expectSchedulingWhileTheAgentIsDown(ctx context.Context, t *testing.T, c *localcluster.Cluster, ns string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "while-down", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.local/offload/pause:test"}}}}
	got, err := c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("creating a pod while the agent is down: %v", err)
	}
	if policy := schedulingPolicyServed(t, c); tolerates(got, offloadv1alpha1.TaintVirtualNode) != policy {
		t.Errorf("a pod created in %s while the agent is down tolerates the virtual node: %t; want %t (MutatingAdmissionPolicy served: %t)",
			ns, !policy, policy, policy)
	}
}
