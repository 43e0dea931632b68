package remotenamespace

import (
	"context"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

func TestTheTwinNamespacesOfAConsumerWithoutTenantAreDeleted(t *testing.T) {
	e := newEnv(t)
	e.offer(e.tenant, "4", "8Gi", "110")
	gone := e.ready(e.tenant)
	stays := e.newTenant("77777777-2222-4333-8444-" + rand.String(12))
	e.offer(stays, "4", "8Gi", "110")
	kept := e.ready(stays)
	unrelated := otherNamespace(e)

	if err := e.c.Delete(context.Background(), e.tenant); err != nil {
		t.Fatal(err)
	}
	gc := &GarbageCollector{Client: e.c, Reader: e.c}
	if _, err := gc.Reconcile(context.Background(), gcRequest); err != nil {
		t.Fatal(err)
	}
	if ns := e.namespace(gone.Spec.TargetNamespace); ns != nil && ns.DeletionTimestamp.IsZero() {
		t.Errorf("the twin namespace %s of the removed consumer is not being deleted", ns.Name)
	}
	for _, name := range []string{kept.Spec.TargetNamespace, unrelated} {
		if ns := e.namespace(name); ns == nil || !ns.DeletionTimestamp.IsZero() {
			t.Errorf("namespace %s, which has nothing to do with the removed consumer, is being deleted", name)
		}
	}
}

func otherNamespace(e *env) string {
	e.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other-" + rand.String(6)}}
	e.create(ns)
	return ns.Name
}

func TestTheConsumerMayRunPodsInItsTwinNamespaceOnly(t *testing.T) {
	e := newEnv(t)
	e.offer(e.tenant, "4", "8Gi", "110")
	rn := e.ready(e.tenant)
	other := otherNamespace(e)
	user := "system:serviceaccount:" + e.tenant.Spec.TenantNamespace + ":" + offloadv1alpha1.ConsumerServiceAccount
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + e.tenant.Spec.TenantNamespace, "system:authenticated"}
	for _, tc := range []struct {
		name    string
		attrs   authorizationv1.ResourceAttributes
		allowed bool
	}{
		{"create pods in its twin namespace", authorizationv1.ResourceAttributes{Namespace: rn.Spec.TargetNamespace, Verb: "create", Resource: "pods"}, true},
		{"exec into pods in its twin namespace", authorizationv1.ResourceAttributes{Namespace: rn.Spec.TargetNamespace, Verb: "create", Resource: "pods", Subresource: "exec"}, true},
		{"create secrets in its twin namespace", authorizationv1.ResourceAttributes{Namespace: rn.Spec.TargetNamespace, Verb: "create", Resource: "secrets"}, true},
		{"create pods in another namespace", authorizationv1.ResourceAttributes{Namespace: other, Verb: "create", Resource: "pods"}, false},
		{"create pods in kube-system", authorizationv1.ResourceAttributes{Namespace: "kube-system", Verb: "create", Resource: "pods"}, false},
		{"change the quota of its twin namespace", authorizationv1.ResourceAttributes{Namespace: rn.Spec.TargetNamespace, Verb: "update", Resource: "resourcequotas"}, false},
		{"change its RoleBinding", authorizationv1.ResourceAttributes{Namespace: rn.Spec.TargetNamespace, Verb: "update", Group: "rbac.authorization.k8s.io", Resource: "rolebindings"}, false},
		{"delete its twin namespace", authorizationv1.ResourceAttributes{Verb: "delete", Resource: "namespaces", Name: rn.Spec.TargetNamespace}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attrs := tc.attrs
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups, ResourceAttributes: &attrs}}
			if err := e.c.Create(context.Background(), sar); err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed != tc.allowed {
				t.Errorf("allowed = %v, want %v (%s)", sar.Status.Allowed, tc.allowed, sar.Status.Reason)
			}
		})
	}
}
