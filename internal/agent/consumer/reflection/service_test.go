package reflection_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// remoteMeta is the metadata of the copy of an object named name with
// labels (the origin label added) and annotations.
func remoteMeta(name string, labels, annotations map[string]string) metav1.ObjectMeta {
	l := map[string]string{offloadv1alpha1.LabelOriginClusterID: consumerID}
	for k, v := range labels {
		l[k] = v
	}
	return metav1.ObjectMeta{Name: name, Namespace: twinNS, Labels: l, Annotations: annotations}
}

func TestRemoteService(t *testing.T) {
	localMeta := metav1.ObjectMeta{
		Name: "web", Namespace: "shop", UID: "u-1", ResourceVersion: "42",
		Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"team": "payments"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "web"}},
	}
	http := corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http"), AppProtocol: ptr.To("http")}
	tests := []struct {
		name string
		spec corev1.ServiceSpec
		want corev1.ServiceSpec
	}{{
		name: "a ClusterIP Service loses its selector and cluster IPs",
		spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{http}, SessionAffinity: corev1.ServiceAffinityClientIP},
		want: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{http}},
	}, {
		name: "a NodePort Service becomes a ClusterIP one without node ports",
		spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.10",
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080}}},
		want: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, {
		name: "a LoadBalancer Service becomes a ClusterIP one",
		spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", LoadBalancerClass: ptr.To("lb"),
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, Ports: []corev1.ServicePort{http}},
		want: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{http}},
	}, {
		name: "an ExternalName Service stays one",
		spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"},
		want: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"},
	}, {
		name: "a headless Service stays headless",
		spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"},
			Ports: []corev1.ServicePort{{Name: "sql", Protocol: corev1.ProtocolTCP, Port: 5432, TargetPort: intstr.FromInt32(5432)}}},
		want: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: corev1.ClusterIPNone,
			Ports: []corev1.ServicePort{{Name: "sql", Protocol: corev1.ProtocolTCP, Port: 5432, TargetPort: intstr.FromInt32(5432)}}},
	}, {
		name: "ports get the API server's defaults for protocol and target port",
		spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}, {Port: 443}}},
		want: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{
			{Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
			{Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(443)},
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			local := &corev1.Service{ObjectMeta: localMeta, Spec: tt.spec}
			before := local.DeepCopy()
			got := reflection.RemoteService(local, origin())
			assertEqual(t, "metadata", remoteMeta("web", localMeta.Labels, localMeta.Annotations), got.ObjectMeta)
			assertEqual(t, "spec", tt.want, got.Spec)
			assertEqual(t, "the consumer Service", before, local)
		})
	}
}

func TestServiceNeedsUpdate(t *testing.T) {
	desired := reflection.RemoteService(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, origin())
	// current is desired as the provider's API server returns it.
	current := func() *corev1.Service {
		s := desired.DeepCopy()
		s.UID, s.ResourceVersion = "u-2", "7"
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.100.0.5", []string{"10.100.0.5"}
		s.Spec.SessionAffinity = corev1.ServiceAffinityNone
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
		return s
	}
	tests := []struct {
		name                  string
		change                func(*corev1.Service)
		wantUpdate, wantAgain bool
	}{
		{name: "what the provider allocated and defaulted is not a difference", change: func(*corev1.Service) {}},
		{name: "a changed label is updated", change: func(s *corev1.Service) { s.Labels["app"] = "old" }, wantUpdate: true},
		{name: "an extra annotation is updated", change: func(s *corev1.Service) { s.Annotations = map[string]string{"a": "b"} }, wantUpdate: true},
		{name: "a selector added on the provider is removed", change: func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "web"} }, wantUpdate: true},
		{name: "a changed target port is updated", change: func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(8080) }, wantUpdate: true},
		{name: "a missing port is updated", change: func(s *corev1.Service) { s.Spec.Ports = nil }, wantUpdate: true},
		{name: "a node port set on the provider is not a difference", change: func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30000 }},
		{name: "another type means recreating", change: func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }, wantUpdate: true, wantAgain: true},
		{name: "a headless copy of a Service with a cluster IP is recreated", change: func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
		}, wantUpdate: true, wantAgain: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			remote := current()
			tt.change(remote)
			if got := reflection.ServiceNeedsUpdate(remote, desired); got != tt.wantUpdate {
				t.Errorf("reflection.ServiceNeedsUpdate = %v, want %v", got, tt.wantUpdate)
			}
			if got := reflection.ServiceNeedsRecreate(remote, desired); got != tt.wantAgain {
				t.Errorf("reflection.ServiceNeedsRecreate = %v, want %v", got, tt.wantAgain)
			}
			if tt.wantUpdate && !tt.wantAgain {
				updated := reflection.ServiceForUpdate(remote, desired)
				if reflection.ServiceNeedsUpdate(updated, desired) {
					t.Errorf("the update leaves a difference: %+v", updated)
				}
				if updated.Spec.ClusterIP != remote.Spec.ClusterIP {
					t.Errorf("the update changes the allocated cluster IP to %q", updated.Spec.ClusterIP)
				}
			}
		})
	}
}

