package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// expectNotOffloaded checks that namespace ns of c has no NamespaceOffloading.
func expectNotOffloaded(ctx context.Context, t *testing.T, c client.Client, ns string) {
	t.Helper()
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: offloadv1alpha1.NamespaceOffloadingName}, &offloadv1alpha1.NamespaceOffloading{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s has a NamespaceOffloading (err=%v)", ns, err)
	}
}

func TestANamespaceSpansItsProviderAndUnoffloadRemovesTheTwin(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The provider lets this consumer keep its namespaces' names, and lends
	// it GPUs.
	pair := peeredClustersWith(ctx, t,
		localcluster.ClusterOptions{Name: "consumer", FakeNodes: 1, RealNode: true},
		localcluster.ClusterOptions{Name: "provider", FakeNodes: 2, RealNode: true},
		[]string{"--allow-same-name-namespaces", "--extended-resource", string(lentGPU)})
	consumer, provider := pair.Consumer, pair.Provider
	cc, pc := ctrlClient(t, consumer), ctrlClient(t, provider)

	// The chapters, each a subtest that reports on its own. A chapter that
	// leaves what the next ones need stops the test when it fails; the
	// others let the rest run.

	// Bad input: a clear error, and nothing is written.
	t.Run("bad input writes nothing", func(t *testing.T) {
		if _, errOut, err := offload(t, consumer, "namespace", "missing"); err == nil || !strings.Contains(errOut, `namespace "missing" not found`) {
			t.Errorf("offloading a missing namespace: err=%v, stderr %q", err, errOut)
		}
		createNamespace(ctx, t, cc, "demo")
		if _, errOut, err := offload(t, consumer, "namespace", "demo", "--selector", "offload.io/remote-cluster-id=nobody"); err == nil || !strings.Contains(errOut, "offload-provider") {
			t.Errorf("offloading with a selector no peer matches: err=%v, stderr %q; want the error to list the virtual nodes", err, errOut)
		}
		expectNotOffloaded(ctx, t, cc, "demo")
	})

	// The twin namespace on the provider, with the consumer's RoleBinding and the offer's quota.
	var twin string
	if !t.Run("the twin namespace gets the RoleBinding and the quota", func(t *testing.T) {
		start := time.Now()
		mustOffload(t, consumer, "namespace", "demo", "--timeout", "2m")
		t.Logf("namespace demo offloaded, twin namespace Ready: %s", time.Since(start).Round(time.Millisecond))
		twin = offloadv1alpha1.TwinNamespace("demo", consumer.Name, identity(ctx, t, consumer)["clusterID"])
		var no offloadv1alpha1.NamespaceOffloading
		if err := cc.Get(ctx, client.ObjectKey{Namespace: "demo", Name: offloadv1alpha1.NamespaceOffloadingName}, &no); err != nil {
			t.Fatal(err)
		}
		if len(no.Status.RemoteNamespaces) != 1 || no.Status.RemoteNamespaces[0].RemoteNamespace != twin ||
			no.Status.RemoteNamespaces[0].Phase != offloadv1alpha1.RemoteNamespaceReady {
			t.Errorf("NamespaceOffloading status %+v, want twin namespace %s Ready", no.Status.RemoteNamespaces, twin)
		}
		var ns corev1.Namespace
		if err := pc.Get(ctx, client.ObjectKey{Name: twin}, &ns); err != nil {
			t.Fatalf("no twin namespace %s on the provider: %v", twin, err)
		}
		if ns.Labels[offloadv1alpha1.LabelOriginNamespace] != "demo" {
			t.Errorf("twin namespace labels %v", ns.Labels)
		}
		var quotas corev1.ResourceQuotaList
		if err := pc.List(ctx, &quotas, client.InNamespace(twin)); err != nil || len(quotas.Items) != 1 || len(quotas.Items[0].Spec.Hard) == 0 {
			t.Errorf("twin namespace %s: quotas %+v (err=%v), want one from the offer", twin, quotas.Items, err)
		}
		var bindings rbacv1.RoleBindingList
		if err := pc.List(ctx, &bindings, client.InNamespace(twin)); err != nil || len(bindings.Items) != 1 ||
			bindings.Items[0].RoleRef.Name != "offload-remote-workloads" || len(bindings.Items[0].Subjects) != 1 ||
			bindings.Items[0].Subjects[0].Name != offloadv1alpha1.ConsumerServiceAccount {
			t.Errorf("twin namespace %s: RoleBindings %+v (err=%v), want one for the consumer", twin, bindings.Items, err)
		}
		if err := cc.Get(ctx, client.ObjectKey{Name: "demo"}, &ns); err != nil || ns.Labels[offloadv1alpha1.LabelOffloaded] != "true" {
			t.Errorf("namespace demo is not labelled %s=true: %v %v", offloadv1alpha1.LabelOffloaded, ns.Labels, err)
		}
	}) {
		t.FailNow()
	}
	// Running it again changes nothing.
	t.Run("offloading again changes nothing", func(t *testing.T) {
		if out := mustOffload(t, consumer, "namespace", "demo", "--timeout", "1m"); !strings.Contains(out, "unchanged") {
			t.Errorf("offloading again printed %q, want unchanged", out)
		}
	})

	// The offer is one budget for all the consumer's twin namespaces.
	t.Run("one budget for all twin namespaces", func(t *testing.T) {
		createNamespace(ctx, t, cc, "extra")
		mustOffload(t, consumer, "namespace", "extra", "--timeout", "2m")
		expectOneBudget(ctx, t, consumer, provider, twin, offloadv1alpha1.TwinNamespace("extra", consumer.Name, identity(ctx, t, consumer)["clusterID"]))
		mustOffload(t, consumer, "unoffload", "namespace", "extra", "--timeout", "2m")
	})

	// The scheduling webhook: pods of demo may go to the virtual node,
	// DaemonSet pods never do.
	t.Run("the scheduling mutation", func(t *testing.T) {
		expectSchedulingWebhook(ctx, t, consumer, "demo")
		expectSchedulingMutation(ctx, t, consumer)
	})

	// The GPUs the provider lends: offered, in the quota, placed.
	t.Run("lent GPUs are offered, budgeted and placed", func(t *testing.T) {
		expectLentDevices(ctx, t, consumer, provider, "demo", twin)
	})

	// EnforceSameName refuses a name taken on the provider, and leaves that namespace alone.
	t.Run("EnforceSameName refuses a taken name", func(t *testing.T) {
		createNamespace(ctx, t, pc, "taken")
		createNamespace(ctx, t, cc, "taken")
		if _, errOut, err := offload(t, consumer, "namespace", "taken", "--namespace-mapping-strategy", "EnforceSameName", "--timeout", "1m"); err == nil || !strings.Contains(errOut, "already exists on the provider") {
			t.Errorf("EnforceSameName over a taken name: err=%v, stderr %q", err, errOut)
		}
		mustOffload(t, consumer, "unoffload", "namespace", "taken", "--timeout", "1m")
		var ns corev1.Namespace
		if err := pc.Get(ctx, client.ObjectKey{Name: "taken"}, &ns); err != nil || ns.DeletionTimestamp != nil {
			t.Errorf("the provider's own namespace taken was touched: %v %v", err, ns.DeletionTimestamp)
		}
	})

	// unoffload removes the twin namespace and the label.
	t.Run("unoffload removes the twin namespace and the label", func(t *testing.T) {
		start := time.Now()
		mustOffload(t, consumer, "unoffload", "namespace", "demo", "--timeout", "2m")
		t.Logf("unoffload namespace demo: %s", time.Since(start).Round(time.Millisecond))
		if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(pc.Get(ctx, client.ObjectKey{Name: twin}, &corev1.Namespace{})), nil
		}); err != nil {
			t.Errorf("twin namespace %s is left on the provider", twin)
		}
		expectNotOffloaded(ctx, t, cc, "demo")
		var ns corev1.Namespace
		if err := cc.Get(ctx, client.ObjectKey{Name: "demo"}, &ns); err != nil || ns.Labels[offloadv1alpha1.LabelOffloaded] != "" {
			t.Errorf("namespace demo keeps label %s after unoffload: %v %v", offloadv1alpha1.LabelOffloaded, ns.Labels, err)
		}
		var remotes offloadv1alpha1.RemoteNamespaceList
		if err := pc.List(ctx, &remotes); err != nil || len(remotes.Items) != 0 {
			t.Errorf("RemoteNamespaces left on the provider: %v (err=%v)", remotes.Items, err)
		}
	})
}

