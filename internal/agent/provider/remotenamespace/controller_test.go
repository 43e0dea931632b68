package remotenamespace

import (
	"context"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// ready serves a DefaultName request and checks it became Ready.
func (e *env) ready(tenant *offloadv1alpha1.Tenant) *offloadv1alpha1.RemoteNamespace {
	e.t.Helper()
	rn := e.request(tenant, "shop-"+rand.String(5), offloadv1alpha1.DefaultName)
	e.reconcile(rn)
	e.get(rn)
	if rn.Status.Phase != offloadv1alpha1.RemoteNamespaceReady {
		e.t.Fatalf("phase %q (%+v), want Ready", rn.Status.Phase, rn.Status.Conditions)
	}
	return rn
}

func (e *env) wantRefused(rn *offloadv1alpha1.RemoteNamespace, reason string) {
	e.t.Helper()
	e.get(rn)
	c := meta.FindStatusCondition(rn.Status.Conditions, offloadv1alpha1.ConditionReady)
	if rn.Status.Phase != offloadv1alpha1.RemoteNamespaceFailed || c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason {
		e.t.Errorf("status %+v, want phase Failed and Ready False for %s", rn.Status, reason)
	}
}

func TestADefaultNameRequestGetsANamespaceAQuotaFromTheOfferAndARoleBinding(t *testing.T) {
	e := newEnv(t)
	e.offer(e.tenant, "4", "8Gi", "110")
	rn := e.ready(e.tenant)

	ns := e.namespace(rn.Spec.TargetNamespace)
	if ns == nil {
		t.Fatalf("no twin namespace %s", rn.Spec.TargetNamespace)
	}
	if ns.Labels[offloadv1alpha1.LabelOriginClusterID] != e.tenant.Spec.ClusterID ||
		ns.Labels[offloadv1alpha1.LabelOriginNamespace] != rn.Spec.SourceNamespace ||
		ns.Labels[offloadv1alpha1.LabelTenant] != e.tenant.Spec.ClusterID {
		t.Errorf("twin namespace labels %v, want the consumer's ID, the source namespace and the tenant", ns.Labels)
	}
	var rb rbacv1.RoleBinding
	if err := e.c.Get(context.Background(), key(ns.Name, RoleBindingName), &rb); err != nil {
		t.Fatalf("no RoleBinding for the consumer: %v", err)
	}
	wantSubject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: e.tenant.Spec.TenantNamespace}
	if rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.Name != RemoteWorkloadsRole || len(rb.Subjects) != 1 || rb.Subjects[0] != wantSubject {
		t.Errorf("RoleBinding binds %+v to %+v, want ClusterRole %s to %+v", rb.RoleRef, rb.Subjects, RemoteWorkloadsRole, wantSubject)
	}
	var quota corev1.ResourceQuota
	if err := e.c.Get(context.Background(), key(ns.Name, QuotaName), &quota); err != nil {
		t.Fatalf("no ResourceQuota: %v", err)
	}
	want := corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("4"),
		corev1.ResourceRequestsMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
	maps.Copy(want, ObjectLimits)
	// A token Secret for each of the 110 pods, besides the 500 others.
	want[corev1.ResourceSecrets] = resource.MustParse("610")
	if !sameResources(quota.Spec.Hard, want) {
		t.Errorf("quota %v, want %v", quota.Spec.Hard, want)
	}
	var lr corev1.LimitRange
	if err := e.c.Get(context.Background(), key(ns.Name, LimitRangeName), &lr); err != nil {
		t.Errorf("no LimitRange giving containers zero requests: %v", err)
	}
	c := meta.FindStatusCondition(rn.Status.Conditions, offloadv1alpha1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != rn.Generation {
		t.Errorf("Ready condition %+v, want True for generation %d", c, rn.Generation)
	}
	if !controllerutil.ContainsFinalizer(rn, offloadv1alpha1.FinalizerRemoteNamespace) {
		t.Errorf("finalizers %v, want %s", rn.Finalizers, offloadv1alpha1.FinalizerRemoteNamespace)
	}
}

func TestReconcilingTwiceChangesNothing(t *testing.T) {
	e := newEnv(t)
	e.offer(e.tenant, "2", "4Gi", "20")
	rn := e.ready(e.tenant)
	target := rn.Spec.TargetNamespace
	objects := []client.Object{rn, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: target}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: RoleBindingName, Namespace: target}},
		&corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: QuotaName, Namespace: target}},
		&corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: LimitRangeName, Namespace: target}}}
	versions := func() []string {
		var v []string
		for _, o := range objects {
			if !e.get(o) {
				t.Fatalf("%T %s is gone", o, o.GetName())
			}
			v = append(v, o.GetResourceVersion())
		}
		return v
	}
	before := versions()
	e.reconcile(rn)
	after := versions()
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("%T %s changed (resourceVersion %s → %s)", objects[i], objects[i].GetName(), before[i], after[i])
		}
	}
}

