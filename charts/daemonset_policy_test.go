package charts_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/daemonset"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

const daemonSetPolicyName = "offload-controller-manager-daemonsets"

// tolerateAll is a DaemonSet whose pods tolerate every taint, as CNI
// agents do, with a node affinity term of its own when own is set.
func tolerateAll(name string, own bool) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"team": "net"}},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers:  []corev1.Container{{Name: "agent", Image: "cni:v1"}},
				},
			},
		},
	}
	if own {
		ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}}},
				{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"special"}}}},
			}},
		}}
	}
	return ds
}

func TestTheControllerManagerChangesDaemonSetsOnlyToKeepThemOffVirtualNodes(t *testing.T) {
	admin, err := kubernetes.NewForConfig(envtest.APIServer(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ns := newNamespace(t, admin, nil)
	create := func(ds *appsv1.DaemonSet) *appsv1.DaemonSet {
		t.Helper()
		created, err := admin.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	plain, own := create(tolerateAll("plain", false)), create(tolerateAll("own", true))
	dryUpdate := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	update := func(agent kubernetes.Interface, base *appsv1.DaemonSet, change func(*appsv1.DaemonSet)) error {
		ds := base.DeepCopy()
		change(ds)
		_, err := agent.AppsV1().DaemonSets(ns).Update(ctx, ds, dryUpdate)
		return err
	}
	image := func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "evil:latest" }
	agent := controllerManagerUnder(t, admin, daemonSetPolicyName, func(ctx context.Context, agent kubernetes.Interface) error {
		return update(agent, plain, image)
	})

	refused := []struct {
		name   string
		base   *appsv1.DaemonSet
		change func(*appsv1.DaemonSet)
	}{
		{"another image", plain, image},
		{"another ServiceAccount", plain, func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.ServiceAccountName = "admin" }},
		{"host networking", plain, func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.HostNetwork = true }},
		{"a privileged container", plain, func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: new(true)}
		}},
		{"a hostPath volume", plain, func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}},
		{"other tolerations", plain, func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Tolerations = nil }},
		{"a node affinity keeping it off every node", plain, func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nowhere", Operator: corev1.NodeSelectorOpExists}}}}}}}
		}},
		{"dropping the DaemonSet's own affinity term", own, func(ds *appsv1.DaemonSet) {
			terms := &ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			*terms = (*terms)[:1]
		}},
		{"a term of the requirement alone next to the DaemonSet's own terms (widening it)", own, func(ds *appsv1.DaemonSet) {
			terms := &ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			*terms = append(*terms, corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: offloadv1alpha1.LabelType, Operator: corev1.NodeSelectorOpNotIn, Values: []string{offloadv1alpha1.TypeVirtualNode}}}})
		}},
		{"a template label", plain, func(ds *appsv1.DaemonSet) { ds.Spec.Template.Labels["x"] = "y" }},
		{"a template annotation", plain, func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/agent": "unconfined"}
		}},
		{"another annotation of the DaemonSet", plain, func(ds *appsv1.DaemonSet) { ds.Annotations["team"] = "other" }},
		{"a label of the DaemonSet", plain, func(ds *appsv1.DaemonSet) { ds.Labels = map[string]string{"x": "y"} }},
		{"its update strategy", plain, func(ds *appsv1.DaemonSet) { ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType }},
	}
	for _, tc := range refused {
		t.Run("changing "+tc.name+" is refused", func(t *testing.T) {
			err := update(agent, tc.base, tc.change)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), daemonSetPolicyName) {
				t.Fatalf("err = %v, want Forbidden by %s", err, daemonSetPolicyName)
			}
		})
	}
	t.Run("creating or deleting a DaemonSet is refused", func(t *testing.T) {
		_, err := agent.AppsV1().DaemonSets(ns).Create(ctx, tolerateAll("new", false), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) {
			t.Errorf("create: err = %v, want Forbidden", err)
		}
		err = agent.AppsV1().DaemonSets(ns).Delete(ctx, plain.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) {
			t.Errorf("delete: err = %v, want Forbidden", err)
		}
	})

	// What the agent does is admitted: keeping each DaemonSet off virtual
	// nodes, and letting it back once there are none.
	for _, base := range []*appsv1.DaemonSet{plain, own} {
		t.Run("keeping "+base.Name+" off virtual nodes, and letting it back, is admitted", func(t *testing.T) {
			excluded := base.DeepCopy()
			if !daemonset.Reconcile(excluded, daemonset.VirtualNodes{Expected: true}) {
				t.Fatal("Reconcile changed nothing")
			}
			stored, err := agent.AppsV1().DaemonSets(ns).Update(ctx, excluded, metav1.UpdateOptions{})
			if err != nil {
				t.Fatalf("excluding: %v", err)
			}
			if !daemonset.Reconcile(stored, daemonset.VirtualNodes{}) {
				t.Fatal("Reconcile changed nothing")
			}
			back, err := agent.AppsV1().DaemonSets(ns).Update(ctx, stored, metav1.UpdateOptions{})
			if err != nil {
				t.Fatalf("letting it back: %v", err)
			}
			if !apiequality.Semantic.DeepEqual(back.Spec.Template.Spec, base.Spec.Template.Spec) {
				t.Errorf("the template after letting it back differs from the original:\n%+v\nwant\n%+v", back.Spec.Template.Spec.Affinity, base.Spec.Template.Spec.Affinity)
			}
		})
	}
}
