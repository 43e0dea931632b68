package charts_test

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

const rbPolicyName = "offload-controller-manager-rolebindings"

func binding(name, kind, role string, subject rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
		Subjects: []rbacv1.Subject{subject}}
}

func sa(ns, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
}

func TestTheControllerManagerBindsOnlyItsOwnRoleBindings(t *testing.T) {
	admin, err := kubernetes.NewForConfig(envtest.APIServer(t))
	if err != nil {
		t.Fatal(err)
	}
	agent := controllerManagerUnder(t, admin, rbPolicyName, func(ctx context.Context, agent kubernetes.Interface) error {
		_, err := agent.RbacV1().RoleBindings("kube-system").Create(ctx, binding("offload-reflection", "ClusterRole", "offload-reflection",
			sa("kube-system", "default")), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	release, err := agentRelease(t.Context(), agent)
	if err != nil {
		t.Fatal(err)
	}
	self := sa(release, offloadv1alpha1.ControllerManager)
	offloaded := newNamespace(t, admin, map[string]string{offloadv1alpha1.LabelOffloaded: "true"})
	plain := newNamespace(t, admin, nil)
	twin := newNamespace(t, admin, map[string]string{offloadv1alpha1.LabelTenant: "x", offloadv1alpha1.LabelOriginClusterID: "x"})
	consumer := sa(offloadv1alpha1.TenantNamespace("shop"), offloadv1alpha1.ConsumerServiceAccount)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	ctx := t.Context()

	for _, tc := range []struct {
		name string
		ns   string
		rb   *rbacv1.RoleBinding
	}{
		{"offload-reflection in a namespace that is not offloaded", plain, binding("offload-reflection", "ClusterRole", "offload-reflection", self)},
		{"offload-reflection in kube-system", "kube-system", binding("offload-reflection", "ClusterRole", "offload-reflection", self)},
		{"offload-reflection to another subject", offloaded, binding("offload-reflection", "ClusterRole", "offload-reflection", sa("kube-system", "default"))},
		{"offload-reflection under another name", offloaded, binding("mine", "ClusterRole", "offload-reflection", self)},
		{"offload-remote-workloads outside twin namespaces", plain, binding("offload-consumer", "ClusterRole", "offload-remote-workloads", consumer)},
		{"offload-remote-workloads to a subject outside tenant namespaces", twin, binding("offload-consumer", "ClusterRole", "offload-remote-workloads", sa("kube-system", "default"))},
		{"offload-reflection to itself in its own namespace", release, binding("offload-reflection", "ClusterRole", "offload-reflection", self)},
	} {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			_, err := agent.RbacV1().RoleBindings(tc.ns).Create(ctx, tc.rb, dry)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), rbPolicyName) {
				t.Fatalf("err = %v, want Forbidden by %s", err, rbPolicyName)
			}
		})
	}
	for _, tc := range []struct {
		name string
		ns   string
		rb   *rbacv1.RoleBinding
	}{
		{"offload-reflection to itself in an offloaded namespace", offloaded, binding("offload-reflection", "ClusterRole", "offload-reflection", self)},
		{"offload-remote-workloads to a consumer in a twin namespace", twin, binding("offload-consumer", "ClusterRole", "offload-remote-workloads", consumer)},
	} {
		t.Run(tc.name+" is admitted", func(t *testing.T) {
			if _, err := agent.RbacV1().RoleBindings(tc.ns).Create(ctx, tc.rb, dry); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestTheControllerManagerChangesOnlyTheCABundleOfItsWebhook(t *testing.T) {
	admin, err := kubernetes.NewForConfig(envtest.APIServer(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// The chart's ClusterRole names offload-webhook: the test's is unique.
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "offload-webhook"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "pods.offload.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "offload-system", Name: "offload-webhook", Path: ptr.To("/mutate")}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{offloadv1alpha1.LabelOffloaded: "true"}},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
		}}}
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), cfg.Name, metav1.DeleteOptions{})
	})
	hooks := func(ctx context.Context, c kubernetes.Interface) *admissionregistrationv1.MutatingWebhookConfiguration {
		got, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, cfg.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	const policy = "offload-controller-manager-webhook"
	agent := controllerManagerUnder(t, admin, policy, func(ctx context.Context, agent kubernetes.Interface) error {
		c := hooks(ctx, agent)
		c.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Fail)
		_, err := agent.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	dry := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	for name, change := range map[string]func(*admissionregistrationv1.MutatingWebhook){
		"its namespace selector": func(w *admissionregistrationv1.MutatingWebhook) { w.NamespaceSelector = &metav1.LabelSelector{} },
		"its service":            func(w *admissionregistrationv1.MutatingWebhook) { w.ClientConfig.Service.Name = "elsewhere" },
		"its rules": func(w *admissionregistrationv1.MutatingWebhook) {
			w.Rules[0].Operations = append(w.Rules[0].Operations, admissionregistrationv1.Update)
		},
	} {
		t.Run("changing "+name+" is refused", func(t *testing.T) {
			c := hooks(ctx, agent)
			change(&c.Webhooks[0])
			_, err := agent.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, c, dry)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), policy) {
				t.Fatalf("err = %v, want Forbidden by %s", err, policy)
			}
		})
	}
	t.Run("setting the caBundle is admitted", func(t *testing.T) {
		c := hooks(ctx, agent)
		c.Webhooks[0].ClientConfig.CABundle = []byte("-----BEGIN CERTIFICATE-----\n")
		if _, err := agent.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, c, dry); err != nil {
			t.Fatal(err)
		}
	})
}