func TestWithoutAnOfferTheRequestWaitsAndGrantsNothing(t *testing.T) {
	e := newEnv(t)
	rn := e.request(e.tenant, "shop-"+rand.String(5), offloadv1alpha1.DefaultName)
	if res := e.reconcile(rn); res.RequeueAfter == 0 {
		t.Errorf("a request waiting for the offer is not looked at again")
	}
	e.get(rn)
	if rn.Status.Phase != offloadv1alpha1.RemoteNamespacePending {
		t.Errorf("phase %q, want Pending", rn.Status.Phase)
	}
	if e.get(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: RoleBindingName, Namespace: rn.Spec.TargetNamespace}}) {
		t.Errorf("the consumer got a RoleBinding in a namespace without a quota")
	}
	e.offer(e.tenant, "1", "1Gi", "10")
	e.reconcile(rn)
	e.get(rn)
	if rn.Status.Phase != offloadv1alpha1.RemoteNamespaceReady {
		t.Errorf("phase %q once the offer is there, want Ready", rn.Status.Phase)
	}
}

func TestAnOfferChangeResizesTheQuota(t *testing.T) {
	e := newEnv(t)
	offer := e.offer(e.tenant, "4", "8Gi", "110")
	rn := e.ready(e.tenant)
	offer.Spec.Resources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"),
		corev1.ResourceMemory: resource.MustParse("2Gi"), corev1.ResourcePods: resource.MustParse("30")}
	if err := e.c.Update(context.Background(), offer); err != nil {
		t.Fatal(err)
	}
	e.reconcile(rn)
	var quota corev1.ResourceQuota
	if err := e.c.Get(context.Background(), key(rn.Spec.TargetNamespace, QuotaName), &quota); err != nil {
		t.Fatal(err)
	}
	if want := QuotaFor(offer.Spec.Resources, nil); !sameResources(quota.Spec.Hard, want) {
		t.Errorf("quota %v after the offer changed, want %v", quota.Spec.Hard, want)
	}
}

func TestEnforceSameNameFailsCleanlyWhenTheNamespaceBelongsToSomeoneElse(t *testing.T) {
	e := newEnv(t)
	e.offer(e.tenant, "4", "8Gi", "110")
	e.allowSameName(e.tenant)
	name := "shop-" + rand.String(5)
	e.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": "payments"}}})
	rn := e.request(e.tenant, name, offloadv1alpha1.EnforceSameName)
	e.reconcile(rn)
	e.wantRefused(rn, ReasonNamespaceTaken)

	ns := e.namespace(name)
	if len(ns.Labels) != 2 || ns.Labels["team"] != "payments" || len(ns.Annotations) != 0 {
		t.Errorf("the foreign namespace was changed: labels %v, annotations %v", ns.Labels, ns.Annotations)
	}
	for _, o := range []client.Object{
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: RoleBindingName, Namespace: name}},
		&corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: QuotaName, Namespace: name}},
	} {
		if e.get(o) {
			t.Errorf("%T %s was created in the foreign namespace", o, o.GetName())
		}
	}

	// Withdrawing the request leaves the foreign namespace alone.
	if err := e.c.Delete(context.Background(), rn); err != nil {
		t.Fatal(err)
	}
	e.reconcile(rn)
	if e.get(rn) {
		t.Errorf("the RemoteNamespace is kept: finalizers %v", rn.Finalizers)
	}
	if ns := e.namespace(name); ns == nil || !ns.DeletionTimestamp.IsZero() {
		t.Errorf("the foreign namespace was deleted")
	}
}

