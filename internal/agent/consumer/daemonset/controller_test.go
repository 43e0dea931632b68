package daemonset

import (
	"context"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestMain(m *testing.M) { os.Exit(envtest.RunWithAPIServer(m)) }

// storedDaemonSet is a DaemonSet of pods tolerating every taint, with a
// selector and labels the API server accepts.
func storedDaemonSet(name string, annotations map[string]string) *appsv1.DaemonSet {
	ds := daemonSet([]corev1.Toleration{everyTaint}, annotations, nil)
	ds.Name, ds.Namespace = name, ""
	labels := map[string]string{"app": name}
	ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	ds.Spec.Template.Labels = labels
	return ds
}

func excluded(ctx context.Context, c client.Client, key client.ObjectKey) bool {
	ds := &appsv1.DaemonSet{}
	if err := c.Get(ctx, key, ds); err != nil {
		return false
	}
	return ds.Annotations[offloadv1alpha1.AnnotationVirtualNodesExcluded] == "true" && ds.Spec.Template.Spec.Affinity != nil
}

// One API server, so one test: virtual nodes and peers are cluster-wide.
func TestTheControllerKeepsDaemonSetsOffVirtualNodesWhileThereAreAny(t *testing.T) {
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, c)
	ctx := t.Context()
	ns := envtest.NewNamespace(t, c, "ds")
	create := func(o client.Object) {
		t.Helper()
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	before := storedDaemonSet("before", nil)
	before.Namespace = ns
	create(before)
	optedIn := storedDaemonSet("opted-in", map[string]string{offloadv1alpha1.AnnotationVirtualNodes: offloadv1alpha1.VirtualNodesAllowed})
	optedIn.Namespace = ns
	create(optedIn)
	envtest.StartManager(t, cfg, func(mgr ctrlmanager.Manager) error {
		return (&Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
	})

	// A peer asking for a virtual node is enough, before the node exists.
	fc := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "provider-" + rand.String(5)},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: string(uuid.NewUUID()), ClusterName: "provider", OutgoingPeering: offloadv1alpha1.OutgoingPeering{Enabled: true}}}
	create(fc)
	framework.Eventually(t, 30*time.Second, "the DaemonSet made before the peering kept off virtual nodes", func(ctx context.Context) bool {
		return excluded(ctx, c, client.ObjectKeyFromObject(before))
	})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.VirtualNodeName(fc.Name),
		Labels: map[string]string{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{offloadv1alpha1.VirtualNodeTaint()}}}
	create(node)

	// A DaemonSet that tolerates nothing stays out of the tainted virtual
	// node by itself; while the node is untainted it is kept off too.
	plain := storedDaemonSet("plain", nil)
	plain.Namespace = ns
	plain.Spec.Template.Spec.Tolerations = nil
	create(plain)
	setTaints := func(taints ...corev1.Taint) {
		t.Helper()
		patch := client.MergeFrom(node.DeepCopy())
		node.Spec.Taints = taints
		if err := c.Patch(ctx, node, patch); err != nil {
			t.Fatal(err)
		}
	}
	setTaints()
	framework.Eventually(t, 30*time.Second, "a DaemonSet that tolerates nothing kept off the untainted virtual node", func(ctx context.Context) bool {
		return excluded(ctx, c, client.ObjectKeyFromObject(plain))
	})
	setTaints(offloadv1alpha1.VirtualNodeTaint())
	framework.Eventually(t, 30*time.Second, "the DaemonSet that tolerates nothing let back once the virtual node is tainted again", func(ctx context.Context) bool {
		got := &appsv1.DaemonSet{}
		return c.Get(ctx, client.ObjectKeyFromObject(plain), got) == nil &&
			got.Annotations[offloadv1alpha1.AnnotationVirtualNodesExcluded] == "" && got.Spec.Template.Spec.Affinity == nil
	})
	if err := c.Delete(ctx, fc); err != nil {
		t.Fatal(err)
	}
	after := storedDaemonSet("after", nil)
	after.Namespace = ns
	create(after)
	framework.Eventually(t, 30*time.Second, "a DaemonSet made while a virtual node exists kept off virtual nodes", func(ctx context.Context) bool {
		return excluded(ctx, c, client.ObjectKeyFromObject(after))
	})

	// The last virtual node goes: every DaemonSet is what it was.
	if err := c.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	for _, ds := range []*appsv1.DaemonSet{before, after} {
		framework.Eventually(t, 30*time.Second, "DaemonSet "+ds.Name+" let back onto every node", func(ctx context.Context) bool {
			got := &appsv1.DaemonSet{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(ds), got); err != nil {
				return false
			}
			_, marked := got.Annotations[offloadv1alpha1.AnnotationVirtualNodesExcluded]
			return !marked && got.Spec.Template.Spec.Affinity == nil
		})
	}
	got := &appsv1.DaemonSet{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(optedIn), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Template.Spec.Affinity != nil || got.Generation != 1 {
		t.Errorf("the opted-in DaemonSet was changed: generation %d, affinity %+v", got.Generation, got.Spec.Template.Spec.Affinity)
	}
}
