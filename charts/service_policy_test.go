package charts_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

const servicePolicyName = "offload-tenant-services"

func service(name string, spec func(*corev1.ServiceSpec)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if spec != nil {
		spec(&s.Spec)
	}
	return s
}

func TestTheTenantServicePolicyKeepsServicesInsideTheCluster(t *testing.T) {
	kube := enforcedPolicy(t, servicePolicyName)
	tenant := newNamespace(t, kube, map[string]string{offloadv1alpha1.LabelTenant: "x"})
	other := newNamespace(t, kube, nil)
	refused := []struct {
		name      string
		spec      func(*corev1.ServiceSpec)
		inMessage string
	}{
		{"a NodePort Service", func(s *corev1.ServiceSpec) { s.Type = corev1.ServiceTypeNodePort }, "of type NodePort"},
		{"a LoadBalancer Service", func(s *corev1.ServiceSpec) { s.Type = corev1.ServiceTypeLoadBalancer }, "of type LoadBalancer"},
		{"a Service with externalIPs", func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"10.0.0.1"} }, "externalIPs"},
	}
	// A new policy reaches admission a moment after it is written.
	framework.Eventually(t, 30*time.Second, "the Service policy is not enforced", func(ctx context.Context) bool {
		_, err := kube.CoreV1().Services(tenant).Create(ctx, service("probe", refused[0].spec), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err)
	})
	for i, tc := range refused {
		t.Run(tc.name+" is refused in a tenant namespace", func(t *testing.T) {
			name := fmt.Sprintf("refused-%d", i)
			_, err := kube.CoreV1().Services(tenant).Create(t.Context(), service(name, tc.spec), metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.inMessage) {
				t.Fatalf("err = %v, want Forbidden naming %q", err, tc.inMessage)
			}
			if _, err := kube.CoreV1().Services(tenant).Get(t.Context(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the Service exists: %v", err)
			}
		})
		t.Run(tc.name+" is admitted in a namespace of no tenant", func(t *testing.T) {
			if _, err := kube.CoreV1().Services(other).Create(t.Context(), service(fmt.Sprintf("theirs-%d", i), tc.spec), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, tc := range []struct {
		name string
		spec func(*corev1.ServiceSpec)
	}{
		{"a ClusterIP Service", nil},
		{"a headless Service", func(s *corev1.ServiceSpec) { s.ClusterIP = corev1.ClusterIPNone }},
		{"an ExternalName Service", func(s *corev1.ServiceSpec) {
			s.Type, s.ExternalName, s.Ports = corev1.ServiceTypeExternalName, "db.example.com", nil
		}},
	} {
		t.Run(tc.name+" is admitted in a tenant namespace", func(t *testing.T) {
			if _, err := kube.CoreV1().Services(tenant).Create(t.Context(), service("ok", tc.spec), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