func TestARequestThatCannotBeServedFails(t *testing.T) {
	e := newEnv(t)
	e.r.Reserved = []string{"payments-prod"}
	e.allowSameName(e.tenant)
	e.offer(e.tenant, "4", "8Gi", "110")
	other := e.newTenant("99999999-2222-4333-8444-" + rand.String(12))
	sameName := func(ns string) func(*offloadv1alpha1.RemoteNamespace) {
		return func(rn *offloadv1alpha1.RemoteNamespace) { rn.Spec.SourceNamespace, rn.Spec.TargetNamespace = ns, ns }
	}
	for _, tc := range []struct {
		name     string
		strategy offloadv1alpha1.NamespaceMappingStrategy
		mutate   func(*offloadv1alpha1.RemoteNamespace)
	}{
		{"a consumer asks for another consumer", offloadv1alpha1.EnforceSameName, func(rn *offloadv1alpha1.RemoteNamespace) { rn.Spec.ConsumerClusterID = other.Spec.ClusterID }},
		{"a consumer asks with an unknown ID", offloadv1alpha1.EnforceSameName, func(rn *offloadv1alpha1.RemoteNamespace) { rn.Spec.ConsumerClusterID = "not-a-peer" }},
		{"the same name is kube-system", offloadv1alpha1.EnforceSameName, sameName("kube-system")},
		{"the same name is a new kube- namespace", offloadv1alpha1.EnforceSameName, sameName("kube-" + rand.String(5))},
		{"the same name is default", offloadv1alpha1.EnforceSameName, sameName("default")},
		{"the same name is the install namespace", offloadv1alpha1.EnforceSameName, sameName(installNamespace)},
		{"the same name is another tenant's namespace", offloadv1alpha1.EnforceSameName, sameName(other.Spec.TenantNamespace)},
		{"the same name is an add-on's namespace", offloadv1alpha1.EnforceSameName, sameName("cert-manager")},
		{"the same name is one the provider reserved", offloadv1alpha1.EnforceSameName, sameName("payments-prod")},
		{"EnforceSameName asks for another name than the source's", offloadv1alpha1.EnforceSameName, func(rn *offloadv1alpha1.RemoteNamespace) { rn.Spec.TargetNamespace = "app-" + rand.String(5) }},
		{"DefaultName asks for default", offloadv1alpha1.DefaultName, func(rn *offloadv1alpha1.RemoteNamespace) { rn.Spec.TargetNamespace = "default" }},
		{"DefaultName asks for a name of its own", offloadv1alpha1.DefaultName, func(rn *offloadv1alpha1.RemoteNamespace) { rn.Spec.TargetNamespace = "mine-" + rand.String(5) }},
		{"DefaultName asks for another consumer's twin namespace", offloadv1alpha1.DefaultName, func(rn *offloadv1alpha1.RemoteNamespace) {
			rn.Spec.TargetNamespace = offloadv1alpha1.TwinNamespace(rn.Spec.SourceNamespace, other.Spec.ClusterName, other.Spec.ClusterID)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.t = t
			rn := e.request(e.tenant, "app-"+rand.String(5), tc.strategy, tc.mutate)
			e.reconcile(rn)
			e.wantRefused(rn, ReasonInvalidRequest)
			if ns := e.namespace(rn.Spec.TargetNamespace); ns != nil && ns.Labels[offloadv1alpha1.LabelOriginClusterID] != "" {
				t.Errorf("namespace %s was labelled for a consumer: %v", ns.Name, ns.Labels)
			}
			if e.get(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: RoleBindingName, Namespace: rn.Spec.TargetNamespace}}) {
				t.Errorf("the consumer got a RoleBinding in namespace %s", rn.Spec.TargetNamespace)
			}
		})
	}
}

