package doctor

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/status"
	"github.com/kubectl-offload/kubectl-offload/internal/status/statustest"
)

// daemonSet returns a DaemonSet in namespace ns whose pods tolerate
// tolerations, with annotations and, when off is set, the node affinity
// that keeps it off virtual nodes.
func daemonSet(ns, name string, annotations map[string]string, off bool, tolerations ...corev1.Toleration) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Tolerations: tolerations,
				Containers: []corev1.Container{{Name: "agent", Image: "agent"}}},
		}},
	}
	if off {
		ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: offloadv1alpha1.LabelType, Operator: corev1.NodeSelectorOpNotIn, Values: []string{offloadv1alpha1.TypeVirtualNode}}},
			}}},
		}}
	}
	return ds
}

var (
	tolerateAll      = corev1.Toleration{Operator: corev1.TolerationOpExists}
	tolerateNoExec   = corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
	tolerateVirtual  = corev1.Toleration{Key: offloadv1alpha1.TaintVirtualNode, Operator: corev1.TolerationOpEqual, Value: "true"}
	tolerateNoSched  = corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	tolerateMaster   = corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists}
	excludedByAgent  = map[string]string{offloadv1alpha1.AnnotationVirtualNodesExcluded: "true"}
	allowedOnVirtual = map[string]string{offloadv1alpha1.AnnotationVirtualNodes: offloadv1alpha1.VirtualNodesAllowed}
)

func TestDaemonSetInterferes(t *testing.T) {
	tests := []struct {
		name string
		ds   *appsv1.DaemonSet
		want bool
	}{
		{"tolerating every taint interferes", daemonSet("kube-system", "cni", nil, false, tolerateAll), true},
		{"tolerating every NoExecute taint interferes", daemonSet("kube-system", "logs", nil, false, tolerateNoExec), true},
		{"tolerating the virtual-node taint by name interferes", daemonSet("kube-system", "edge", nil, false, tolerateVirtual), true},
		{"tolerating only NoSchedule taints stays off", daemonSet("kube-system", "fabric", nil, false, tolerateNoSched), false},
		{"tolerating other taints stays off", daemonSet("kube-system", "proxy", nil, false, tolerateMaster), false},
		{"one the agent excluded stays off", daemonSet("kube-system", "cni", excludedByAgent, true, tolerateAll), false},
		{"one that opted in is meant to run there", daemonSet("kube-system", "cni", allowedOnVirtual, false, tolerateAll), false},
		{"its own node affinity keeps it off", daemonSet("kube-system", "cni", nil, true, tolerateAll), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := daemonSetInterferes(tt.ds, false); got != tt.want {
				t.Errorf("daemonSetInterferes = %t, want %t", got, tt.want)
			}
		})
	}
	// An untainted virtual node takes the pods of every DaemonSet, whatever
	// it tolerates.
	untainted := []struct {
		name string
		ds   *appsv1.DaemonSet
		want bool
	}{
		{"on an untainted virtual node, tolerating other taints interferes", daemonSet("kube-system", "proxy", nil, false, tolerateMaster), true},
		{"and so does tolerating nothing", daemonSet("kube-system", "plain", nil, false), true},
		{"one the agent excluded stays off", daemonSet("kube-system", "plain", excludedByAgent, true), false},
		{"one that opted in is meant to run there", daemonSet("kube-system", "plain", allowedOnVirtual, false), false},
		{"its own node affinity keeps it off", daemonSet("kube-system", "plain", nil, true), false},
	}
	for _, tt := range untainted {
		t.Run(tt.name, func(t *testing.T) {
			if got := daemonSetInterferes(tt.ds, true); got != tt.want {
				t.Errorf("daemonSetInterferes = %t, want %t", got, tt.want)
			}
		})
	}
}

// podRule intercepts ops on resources of the core group.
func podRule(resources []string, ops ...admissionregistrationv1.OperationType) []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{Operations: ops, Rule: admissionregistrationv1.Rule{
		APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: resources}}}
}