// expectSchedulingWebhook checks that pods created in the offloaded
// namespace ns get the virtual-node toleration with unlimited unreachable
// tolerations, and that DaemonSet pods there do not.
func expectSchedulingWebhook(ctx context.Context, t *testing.T, c *localcluster.Cluster, ns string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.local/offload/pause:test"}}}}
	// The agent's webhook serves once its certificate is in the caBundle,
	// the API server applies a new MutatingAdmissionPolicy a moment after
	// it is written; until then pods are admitted unchanged (failurePolicy
	// Ignore).
	var got *corev1.Pod
	var lastErr error
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		got, lastErr = p, err
		return err == nil && tolerates(p, "offload.io/virtual-node"), nil
	}); err != nil {
		t.Fatalf("a pod created in offloaded namespace %s never got the virtual-node toleration (last error: %v): %+v", ns, lastErr, got)
	}
	for _, tol := range got.Spec.Tolerations {
		if (tol.Key == corev1.TaintNodeUnreachable || tol.Key == corev1.TaintNodeNotReady) && tol.TolerationSeconds != nil {
			t.Errorf("toleration %+v: want no time limit by default", tol)
		}
	}
	labels := map[string]string{"app": "everywhere"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "everywhere", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec}}}
	if _, err := c.Kube.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods *corev1.PodList
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		pods, err = c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=everywhere"})
		return err == nil && len(pods.Items) >= 2, nil
	}); err != nil {
		t.Fatalf("the DaemonSet made no pods")
	}
	for _, p := range pods.Items {
		if tolerates(&p, "offload.io/virtual-node") || strings.HasPrefix(p.Spec.NodeName, "offload-") {
			t.Errorf("DaemonSet pod %s tolerates the virtual node or runs on it (node %q)", p.Name, p.Spec.NodeName)
		}
	}
	if err := c.Kube.AppsV1().DaemonSets(ns).Delete(ctx, ds.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
