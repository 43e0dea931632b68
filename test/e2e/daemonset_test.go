package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// The chapters of this file run in
// TestOffloadedPodsRunInTheProvidersTwinNamespace (offload_test.go).

// preexistingDaemonSet is made in kube-system before the consumer peers, as
// a CNI agent would be.
const preexistingDaemonSet = "node-agent"

// expectDaemonSetsStayOffVirtualNodes checks, on a consumer peered with
// provider, that DaemonSets whose pods tolerate every taint (made before
// the peering in kube-system, and now in the offloaded namespace work)
// get no pod on the virtual node, none in the twin namespace, and roll out;
// and that one opting in runs on the virtual node, in the provider.
func expectDaemonSetsStayOffVirtualNodes(ctx context.Context, t *testing.T, scope testing.TB, consumer, provider *localcluster.Cluster, twin string) {
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
func expectDaemonSetsBackOnEveryNode(ctx context.Context, t *testing.T, consumer *localcluster.Cluster) {
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
