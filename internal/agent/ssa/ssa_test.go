package ssa_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/ssa"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// Each writer's apply replaces what it wrote before and keeps the
// others' fields, down to an empty status: a writer that drops all its
// fields must not be refused (the API server stores a null status).
func TestAWriterReplacesItsFieldsOnlyDownToNone(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	ctx := context.Background()
	fc := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "peer-" + rand.String(5)},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: "11111111-2222-4333-8444-999999999999", ClusterName: "peer"}}
	if err := c.Create(ctx, fc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), fc) })
	apply := func(st offloadv1alpha1.ForeignClusterStatus, manager string) offloadv1alpha1.ForeignClusterStatus {
		t.Helper()
		if err := ssa.ApplyStatus(ctx, c, fc, st, manager); err != nil {
			t.Fatalf("%s applying %+v: %v", manager, st, err)
		}
		var got offloadv1alpha1.ForeignCluster
		if err := c.Get(ctx, client.ObjectKeyFromObject(fc), &got); err != nil {
			t.Fatal(err)
		}
		return got.Status
	}
	apply(offloadv1alpha1.ForeignClusterStatus{Role: offloadv1alpha1.RoleConsumer, Auth: offloadv1alpha1.PhaseEstablished}, "a")
	if got := apply(offloadv1alpha1.ForeignClusterStatus{Network: offloadv1alpha1.PhasePending}, "b"); got.Role != offloadv1alpha1.RoleConsumer || got.Network != offloadv1alpha1.PhasePending {
		t.Errorf("b's apply changed a's fields: %+v", got)
	}
	if got := apply(offloadv1alpha1.ForeignClusterStatus{Role: offloadv1alpha1.RoleConsumer}, "a"); got.Auth != "" || got.Network != offloadv1alpha1.PhasePending {
		t.Errorf("a's apply without auth: %+v, want auth gone and b's network kept", got)
	}
	apply(offloadv1alpha1.ForeignClusterStatus{}, "b")
	if got := apply(offloadv1alpha1.ForeignClusterStatus{}, "a"); got.Role != "" || got.Network != "" {
		t.Errorf("both writers dropped their fields, status %+v", got)
	}
}
