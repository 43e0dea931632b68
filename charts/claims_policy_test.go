package charts_test

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
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// claim is a 1Gi claim of StorageClass class, changed by spec if not nil.
func claim(name, class string, spec func(*corev1.PersistentVolumeClaimSpec)) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}}
	if class != "" {
		c.Spec.StorageClassName = ptr.To(class)
	}
	if spec != nil {
		spec(&c.Spec)
	}
	return c
}

// lendingNamespace is a namespace of a tenant whose twin namespaces get
// StorageClass class (none when empty), as the remotenamespace controller
// records it.
func lendingNamespace(t *testing.T, kube kubernetes.Interface, class string) string {
	t.Helper()
	ns, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "twin-",
		Labels:      map[string]string{offloadv1alpha1.LabelTenant: "x"},
		Annotations: map[string]string{offloadv1alpha1.AnnotationStorageClass: class}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func TestTheTenantClaimPolicyHoldsClaimsToTheLentClass(t *testing.T) {
	kube := enforcedPolicy(t, offloadv1alpha1.StoragePolicyName)
	lent := lendingNamespace(t, kube, "standard")
	none := lendingNamespace(t, kube, "")
	other := newNamespace(t, kube, nil)
	// A new policy reaches admission a moment after it is written.
	framework.Eventually(t, 30*time.Second, "the claim policy is not enforced", func(ctx context.Context) bool {
		_, err := kube.CoreV1().PersistentVolumeClaims(none).Create(ctx, claim("probe", "standard", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err)
	})
	refused := []struct {
		name, ns, class string
		spec            func(*corev1.PersistentVolumeClaimSpec)
		inMessage       string
	}{
		{"a claim where no storage is lent", none, "standard", nil, "lends no persistent storage to the consumer of namespace " + none},
		{"a claim of another class", lent, "fast", nil, "uses StorageClass fast: a consumer's claims on this provider use StorageClass standard"},
		{"a claim of no class", lent, "", nil, "uses StorageClass (none)"},
		{"a claim naming a volume", lent, "standard", func(s *corev1.PersistentVolumeClaimSpec) { s.VolumeName = "pv-of-someone-else" }, "names or selects a volume"},
		{"a claim selecting volumes", lent, "standard", func(s *corev1.PersistentVolumeClaimSpec) {
			s.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"owner": "provider"}}
		}, "names or selects a volume"},
		{"a claim cloning another claim", lent, "standard", func(s *corev1.PersistentVolumeClaimSpec) {
			s.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "theirs"}
		}, "sets a data source"},
		{"a claim with a VolumeAttributesClass", lent, "standard", func(s *corev1.PersistentVolumeClaimSpec) { s.VolumeAttributesClassName = ptr.To("gold") }, "VolumeAttributesClass"},
	}
	for i, tc := range refused {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			name := fmt.Sprintf("refused-%d", i)
			_, err := kube.CoreV1().PersistentVolumeClaims(tc.ns).Create(t.Context(), claim(name, tc.class, tc.spec), metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.inMessage) {
				t.Fatalf("err = %v, want Forbidden saying %q", err, tc.inMessage)
			}
			if _, err := kube.CoreV1().PersistentVolumeClaims(tc.ns).Get(t.Context(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the claim exists: %v", err)
			}
		})
		t.Run(tc.name+" is admitted in a namespace of no tenant", func(t *testing.T) {
			if _, err := kube.CoreV1().PersistentVolumeClaims(other).Create(t.Context(), claim(fmt.Sprintf("theirs-%d", i), tc.class, tc.spec),
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("a claim of the lent class is admitted", func(t *testing.T) {
		if _, err := kube.CoreV1().PersistentVolumeClaims(lent).Create(t.Context(), claim("data", "standard", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
}
