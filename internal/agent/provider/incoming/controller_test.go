package incoming

import (
	"context"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/summary"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestMain(m *testing.M) { os.Exit(envtest.RunWithAPIServer(m)) }

// reconcile runs the incoming controller on name, then the summary
// controller, which writes the ForeignCluster's status from the Tenant.
func reconcile(t *testing.T, r *Reconciler, name string) {
	t.Helper()
	req := ctrl.Request{NamespacedName: types.NamespacedName{Name: name}}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatalf("reconcile %s: %v", name, err)
	}
	if _, err := (&summary.Reconciler{Client: r.Client, Namespace: "offload-system"}).Reconcile(context.Background(), req); err != nil {
		t.Fatalf("summarize %s: %v", name, err)
	}
}

// authenticated gives fc the PeeringCredentials the consumer's credentials
// controller reports in once the provider issued credentials.
func authenticated(t *testing.T, c client.Client, fc *offloadv1alpha1.ForeignCluster) {
	t.Helper()
	pc := &offloadv1alpha1.PeeringCredentials{ObjectMeta: metav1.ObjectMeta{Name: fc.Name},
		Spec: offloadv1alpha1.PeeringCredentialsSpec{SecretName: "offload-peer-" + fc.Name}}
	if err := controllerutil.SetControllerReference(fc, pc, c.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), pc); err != nil {
		t.Fatal(err)
	}
	pc.Status.Phase, pc.Status.Expiry = offloadv1alpha1.PhaseEstablished, &metav1.Time{Time: time.Now().Add(time.Hour)}
	if err := c.Status().Update(context.Background(), pc); err != nil {
		t.Fatal(err)
	}
}

func getFC(t *testing.T, c client.Client, name string) (*offloadv1alpha1.ForeignCluster, error) {
	t.Helper()
	var fc offloadv1alpha1.ForeignCluster
	err := c.Get(context.Background(), types.NamespacedName{Name: name}, &fc)
	return &fc, err
}

func newTenant(t *testing.T, c client.Client, name, id string) *offloadv1alpha1.Tenant {
	t.Helper()
	tenant := &offloadv1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: offloadv1alpha1.TenantSpec{ClusterID: id, ClusterName: name, TenantNamespace: "offload-tenant-" + name}}
	if err := c.Create(context.Background(), tenant); err != nil {
		t.Fatal(err)
	}
	return tenant
}

func TestATenantIsRecordedAsAnIncomingPeeringAndForgottenWithIt(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	r := &Reconciler{Client: c}
	name := "consumer-" + rand.String(5)
	const id = "11111111-2222-4333-8444-555555555555"
	tenant := newTenant(t, c, name, id)
	reconcile(t, r, name)
	fc, err := getFC(t, c, name)
	if err != nil {
		t.Fatalf("no ForeignCluster for the consumer: %v", err)
	}
	if fc.Spec.ClusterID != id || fc.Spec.OutgoingPeering.Enabled || fc.Labels[offloadv1alpha1.LabelIncomingOnly] != "true" {
		t.Errorf("ForeignCluster %+v, want the consumer's ID, no outgoing peering and the incoming-only label", fc)
	}
	if fc.Status.Role != offloadv1alpha1.RoleProvider || fc.Status.Incoming != offloadv1alpha1.PhaseEstablished ||
		!meta.IsStatusConditionTrue(fc.Status.Conditions, offloadv1alpha1.ConditionIncomingPeering) {
		t.Errorf("status %+v, want role Provider and incoming Established", fc.Status)
	}
	if err := c.Delete(context.Background(), tenant); err != nil {
		t.Fatal(err)
	}
	reconcile(t, r, name)
	if _, err := getFC(t, c, name); !apierrors.IsNotFound(err) {
		t.Errorf("the ForeignCluster of a removed tenant is left (err=%v)", err)
	}
}

func TestAConsumerThatIsAlsoAProviderKeepsItsForeignCluster(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	r := &Reconciler{Client: c}
	name := "both-" + rand.String(5)
	const id = "11111111-2222-4333-8444-666666666666"
	fc := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: id, ClusterName: name, OutgoingPeering: offloadv1alpha1.OutgoingPeering{Enabled: true}}}
	if err := c.Create(context.Background(), fc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), fc) })
	authenticated(t, c, fc)
	tenant := newTenant(t, c, name, id)
	reconcile(t, r, name)
	got, err := getFC(t, c, name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Role != offloadv1alpha1.RoleConsumerAndProvider || got.Status.Incoming != offloadv1alpha1.PhaseEstablished {
		t.Errorf("status %+v, want ConsumerAndProvider with incoming Established", got.Status)
	}
	if err := c.Delete(context.Background(), tenant); err != nil {
		t.Fatal(err)
	}
	reconcile(t, r, name)
	got, err = getFC(t, c, name)
	if err != nil {
		t.Fatalf("the consumer's own ForeignCluster was deleted with the tenant: %v", err)
	}
	if got.Status.Role != offloadv1alpha1.RoleConsumer || got.Status.Incoming != offloadv1alpha1.PhaseNone {
		t.Errorf("status %+v, want Consumer with incoming None", got.Status)
	}
}

func TestAForeignClusterOfAnotherClusterIsLeftAlone(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	r := &Reconciler{Client: c}
	name := "clash-" + rand.String(5)
	fc := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: "11111111-2222-4333-8444-777777777777", ClusterName: name}}
	if err := c.Create(context.Background(), fc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), fc) })
	newTenant(t, c, name, "11111111-2222-4333-8444-888888888888")
	reconcile(t, r, name)
	got, err := getFC(t, c, name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Incoming != "" || got.Status.Role != "" {
		t.Errorf("a ForeignCluster for another cluster got incoming status %+v", got.Status)
	}
}

func TestAPeerThatNeverConsumedThisClusterGetsNoIncomingCondition(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	r := &Reconciler{Client: c}
	name := "provider-" + rand.String(5)
	fc := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: "11111111-2222-4333-8444-777777777777", ClusterName: name, OutgoingPeering: offloadv1alpha1.OutgoingPeering{Enabled: true}}}
	if err := c.Create(context.Background(), fc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), fc) })
	reconcile(t, r, name)
	got, err := getFC(t, c, name)
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, offloadv1alpha1.ConditionIncomingPeering); c != nil {
		t.Errorf("IncomingPeering = %+v on a peer that never consumed this cluster, want none", c)
	}
}

func TestAConsumerWhoseForeignClusterWasDeletedIsRecordedAgain(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	r := &Reconciler{Client: c}
	name := "again-" + rand.String(5)
	const id = "11111111-2222-4333-8444-888888888888"
	fc := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: id, ClusterName: name, OutgoingPeering: offloadv1alpha1.OutgoingPeering{Enabled: true}}}
	if err := c.Create(context.Background(), fc); err != nil {
		t.Fatal(err)
	}
	newTenant(t, c, name, id)
	reconcile(t, r, name)
	// unpeer NAME ends the outgoing peering: the ForeignCluster goes.
	if err := c.Delete(context.Background(), fc); err != nil {
		t.Fatal(err)
	}
	reconcile(t, r, name)
	got, err := getFC(t, c, name)
	if err != nil {
		t.Fatalf("the consumer of this cluster is no longer recorded: %v", err)
	}
	if got.Labels[offloadv1alpha1.LabelIncomingOnly] != "true" || !meta.IsStatusConditionTrue(got.Status.Conditions, offloadv1alpha1.ConditionIncomingPeering) {
		t.Errorf("ForeignCluster %+v, want an incoming-only record with IncomingPeering True", got)
	}
}
