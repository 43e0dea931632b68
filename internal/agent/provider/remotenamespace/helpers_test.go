package remotenamespace

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestMain(m *testing.M) { os.Exit(envtest.RunWithAPIServer(m)) }

const installNamespace = "offload-system"

// env is one provider API server seen by a test, with one consumer peered.
type env struct {
	t      *testing.T
	cfg    *rest.Config
	c      client.Client
	r      *Reconciler
	tenant *offloadv1alpha1.Tenant
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, c)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: RemoteWorkloadsRole}, Rules: RemoteWorkloadsRules()}
	if err := c.Create(context.Background(), role); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	e := &env{t: t, cfg: cfg, c: c, r: &Reconciler{Client: c, APIReader: c, Namespace: installNamespace}}
	e.tenant = e.newTenant("11111111-2222-4333-8444-" + rand.String(12))
	return e
}

// newTenant peers a consumer the way the auth service does: a Tenant, its
// namespace and its ServiceAccount.
func (e *env) newTenant(id string) *offloadv1alpha1.Tenant {
	e.t.Helper()
	name := "consumer-" + rand.String(6)
	ns := offloadv1alpha1.TenantNamespace(name)
	tenant := &offloadv1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: offloadv1alpha1.TenantSpec{ClusterID: id, ClusterName: name, TenantNamespace: ns}}
	e.create(tenant)
	e.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{offloadv1alpha1.LabelTenant: id}}})
	e.create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: ns}})
	return tenant
}

func (e *env) create(o client.Object) {
	e.t.Helper()
	if err := e.c.Create(context.Background(), o); err != nil {
		e.t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
	}
}

// offer publishes the provider's ResourceOffer in the tenant namespace.
func (e *env) offer(tenant *offloadv1alpha1.Tenant, cpu, memory, pods string) *offloadv1alpha1.ResourceOffer {
	e.t.Helper()
	o := &offloadv1alpha1.ResourceOffer{ObjectMeta: metav1.ObjectMeta{Name: "provider", Namespace: tenant.Spec.TenantNamespace},
		Spec: offloadv1alpha1.ResourceOfferSpec{ClusterID: "provider-id", ClusterName: "provider", Resources: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory), corev1.ResourcePods: resource.MustParse(pods)}}}
	e.create(o)
	return o
}

// request creates the RemoteNamespace a consumer's agent would create for
// namespace source.
func (e *env) request(tenant *offloadv1alpha1.Tenant, source string, strategy offloadv1alpha1.NamespaceMappingStrategy, mutate ...func(*offloadv1alpha1.RemoteNamespace)) *offloadv1alpha1.RemoteNamespace {
	e.t.Helper()
	target := source
	if strategy == offloadv1alpha1.DefaultName {
		target = offloadv1alpha1.TwinNamespace(source, tenant.Spec.ClusterName, tenant.Spec.ClusterID)
	}
	rn := &offloadv1alpha1.RemoteNamespace{ObjectMeta: metav1.ObjectMeta{Name: source, Namespace: tenant.Spec.TenantNamespace},
		Spec: offloadv1alpha1.RemoteNamespaceSpec{ConsumerClusterID: tenant.Spec.ClusterID, SourceNamespace: source,
			TargetNamespace: target, MappingStrategy: strategy}}
	for _, m := range mutate {
		m(rn)
	}
	e.create(rn)
	return rn
}

func (e *env) reconcile(rn *offloadv1alpha1.RemoteNamespace) ctrl.Result {
	e.t.Helper()
	res, err := e.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rn)})
	if err != nil {
		e.t.Fatalf("reconciling %s/%s: %v", rn.Namespace, rn.Name, err)
	}
	return res
}

// get reads o again; it reports false when o is gone.
func (e *env) get(o client.Object) bool {
	e.t.Helper()
	err := e.c.Get(context.Background(), client.ObjectKeyFromObject(o), o)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return true
}

func (e *env) namespace(name string) *corev1.Namespace {
	e.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if !e.get(ns) {
		return nil
	}
	return ns
}

// finalizeNamespace does what the namespace controller, which envtest does
// not run, does last: it clears the namespace's finalizers so it goes.
func (e *env) finalizeNamespace(name string) {
	e.t.Helper()
	cs, err := kubernetes.NewForConfig(e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ns := e.namespace(name)
	ns.Spec.Finalizers = nil
	if _, err := cs.CoreV1().Namespaces().Finalize(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if e.namespace(name) != nil {
		e.t.Fatalf("namespace %s is still there after its finalization", name)
	}
}

func key(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

// allowSameName lets tenant name its twin namespaces as its own namespaces.
func (e *env) allowSameName(tenant *offloadv1alpha1.Tenant) {
	e.t.Helper()
	e.get(tenant)
	patch := client.MergeFrom(tenant.DeepCopy())
	tenant.Spec.Policy.SameNameNamespaces = true
	if err := e.c.Patch(context.Background(), tenant, patch); err != nil {
		e.t.Fatal(err)
	}
}