func TestWebhookInterferes(t *testing.T) {
	fail, ignore := admissionregistrationv1.Fail, admissionregistrationv1.Ignore
	pods := []string{"pods"}
	create, update, del := admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete
	notOffloaded := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: offloadv1alpha1.LabelOffloaded, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"}}}}
	tests := []struct {
		name     string
		rules    []admissionregistrationv1.RuleWithOperations
		policy   *admissionregistrationv1.FailurePolicyType
		selector *metav1.LabelSelector
		want     bool
	}{
		{"failing pod creation everywhere interferes", podRule(pods, create), &fail, nil, true},
		{"the default failure policy is Fail", podRule(pods, update), nil, nil, true},
		{"every operation on every resource interferes", podRule([]string{"*"}, admissionregistrationv1.OperationAll), &fail, nil, true},
		{"a selector on other labels does not exclude offloaded namespaces", podRule(pods, create), &fail,
			&metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}, true},
		{"a selector for offloaded namespaces interferes", podRule(pods, create), &fail,
			&metav1.LabelSelector{MatchLabels: map[string]string{offloadv1alpha1.LabelOffloaded: "true"}}, true},
		{"failure policy Ignore does not block", podRule(pods, create), &ignore, nil, false},
		{"deleting pods only does not interfere", podRule(pods, del), &fail, nil, false},
		{"other resources do not interfere", podRule([]string{"configmaps"}, create), &fail, nil, false},
		{"pod subresources alone do not interfere", podRule([]string{"pods/status"}, update), &fail, nil, false},
		{"excluding offloaded namespaces does not interfere", podRule(pods, create), &fail, notOffloaded, false},
		{"requiring the offloaded label to be absent does not interfere", podRule(pods, create), &fail,
			&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: offloadv1alpha1.LabelOffloaded, Operator: metav1.LabelSelectorOpDoesNotExist}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := webhookInterferes(tt.rules, tt.policy, tt.selector); got != tt.want {
				t.Errorf("webhookInterferes = %t, want %t", got, tt.want)
			}
		})
	}
}

