package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// The chapter of this file runs in expectProviderRefusesUnsafePods
// (provider_safety_test.go), so in the tests that drive that one.

// expectATenantIsBounded plays a consumer that tries to fill its
// provider's etcd with its own credentials (tenant, tc): ServiceAccounts
// past its twin namespace's quota, RemoteNamespaces past its tenant
// namespace's budget, an oversized Secret. The provider's API server
// refuses each, and what was refused does not exist.
func expectATenantIsBounded(ctx context.Context, t *testing.T, provider *localcluster.Cluster, twin, tenantNS, consumerID string, tenant kubernetes.Interface, tc client.Client) {
	t.Helper()
	// ServiceAccounts: the twin namespace has its default one, and room
	// for a few more (count/serviceaccounts).
	var made []string
	var refusal error
	for i := range 20 {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fill-%d", i)}}
		if _, err := tenant.CoreV1().ServiceAccounts(twin).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			refusal = err
			break
		}
		made = append(made, sa.Name)
	}
	if !apierrors.IsForbidden(refusal) || !strings.Contains(refusal.Error(), "exceeded quota") || len(made) >= 10 {
		t.Errorf("the consumer made %d ServiceAccounts in its twin namespace, then: %v; want fewer than 10, then refused by the quota", len(made), refusal)
	}
	for _, name := range made {
		if err := provider.Kube.CoreV1().ServiceAccounts(twin).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	}

	// RemoteNamespaces: the budget of the tenant namespace counts them
	// from the first peering. The provider's admin lowers it to what is
	// used; the consumer's next one is refused.
	quotas := provider.Kube.CoreV1().ResourceQuotas(tenantNS)
	const rns = "count/remotenamespaces.offload.io"
	var used resource.Quantity
	waitFor(ctx, t, time.Minute, "the tenant's budget to count its RemoteNamespaces", func(ctx context.Context) (bool, string) {
		q, err := quotas.Get(ctx, offloadv1alpha1.TenantBudgetName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var ok bool
		used, ok = q.Status.Used[rns]
		return ok && used.Sign() > 0, fmt.Sprintf("status %+v", q.Status)
	})
	setHard := func(q resource.Quantity) {
		t.Helper()
		patch := fmt.Sprintf(`{"spec":{"hard":{%q:%q}}}`, rns, q.String())
		if _, err := quotas.Patch(ctx, offloadv1alpha1.TenantBudgetName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setHard(used)
	one := &offloadv1alpha1.RemoteNamespace{ObjectMeta: metav1.ObjectMeta{Name: "one-too-many", Namespace: tenantNS},
		Spec: offloadv1alpha1.RemoteNamespaceSpec{ConsumerClusterID: consumerID, SourceNamespace: "one-too-many", TargetNamespace: "one-too-many",
			MappingStrategy: offloadv1alpha1.EnforceSameName}}
	waitFor(ctx, t, time.Minute, "the consumer's RemoteNamespace past its budget to be refused", func(ctx context.Context) (bool, string) {
		err := tc.Create(ctx, one.DeepCopy(), client.DryRunAll)
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"), fmt.Sprint(err)
	})
	setHard(offloadv1alpha1.TenantBudget()[rns])

	// An oversized Secret is refused whatever the quota says.
	big := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "big"}, Data: map[string][]byte{"blob": make([]byte, 300<<10)}}
	if _, err := tenant.CoreV1().Secrets(twin).Create(ctx, big, metav1.CreateOptions{}); !apierrors.IsRequestEntityTooLargeError(err) {
		t.Errorf("a 300 KiB Secret from the consumer: %v, want RequestEntityTooLarge", err)
	}
	if _, err := provider.Kube.CoreV1().Secrets(twin).Get(ctx, big.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the oversized Secret exists: %v", err)
	}
}
