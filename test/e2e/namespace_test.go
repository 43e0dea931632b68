package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/names"
	"github.com/kubectl-offload/kubectl-offload/internal/peer"
)

func createNamespace(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// expectNotOffloaded checks that namespace ns of c has no NamespaceOffloading.
func expectNotOffloaded(ctx context.Context, t *testing.T, c client.Client, ns string) {
	t.Helper()
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: offloadv1alpha1.NamespaceOffloadingName}, &offloadv1alpha1.NamespaceOffloading{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s has a NamespaceOffloading (err=%v)", ns, err)
	}
}

func TestANamespaceSpansItsProviderAndUnoffloadRemovesTheTwin(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	consumer, provider := peerableClusters(ctx, t)
	if errOut, err := outOfBand(t, consumer, generate(t, provider), "--timeout", "2m"); err != nil {
		t.Fatalf("peer out-of-band: %v\n%s", err, errOut)
	}
	cc, pc := ctrlClient(t, consumer), ctrlClient(t, provider)

	// Bad input: a clear error, and nothing is written.
	if _, errOut, err := offload(t, consumer, "namespace", "missing"); err == nil || !strings.Contains(errOut, `namespace "missing" not found`) {
		t.Errorf("offloading a missing namespace: err=%v, stderr %q", err, errOut)
	}
	createNamespace(ctx, t, cc, "demo")
	if _, errOut, err := offload(t, consumer, "namespace", "demo", "--selector", "offload.io/remote-cluster-id=nobody"); err == nil || !strings.Contains(errOut, "offload-provider") {
		t.Errorf("offloading with a selector no peer matches: err=%v, stderr %q; want the error to list the virtual nodes", err, errOut)
	}
	expectNotOffloaded(ctx, t, cc, "demo")

	// The twin namespace on the provider, with the consumer's RoleBinding and the offer's quota.
	start := time.Now()
	mustOffload(t, consumer, "namespace", "demo", "--timeout", "2m")
	t.Logf("namespace demo offloaded, twin namespace Ready: %s", time.Since(start).Round(time.Millisecond))
	twin := names.TwinNamespace("demo", consumer.Name, identity(ctx, t, consumer)["clusterID"])
	var no offloadv1alpha1.NamespaceOffloading
	if err := cc.Get(ctx, client.ObjectKey{Namespace: "demo", Name: offloadv1alpha1.NamespaceOffloadingName}, &no); err != nil {
		t.Fatal(err)
	}
	if len(no.Status.RemoteNamespaces) != 1 || no.Status.RemoteNamespaces[0].RemoteNamespace != twin ||
		no.Status.RemoteNamespaces[0].Phase != offloadv1alpha1.RemoteNamespaceReady {
		t.Errorf("NamespaceOffloading status %+v, want twin namespace %s Ready", no.Status.RemoteNamespaces, twin)
	}
	var ns corev1.Namespace
	if err := pc.Get(ctx, client.ObjectKey{Name: twin}, &ns); err != nil {
		t.Fatalf("no twin namespace %s on the provider: %v", twin, err)
	}
	if ns.Labels[offloadv1alpha1.LabelOriginNamespace] != "demo" {
		t.Errorf("twin namespace labels %v", ns.Labels)
	}
	var quotas corev1.ResourceQuotaList
	if err := pc.List(ctx, &quotas, client.InNamespace(twin)); err != nil || len(quotas.Items) != 1 || len(quotas.Items[0].Spec.Hard) == 0 {
		t.Errorf("twin namespace %s: quotas %+v (err=%v), want one from the offer", twin, quotas.Items, err)
	}
	var bindings rbacv1.RoleBindingList
	if err := pc.List(ctx, &bindings, client.InNamespace(twin)); err != nil || len(bindings.Items) != 1 ||
		bindings.Items[0].RoleRef.Name != "offload-remote-workloads" || len(bindings.Items[0].Subjects) != 1 ||
		bindings.Items[0].Subjects[0].Name != peer.ConsumerServiceAccount {
		t.Errorf("twin namespace %s: RoleBindings %+v (err=%v), want one for the consumer", twin, bindings.Items, err)
	}
	if err := cc.Get(ctx, client.ObjectKey{Name: "demo"}, &ns); err != nil || ns.Labels[offloadv1alpha1.LabelOffloaded] != "true" {
		t.Errorf("namespace demo is not labelled %s=true: %v %v", offloadv1alpha1.LabelOffloaded, ns.Labels, err)
	}
	// Running it again changes nothing.
	if out := mustOffload(t, consumer, "namespace", "demo", "--timeout", "1m"); !strings.Contains(out, "unchanged") {
		t.Errorf("offloading again printed %q, want unchanged", out)
	}

	// EnforceSameName refuses a name taken on the provider, and leaves that namespace alone.
	createNamespace(ctx, t, pc, "taken")
	createNamespace(ctx, t, cc, "taken")
	if _, errOut, err := offload(t, consumer, "namespace", "taken", "--namespace-mapping-strategy", "EnforceSameName", "--timeout", "1m"); err == nil || !strings.Contains(errOut, "already exists on the provider") {
		t.Errorf("EnforceSameName over a taken name: err=%v, stderr %q", err, errOut)
	}
	mustOffload(t, consumer, "unoffload", "namespace", "taken", "--timeout", "1m")
	if err := pc.Get(ctx, client.ObjectKey{Name: "taken"}, &ns); err != nil || ns.DeletionTimestamp != nil {
		t.Errorf("the provider's own namespace taken was touched: %v %v", err, ns.DeletionTimestamp)
	}

	// unoffload removes the twin namespace and the label.
	start = time.Now()
	mustOffload(t, consumer, "unoffload", "namespace", "demo", "--timeout", "2m")
	t.Logf("unoffload namespace demo: %s", time.Since(start).Round(time.Millisecond))
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(pc.Get(ctx, client.ObjectKey{Name: twin}, &corev1.Namespace{})), nil
	}); err != nil {
		t.Errorf("twin namespace %s is left on the provider", twin)
	}
	expectNotOffloaded(ctx, t, cc, "demo")
	if err := cc.Get(ctx, client.ObjectKey{Name: "demo"}, &ns); err != nil || ns.Labels[offloadv1alpha1.LabelOffloaded] != "" {
		t.Errorf("namespace demo keeps label %s after unoffload: %v %v", offloadv1alpha1.LabelOffloaded, ns.Labels, err)
	}
	var remotes offloadv1alpha1.RemoteNamespaceList
	if err := pc.List(ctx, &remotes); err != nil || len(remotes.Items) != 0 {
		t.Errorf("RemoteNamespaces left on the provider: %v (err=%v)", remotes.Items, err)
	}
}
