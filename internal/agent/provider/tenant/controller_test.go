package tenant_test

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/provider/tenant"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestMain(m *testing.M) { os.Exit(envtest.RunWithAPIServer(m)) }

const waitTimeout = 30 * time.Second

// newTenant creates a consumer's tenant as the auth service does: its
// namespace labelled for the consumer, the ServiceAccount and RoleBinding
// of its credentials, and the Tenant with the finalizer when withFinalizer.
func newTenant(t *testing.T, c client.Client, withFinalizer bool) *offloadv1alpha1.Tenant {
	t.Helper()
	ctx := t.Context()
	id := string(uuid.NewUUID())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "offload-tenant-" + rand.String(6), Labels: map[string]string{offloadv1alpha1.LabelTenant: id},
	}}
	objs := []client.Object{
		ns,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: ns.Name}},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.TenantRole, Namespace: ns.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: ns.Name}},
		},
	}
	tn := &offloadv1alpha1.Tenant{
		ObjectMeta: metav1.ObjectMeta{Name: "consumer-" + rand.String(6)},
		Spec:       offloadv1alpha1.TenantSpec{ClusterID: id, ClusterName: "consumer", TenantNamespace: ns.Name},
	}
	if withFinalizer {
		controllerutil.AddFinalizer(tn, offloadv1alpha1.FinalizerTenant)
	}
	for _, o := range append(objs, tn) {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), ns)
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(tn), tn); err == nil {
			tn.Finalizers = nil
			_ = c.Update(context.Background(), tn)
			_ = c.Delete(context.Background(), tn)
		}
	})
	return tn
}

func gone(ctx context.Context, c client.Client, o client.Object) bool {
	return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(o), o))
}

func TestDeletingATenantRevokesItsCredentialsAndDeletesItsNamespace(t *testing.T) {
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, c)
	envtest.StartManager(t, cfg, func(mgr ctrlmanager.Manager) error {
		return (&tenant.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
	})
	ctx := t.Context()

	// A Tenant made before the auth service added the finalizer gets it.
	old := newTenant(t, c, false)
	framework.Eventually(t, waitTimeout, "the controller adds the finalizer", func(ctx context.Context) bool {
		var got offloadv1alpha1.Tenant
		return c.Get(ctx, client.ObjectKeyFromObject(old), &got) == nil &&
			controllerutil.ContainsFinalizer(&got, offloadv1alpha1.FinalizerTenant)
	})

	tn := newTenant(t, c, true)
	ns := tn.Spec.TenantNamespace
	// Another consumer's namespace named as this tenant's is left alone.
	other := newTenant(t, c, true)
	var otherNS corev1.Namespace
	if err := c.Get(ctx, types.NamespacedName{Name: other.Spec.TenantNamespace}, &otherNS); err != nil {
		t.Fatal(err)
	}
	otherNS.Labels[offloadv1alpha1.LabelTenant] = "someone-else"
	if err := c.Update(ctx, &otherNS); err != nil {
		t.Fatal(err)
	}

	for _, x := range []*offloadv1alpha1.Tenant{tn, other} {
		if err := c.Delete(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, waitTimeout, "the Tenant is released", func(ctx context.Context) bool { return gone(ctx, c, tn) })
	if !gone(ctx, c, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.TenantRole, Namespace: ns}}) {
		t.Error("the consumer's RoleBinding is still there")
	}
	if !gone(ctx, c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: ns}}) {
		t.Error("the consumer's ServiceAccount is still there")
	}
	var got corev1.Namespace
	if err := c.Get(ctx, types.NamespacedName{Name: ns}, &got); err == nil && got.DeletionTimestamp.IsZero() {
		t.Error("the tenant namespace is not being deleted")
	}

	framework.Eventually(t, waitTimeout, "the other Tenant is released", func(ctx context.Context) bool { return gone(ctx, c, other) })
	if err := c.Get(ctx, types.NamespacedName{Name: other.Spec.TenantNamespace}, &got); err != nil || !got.DeletionTimestamp.IsZero() {
		t.Errorf("a namespace labelled for another consumer was deleted: %v, %v", got.DeletionTimestamp, err)
	}
}

func TestAConsumerGoneForGoodIsRemovedAfterItsCredentialsExpireAndTheGracePeriod(t *testing.T) {
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, c)
	envtest.StartManager(t, cfg, func(mgr ctrlmanager.Manager) error {
		return (&tenant.Reconciler{Client: mgr.GetClient(), AbandonedAfter: time.Hour}).SetupWithManager(mgr)
	})
	ctx := t.Context()
	setExpiry := func(tn *offloadv1alpha1.Tenant, at time.Time) {
		t.Helper()
		patch := client.MergeFrom(tn.DeepCopy())
		tn.Status.CredentialExpiry = &metav1.Time{Time: at}
		if err := c.Status().Patch(ctx, tn, patch); err != nil {
			t.Fatal(err)
		}
	}
	recent := newTenant(t, c, true)
	setExpiry(recent, time.Now().Add(-30*time.Minute))
	abandoned := newTenant(t, c, true)
	setExpiry(abandoned, time.Now().Add(-2*time.Hour))

	framework.Eventually(t, waitTimeout, "the abandoned tenant and its namespace are removed", func(ctx context.Context) bool {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: abandoned.Spec.TenantNamespace}}
		return gone(ctx, c, abandoned) && (gone(ctx, c, ns) || ns.DeletionTimestamp != nil)
	})
	if gone(ctx, c, recent) || !recent.DeletionTimestamp.IsZero() {
		t.Error("a tenant whose credentials expired within the grace period was removed")
	}
}
