package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// The chapters of this file run in
// TestOffloadedPodsRunInTheProvidersTwinNamespace (offload_test.go) and
// TestCompatibility (compat_test.go).

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
func createDaemonSet(ctx context.Context, t testing.TB, c *framework.Cluster, ns string, ds *appsv1.DaemonSet) {
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
func rolledOut(t *testing.T, c *framework.Cluster, ns, name string) {
	t.Helper()
	if out, err := kubectl(t, c, "-n", ns, "rollout", "status", "daemonset/"+name, "--timeout", "90s"); err != nil {
		t.Errorf("kubectl rollout status daemonset %s/%s: %v\n%s", ns, name, err, out)
	}
}

// daemonPodsOn lists the nodes the pods of DaemonSet ns/name are bound to.
func daemonPodsOn(ctx context.Context, t *testing.T, c *framework.Cluster, ns, name string) []string {
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

// preexistingDaemonSet is made in kube-system before the consumer peers, as
// a CNI agent would be.
const preexistingDaemonSet = "node-agent"

// expectDaemonSetsStayOffVirtualNodes checks, on a consumer peered with
// provider, that DaemonSets whose pods tolerate every taint (made before
// the peering in kube-system, and now in the offloaded namespace work)
// get no pod on the virtual node, none in the twin namespace, and roll out;
// and that one opting in runs on the virtual node, in the provider.
func expectDaemonSetsStayOffVirtualNodes(ctx context.Context, t *testing.T, scope testing.TB, consumer, provider *framework.Cluster, twin string) {
	t.Helper()
	virtual := offloadv1alpha1.VirtualNodeName(provider.Name)
	// The DaemonSets live as long as scope, the test: a later chapter
	// (expectDaemonSetsBackOnEveryNode) finds them again after unpeer.
	createDaemonSet(ctx, scope, consumer, "work", everywhere("logs", nil))
	createDaemonSet(ctx, scope, consumer, "work", everywhere("edge", map[string]string{offloadv1alpha1.AnnotationVirtualNodes: offloadv1alpha1.VirtualNodesAllowed}))
	for _, ds := range []struct{ ns, name string }{{metav1.NamespaceSystem, preexistingDaemonSet}, {"work", "logs"}, {"work", "edge"}} {
		rolledOut(t, consumer, ds.ns, ds.name)
	}
	for _, ds := range []struct{ ns, name string }{{metav1.NamespaceSystem, preexistingDaemonSet}, {"work", "logs"}} {
		nodes := daemonPodsOn(ctx, t, consumer, ds.ns, ds.name)
		if len(nodes) != 2 || strings.Contains(strings.Join(nodes, ","), virtual) {
			t.Errorf("DaemonSet %s/%s has pods on %v; want one on each of the consumer's two nodes, none on %s", ds.ns, ds.name, nodes, virtual)
		}
		got, err := consumer.Kube.AppsV1().DaemonSets(ds.ns).Get(ctx, ds.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.DesiredNumberScheduled != 2 {
			t.Errorf("DaemonSet %s/%s wants %d pods; want 2: the virtual node is not one of its nodes", ds.ns, ds.name, got.Status.DesiredNumberScheduled)
		}
	}
	if nodes := daemonPodsOn(ctx, t, consumer, "work", "edge"); len(nodes) != 3 || !strings.Contains(strings.Join(nodes, ","), virtual) {
		t.Errorf("the opted-in DaemonSet has pods on %v; want one on every node, the virtual node too", nodes)
	}
	remote, err := provider.Kube.CoreV1().Pods(twin).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var apps []string
	for _, p := range remote.Items {
		apps = append(apps, p.Labels["app"])
	}
	if all := strings.Join(apps, ","); strings.Contains(all, "logs") || !strings.Contains(all, "edge") {
		t.Errorf("the twin namespace holds pods of %v; want the opted-in edge's, and none of logs", apps)
	}
}

// expectDaemonSetsBackOnEveryNode checks that once the consumer has no
// virtual node, the DaemonSets the agent kept off them are as they were.
func expectDaemonSetsBackOnEveryNode(ctx context.Context, t *testing.T, consumer *framework.Cluster) {
	t.Helper()
	for _, ds := range []struct{ ns, name string }{{metav1.NamespaceSystem, preexistingDaemonSet}, {"work", "logs"}} {
		waitFor(ctx, t, time.Minute, fmt.Sprintf("DaemonSet %s/%s back as it was", ds.ns, ds.name), func(ctx context.Context) (bool, string) {
			got, err := consumer.Kube.AppsV1().DaemonSets(ds.ns).Get(ctx, ds.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			_, marked := got.Annotations[offloadv1alpha1.AnnotationVirtualNodesExcluded]
			return !marked && got.Spec.Template.Spec.Affinity == nil, fmt.Sprintf("annotations %v, affinity %+v", got.Annotations, got.Spec.Template.Spec.Affinity)
		})
	}
}