func TestEnforceSameNameIsTheProvidersToAllow(t *testing.T) {
	e := newEnv(t)
	e.offer(e.tenant, "4", "8Gi", "110")
	rn := e.request(e.tenant, "shop-"+rand.String(5), offloadv1alpha1.EnforceSameName)
	e.reconcile(rn)
	e.wantRefused(rn, ReasonInvalidRequest)
	if e.namespace(rn.Spec.TargetNamespace) != nil {
		t.Fatalf("namespace %s was created though the provider does not allow same-name namespaces", rn.Spec.TargetNamespace)
	}
	e.allowSameName(e.tenant)
	e.reconcile(rn)
	if e.get(rn); rn.Status.Phase != offloadv1alpha1.RemoteNamespaceReady {
		t.Errorf("phase %q once allowed, want Ready", rn.Status.Phase)
	}
}

func TestATwinNamespaceBelongsToItsTenantNotToTheClusterIDItStates(t *testing.T) {
	e := newEnv(t)
	e.allowSameName(e.tenant)
	e.offer(e.tenant, "4", "8Gi", "110")
	rn := e.request(e.tenant, "shop-"+rand.String(5), offloadv1alpha1.EnforceSameName)
	e.reconcile(rn)
	e.get(rn)
	if rn.Status.Phase != offloadv1alpha1.RemoteNamespaceReady {
		t.Fatalf("phase %q, want Ready", rn.Status.Phase)
	}
	// A second tenant that claims the first one's cluster ID (the auth
	// service refuses this; here it is made by hand) asks for its namespace.
	impostor := e.newTenant(e.tenant.Spec.ClusterID)
	e.allowSameName(impostor)
	e.offer(impostor, "4", "8Gi", "110")
	theft := e.request(impostor, rn.Spec.SourceNamespace, offloadv1alpha1.EnforceSameName)
	e.reconcile(theft)
	e.wantRefused(theft, ReasonNamespaceTaken)
	var rb rbacv1.RoleBinding
	if err := e.c.Get(context.Background(), key(rn.Spec.TargetNamespace, RoleBindingName), &rb); err != nil {
		t.Fatal(err)
	}
	if len(rb.Subjects) != 1 || rb.Subjects[0].Namespace != e.tenant.Spec.TenantNamespace {
		t.Errorf("the RoleBinding binds %+v, want only the first tenant's ServiceAccount", rb.Subjects)
	}
	// Withdrawing the impostor's request leaves the namespace alone.
	if err := e.c.Delete(context.Background(), theft); err != nil {
		t.Fatal(err)
	}
	e.reconcile(theft)
	if ns := e.namespace(rn.Spec.TargetNamespace); ns == nil || !ns.DeletionTimestamp.IsZero() {
		t.Errorf("the first tenant's namespace was deleted by the impostor's request")
	}
}

func TestDeletingTheRequestDeletesTheTwinNamespaceThenReleasesIt(t *testing.T) {
	e := newEnv(t)
	e.offer(e.tenant, "4", "8Gi", "110")
	rn := e.ready(e.tenant)
	target := rn.Spec.TargetNamespace
	if err := e.c.Delete(context.Background(), rn); err != nil {
		t.Fatal(err)
	}
	if res := e.reconcile(rn); res.RequeueAfter == 0 {
		t.Errorf("the controller does not look again while the twin namespace goes")
	}
	if !e.get(rn) {
		t.Fatal("the RemoteNamespace went before its twin namespace")
	}
	if rn.Status.Phase != offloadv1alpha1.RemoteNamespaceTerminating {
		t.Errorf("phase %q, want Terminating", rn.Status.Phase)
	}
	if ns := e.namespace(target); ns == nil || ns.DeletionTimestamp.IsZero() {
		t.Fatalf("the twin namespace %s is not being deleted", target)
	}
	// envtest runs no namespace controller: finish the deletion by hand.
	e.finalizeNamespace(target)
	e.reconcile(rn)
	if e.get(rn) {
		t.Errorf("the RemoteNamespace is kept after its twin namespace went: finalizers %v", rn.Finalizers)
	}
}
