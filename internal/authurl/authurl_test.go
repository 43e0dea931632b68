package authurl

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

func authService(typ corev1.ServiceType, ingress ...corev1.LoadBalancerIngress) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.Auth, Namespace: testNamespace},
		Spec: corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{
			{Name: "metrics", Port: 8080, NodePort: 30080},
			{Name: "https", Port: 443, NodePort: 31443},
		}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress}},
	}
}

const testNamespace = "offload-system"

func node(name, ip string, labels map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
	}
}

func TestTheAuthURLIsTheValueElseTheServicesAddress(t *testing.T) {
	virtual := node("a-offload-beta", "10.9.9.9", map[string]string{offloadv1alpha1.LabelType: "virtual-node"})
	tests := []struct {
		name    string
		auth    string // the auth.url value
		objects []runtime.Object
		want    string
		wantErr error
	}{
		{
			name: "the auth.url value wins over the Service",
			auth: "https://auth.example.com",
			want: "https://auth.example.com",
		},
		{
			name:    "a NodePort Service is reached on the first real node's InternalIP",
			objects: []runtime.Object{authService(corev1.ServiceTypeNodePort), virtual, node("worker-b", "172.18.0.4", nil), node("worker-a", "172.18.0.3", nil)},
			want:    "https://172.18.0.3:31443",
		},
		{
			// externalTrafficPolicy Local: only those nodes answer.
			name: "a NodePort Service is reached on a node that runs a Ready auth pod",
			objects: []runtime.Object{selecting(authService(corev1.ServiceTypeNodePort)), virtual,
				node("worker-a", "172.18.0.3", nil), node("worker-b", "172.18.0.4", nil), node("worker-c", "172.18.0.5", nil),
				authPod("starting", "worker-a", false), authPod("serving", "worker-b", true)},
			want: "https://172.18.0.4:31443",
		},
		{
			name:    "an IPv6 node address is bracketed",
			objects: []runtime.Object{authService(corev1.ServiceTypeNodePort), node("worker", "fd00::3", nil)},
			want:    "https://[fd00::3]:31443",
		},
		{
			name:    "a LoadBalancer Service is reached on its ingress IP and port",
			objects: []runtime.Object{authService(corev1.ServiceTypeLoadBalancer, corev1.LoadBalancerIngress{IP: "203.0.113.7"})},
			want:    "https://203.0.113.7:443",
		},
		{
			name:    "a LoadBalancer Service is reached on its ingress hostname",
			objects: []runtime.Object{authService(corev1.ServiceTypeLoadBalancer, corev1.LoadBalancerIngress{Hostname: "lb.example.com"})},
			want:    "https://lb.example.com:443",
		},
		{
			name:    "a LoadBalancer without an address yet is ErrNoLoadBalancerAddress",
			objects: []runtime.Object{authService(corev1.ServiceTypeLoadBalancer)},
			wantErr: ErrNoLoadBalancerAddress,
		},
		{
			name:    "a ClusterIP Service is reached on its DNS name",
			objects: []runtime.Object{authService(corev1.ServiceTypeClusterIP)},
			want:    "https://offload-auth.offload-system.svc:443",
		},
		{
			name:    "a missing Service is an error",
			wantErr: errAny,
		},
		{
			name:    "a NodePort without a node address is ErrNoNodeAddress",
			objects: []runtime.Object{authService(corev1.ServiceTypeNodePort), virtual},
			wantErr: ErrNoNodeAddress,
		},
		{
			name:    "an ExternalName Service is an error",
			objects: []runtime.Object{authService(corev1.ServiceTypeExternalName)},
			wantErr: errAny,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kube := k8sfake.NewClientset(tt.objects...)
			values := map[string]any{"auth": map[string]any{"url": tt.auth}}
			got, _, err := Resolve(context.Background(), kube, testNamespace, Configured(values))
			switch {
			case tt.wantErr == errAny && err == nil:
				t.Fatalf("Resolve = %q, want an error", got)
			case tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Fatalf("Resolve error = %v, want %v", err, tt.wantErr)
			case tt.wantErr == nil && err != nil:
				t.Fatalf("Resolve: %v", err)
			}
			if got != tt.want {
				t.Errorf("Resolve = %q, want %q", got, tt.want)
			}
		})
	}
}

// selecting gives svc the auth pods' selector.
func selecting(svc *corev1.Service) *corev1.Service {
	svc.Spec.Selector = map[string]string{"app.kubernetes.io/component": "auth"}
	return svc
}

// authPod is an auth pod on node, Ready or not.
func authPod(name, node string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, Labels: map[string]string{"app.kubernetes.io/component": "auth"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// errAny stands for any error in table tests.
var errAny = errors.New("any error")