func TestRemoteEndpointSlice(t *testing.T) {
	labels := map[string]string{
		discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io", "app": "web",
	}
	wantLabels := map[string]string{
		discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: reflection.ManagedByReflection, "app": "web",
	}
	ready := discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}
	tests := []struct {
		name   string
		labels map[string]string
		local  []discoveryv1.Endpoint
		ports  []discoveryv1.EndpointPort
		want   []discoveryv1.Endpoint
		wantP  []discoveryv1.EndpointPort
		refuse bool
	}{{
		name:   "addresses, conditions and hostnames are kept; node names, zones, target refs and hints are dropped",
		labels: labels,
		local: []discoveryv1.Endpoint{{
			Addresses: []string{"10.244.1.7"}, Conditions: ready, Hostname: ptr.To("web-0"),
			NodeName: ptr.To("worker-1"), Zone: ptr.To("zone-a"),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web-0"},
			Hints:     &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}},
		}},
		want: []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.7"}, Conditions: ready, Hostname: ptr.To("web-0")}},
	}, {
		name:   "ports are copied with the API server's defaults",
		labels: labels,
		ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080), AppProtocol: ptr.To("http")},
			{Port: ptr.To[int32](53)},
		},
		wantP: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080), AppProtocol: ptr.To("http")},
			{Name: ptr.To(""), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](53)},
		},
	}, {
		name:   "a slice of no Service is not reflected",
		labels: map[string]string{"app": "web"},
		refuse: true,
	}, {
		name:   "a slice that is itself a reflection is not reflected again",
		labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: reflection.ManagedByReflection},
		refuse: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			local := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Name: "web-abcde", Namespace: "shop", Labels: tt.labels, UID: "u-3",
					OwnerReferences: []metav1.OwnerReference{{Kind: "Service", Name: "web"}}},
				AddressType: discoveryv1.AddressTypeIPv4, Endpoints: tt.local, Ports: tt.ports,
			}
			before := local.DeepCopy()
			got, ok := reflection.RemoteEndpointSlice(local, origin())
			assertEqual(t, "the consumer slice", before, local)
			if ok == tt.refuse {
				t.Fatalf("reflection.RemoteEndpointSlice reported %v, want %v", ok, !tt.refuse)
			}
			if tt.refuse {
				return
			}
			assertEqual(t, "metadata", remoteMeta("web-abcde", wantLabels, nil), got.ObjectMeta)
			assertEqual(t, "endpoints", tt.want, got.Endpoints)
			assertEqual(t, "ports", tt.wantP, got.Ports)
			if got.AddressType != discoveryv1.AddressTypeIPv4 {
				t.Errorf("address type = %q", got.AddressType)
			}
		})
	}
}

func TestEndpointSliceNeedsUpdate(t *testing.T) {
	desired, _ := reflection.RemoteEndpointSlice(&discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-abcde", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.7"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}},
	}, origin())
	tests := []struct {
		name                  string
		change                func(*discoveryv1.EndpointSlice)
		wantUpdate, wantAgain bool
	}{
		{name: "the same slice needs nothing", change: func(s *discoveryv1.EndpointSlice) { s.ResourceVersion = "9" }},
		{name: "a changed address is updated", change: func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = []string{"10.244.2.1"} }, wantUpdate: true},
		{name: "a changed condition is updated", change: func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Conditions.Ready = ptr.To(false) }, wantUpdate: true},
		{name: "a changed port is updated", change: func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = ptr.To[int32](81) }, wantUpdate: true},
		{name: "a changed managed-by label is updated", change: func(s *discoveryv1.EndpointSlice) {
			s.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
		}, wantUpdate: true},
		{name: "another address type means recreating", change: func(s *discoveryv1.EndpointSlice) { s.AddressType = discoveryv1.AddressTypeIPv6 }, wantUpdate: true, wantAgain: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			remote := desired.DeepCopy()
			tt.change(remote)
			if got := reflection.EndpointSliceNeedsUpdate(remote, desired); got != tt.wantUpdate {
				t.Errorf("reflection.EndpointSliceNeedsUpdate = %v, want %v", got, tt.wantUpdate)
			}
			if got := reflection.EndpointSliceNeedsRecreate(remote, desired); got != tt.wantAgain {
				t.Errorf("reflection.EndpointSliceNeedsRecreate = %v, want %v", got, tt.wantAgain)
			}
		})
	}
}