func TestDoctorNamesInterferingDaemonSetsAndWebhooks(t *testing.T) {
	a := statustest.NewAPIServer(t)
	ctx := context.Background()
	statustest.Create(t, a.Client, daemonSet("doctor-ds", "cni", nil, false, tolerateAll))
	statustest.Create(t, a.Client, daemonSet("doctor-ds", "logs", nil, false, tolerateNoExec))
	statustest.Create(t, a.Client, daemonSet("doctor-ds", "kept-off", excludedByAgent, true, tolerateAll))
	statustest.Create(t, a.Client, daemonSet("doctor-ds", "edge", allowedOnVirtual, false, tolerateAll))
	statustest.Create(t, a.Client, daemonSet("doctor-ds", "plain", nil, false))

	t.Run("without virtual nodes no DaemonSet can interfere", func(t *testing.T) {
		if c := daemonSetsCheck(ctx, doctorEnv(t, a, nil)); c.Status != status.StatusOK {
			t.Errorf("daemonsets = %s %q, want ok", c.Status, c.Message)
		}
	})

	t.Run("with a virtual node the DaemonSets that would land there are named", func(t *testing.T) {
		statustest.Create(t, a.Client, statustest.VirtualNode("doctor-p", corev1.ConditionTrue))
		c := daemonSetsCheck(ctx, doctorEnv(t, a, nil))
		if c.Status != status.StatusWarning || !strings.Contains(c.Message, "DaemonSets doctor-ds/cni, doctor-ds/logs tolerate") || strings.Contains(c.Message, "kept-off") ||
			strings.Contains(c.Message, "edge") || strings.Contains(c.Message, "plain") || !strings.Contains(c.Message, "kubectl offload status") {
			t.Errorf("daemonsets = %s %q, want a warning naming doctor-ds/cni and doctor-ds/logs only", c.Status, c.Message)
		}
	})

	t.Run("with an untainted virtual node every DaemonSet that would land there is named", func(t *testing.T) {
		n := statustest.VirtualNode("doctor-untainted", corev1.ConditionTrue)
		n.Spec.Taints = nil
		statustest.Create(t, a.Client, n)
		c := daemonSetsCheck(ctx, doctorEnv(t, a, nil))
		if c.Status != status.StatusWarning || !strings.Contains(c.Message, "DaemonSets doctor-ds/cni, doctor-ds/logs, doctor-ds/plain are not kept off the virtual nodes, and one of those is untainted") ||
			strings.Contains(c.Message, "kept-off") || strings.Contains(c.Message, "edge") {
			t.Errorf("daemonsets = %s %q, want a warning naming doctor-ds/cni, doctor-ds/logs and doctor-ds/plain only", c.Status, c.Message)
		}
		if err := a.Client.Delete(ctx, n); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("webhooks that can block offloaded pods are named, kubectl-offload's own is not", func(t *testing.T) {
		// Every selector matches no namespace of the shared API server, so
		// that no other test's pods meet these webhooks; none rules out
		// offloaded namespaces but the last.
		fail, ignore := admissionregistrationv1.Fail, admissionregistrationv1.Ignore
		never := &metav1.LabelSelector{MatchLabels: map[string]string{"doctor.offload.io/never": "true"}}
		statustest.Create(t, a.Client, mutatingWebhook("policy-engine", nil, &fail, never))
		statustest.Create(t, a.Client, mutatingWebhook(ownWebhook, nil, &fail, never))
		statustest.Create(t, a.Client, mutatingWebhook("part-of-offload", map[string]string{offloadv1alpha1.PartOfLabel: offloadv1alpha1.PartOfValue}, &fail, never))
		statustest.Create(t, a.Client, mutatingWebhook("lenient", nil, &ignore, never))
		statustest.Create(t, a.Client, validatingWebhook("image-policy", &fail, never))
		statustest.Create(t, a.Client, validatingWebhook("not-offloaded", &fail, &metav1.LabelSelector{MatchLabels: never.MatchLabels, MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: offloadv1alpha1.LabelOffloaded, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"}}}}))
		c := webhooksCheck(ctx, doctorEnv(t, a, nil))
		want := "MutatingWebhookConfiguration policy-engine (webhook pods.policy-engine.example.com), ValidatingWebhookConfiguration image-policy (webhook pods.image-policy.example.com) intercept"
		if c.Status != status.StatusWarning || !strings.HasPrefix(c.Message, want) {
			t.Errorf("webhooks = %s %q, want a warning starting %q", c.Status, c.Message, want)
		}
	})
}

// webhookRules intercept creating and updating pods.
func webhookRules() []admissionregistrationv1.RuleWithOperations {
	return podRule([]string{"pods"}, admissionregistrationv1.Create, admissionregistrationv1.Update)
}

// mutatingWebhook is a configuration of one webhook on pods, served by a
// Service that does not exist.
func mutatingWebhook(name string, labels map[string]string, policy *admissionregistrationv1.FailurePolicyType, sel *metav1.LabelSelector) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "pods." + name + ".example.com", Rules: webhookRules(), FailurePolicy: policy, NamespaceSelector: sel,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "doctor", Name: "missing", Path: ptr.To("/mutate")}},
			SideEffects:  ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// validatingWebhook is like mutatingWebhook, for validation.
func validatingWebhook(name string, policy *admissionregistrationv1.FailurePolicyType, sel *metav1.LabelSelector) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "pods." + name + ".example.com", Rules: webhookRules(), FailurePolicy: policy, NamespaceSelector: sel,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "doctor", Name: "missing", Path: ptr.To("/validate")}},
			SideEffects:  ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
		}},
	}
}
