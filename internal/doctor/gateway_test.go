package doctor

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/status"
	"github.com/kubectl-offload/kubectl-offload/internal/status/statustest"
)

func TestDoctorChecksTheGatewayConsumersDial(t *testing.T) {
	a := statustest.NewAPIServer(t)
	ctx := context.Background()
	lb := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: statustest.Namespace, Name: offloadv1alpha1.GatewayName("in-doctor"),
			Labels: map[string]string{offloadv1alpha1.LabelComponent: offloadv1alpha1.ComponentGateway}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"gw": "doctor"},
			Ports: []corev1.ServicePort{{Name: "wireguard", Protocol: corev1.ProtocolUDP, Port: offloadv1alpha1.GatewayPort}}},
	}
	statustest.Create(t, a.Client, lb)
	values := func(gateway map[string]any) map[string]any {
		return map[string]any{"network": map[string]any{"enabled": true, "podCIDR": "10.244.0.0/16", "gateway": gateway}}
	}
	check := func(t *testing.T, gateway map[string]any, name string, want status.Status) {
		t.Helper()
		s := gatewayEndpointChecker{}.Check(ctx, doctorEnv(t, a, values(gateway)))
		if c := checkNamed(s.Checks, name); c == nil || c.Status != want {
			t.Errorf("%s = %+v, want %s (all: %+v)", name, c, want, s.Checks)
		}
	}
	service := "service/" + lb.Name

	t.Run("with the network fabric off there is nothing to check", func(t *testing.T) {
		s := gatewayEndpointChecker{}.Check(ctx, doctorEnv(t, a, map[string]any{"network": map[string]any{"enabled": false}}))
		if len(s.Checks) != 1 || s.Checks[0].Status != status.StatusOK || !strings.Contains(s.Checks[0].Message, "off") {
			t.Errorf("checks = %+v, want one ok saying the fabric is off", s.Checks)
		}
	})
	t.Run("a load balancer without an address warns", func(t *testing.T) {
		check(t, map[string]any{"serviceType": "LoadBalancer"}, service, status.StatusWarning)
	})
	t.Run("a gateway address stands in for the load balancer's", func(t *testing.T) {
		check(t, map[string]any{"serviceType": "LoadBalancer", "address": "gw.example.com"}, service, status.StatusOK)
		check(t, map[string]any{"serviceType": "LoadBalancer", "address": "gw.example.com"}, "address", status.StatusOK)
	})
	t.Run("a loopback gateway address fails", func(t *testing.T) {
		check(t, map[string]any{"address": "127.0.0.1:51820"}, "address", status.StatusFailed)
	})
	t.Run("a load balancer with a loopback address fails", func(t *testing.T) {
		got, err := a.Kube.CoreV1().Services(statustest.Namespace).Get(ctx, lb.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "127.0.0.1"}}
		if _, err := a.Kube.CoreV1().Services(statustest.Namespace).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		check(t, map[string]any{"serviceType": "LoadBalancer"}, service, status.StatusFailed)
	})
	t.Run("a loopback endpoint advertised to a consumer fails", func(t *testing.T) {
		ns := offloadv1alpha1.TenantNamespace("doctor-consumer")
		np := &offloadv1alpha1.NetworkPeering{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: offloadv1alpha1.NetworkPeeringName},
			Spec: offloadv1alpha1.NetworkPeeringSpec{ClusterID: "33333333-3333-4333-8333-333333333333", PublicKey: strings.Repeat("A", 43) + "=",
				PodCIDRs: []string{"10.244.0.0/16"}},
		}
		statustest.Create(t, a.Client, np)
		np.Status.Endpoint = "127.0.0.1:31820"
		if err := a.Client.Status().Update(ctx, np); err != nil {
			t.Fatal(err)
		}
		check(t, map[string]any{}, "endpoint/"+ns, status.StatusFailed)
	})
}
