package reflection

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// ManagedByReflection is the endpointslice.kubernetes.io/managed-by value of
// reflected EndpointSlices. The provider's EndpointSlice controllers leave
// slices managed by someone else alone. It is written like the
// controller's own "endpointslice-controller.k8s.io": a label value cannot
// hold a slash, so "offload.io/reflection" is not possible.
const ManagedByReflection = "reflection.offload.io"

// RemoteService builds the reflection of local in o.TwinNamespace: a Service
// of the same name without a selector, since its endpoints are the reflected
// EndpointSlices. Ports keep their name, protocol, port, target port and
// application protocol; node ports are dropped. The provider allocates the
// cluster IP. NodePort and LoadBalancer Services become ClusterIP ones, an
// ExternalName Service stays one, and a headless Service stays headless.
// Metadata follows the rules of RemoteConfigMap.
func RemoteService(local *corev1.Service, o Origin) *corev1.Service {
	l := local.DeepCopy()
	out := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: ReflectedMeta(&l.ObjectMeta, o),
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP},
	}
	switch {
	case l.Spec.Type == corev1.ServiceTypeExternalName:
		out.Spec.Type = corev1.ServiceTypeExternalName
		out.Spec.ExternalName = l.Spec.ExternalName
	case l.Spec.ClusterIP == corev1.ClusterIPNone:
		out.Spec.ClusterIP = corev1.ClusterIPNone
	}
	for _, p := range l.Spec.Ports {
		rp := corev1.ServicePort{
			Name:        p.Name,
			Protocol:    p.Protocol,
			Port:        p.Port,
			TargetPort:  p.TargetPort,
			AppProtocol: p.AppProtocol,
		}
		// The API server's defaults, so that a reflection read back
		// compares equal to the one written.
		if rp.Protocol == "" {
			rp.Protocol = corev1.ProtocolTCP
		}
		if rp.TargetPort == intstr.FromInt32(0) || rp.TargetPort == intstr.FromString("") {
			rp.TargetPort = intstr.FromInt32(rp.Port)
		}
		out.Spec.Ports = append(out.Spec.Ports, rp)
	}
	return out
}

// ServiceNeedsUpdate reports whether remote differs from desired in what
// reflection owns: labels, annotations, type, headlessness, external name,
// ports, and the absence of a selector.
func ServiceNeedsUpdate(remote, desired *corev1.Service) bool {
	return !SameMeta(&remote.ObjectMeta, &desired.ObjectMeta) ||
		ServiceNeedsRecreate(remote, desired) ||
		remote.Spec.ExternalName != desired.Spec.ExternalName ||
		len(remote.Spec.Selector) > 0 ||
		!apiequality.Semantic.DeepEqual(ownedPorts(remote.Spec.Ports), ownedPorts(desired.Spec.Ports))
}

// ServiceNeedsRecreate reports whether remote cannot be updated into
// desired in place: its type or headlessness differs, and the cluster IP
// would have to change.
func ServiceNeedsRecreate(remote, desired *corev1.Service) bool {
	return remote.Spec.Type != desired.Spec.Type ||
		(remote.Spec.ClusterIP == corev1.ClusterIPNone) != (desired.Spec.ClusterIP == corev1.ClusterIPNone)
}

// ServiceForUpdate is remote with what reflection owns taken from desired,
// keeping what the provider allocated (cluster IPs, IP families).
func ServiceForUpdate(remote, desired *corev1.Service) *corev1.Service {
	out := remote.DeepCopy()
	out.Labels = desired.Labels
	out.Annotations = desired.Annotations
	out.Spec.ExternalName = desired.Spec.ExternalName
	out.Spec.Selector = nil
	out.Spec.Ports = desired.Spec.Ports
	return out
}

// ownedPorts are ports reduced to the fields reflection copies.
func ownedPorts(in []corev1.ServicePort) []corev1.ServicePort {
	out := make([]corev1.ServicePort, 0, len(in))
	for _, p := range in {
		out = append(out, corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, TargetPort: p.TargetPort, AppProtocol: p.AppProtocol})
	}
	return out
}

// RemoteEndpointSlice builds the reflection of local in o.TwinNamespace:
// same name, address type, ports, and endpoint addresses, conditions and
// hostnames; labels and annotations as RemoteConfigMap, with
// kubernetes.io/service-name kept (it names the reflected Service) and
// endpointslice.kubernetes.io/managed-by set to ManagedByReflection. Node
// names, zones, target references and hints are dropped: they name consumer
// nodes and pods. With the network fabric (o.Addresses), addresses become
// ones the provider reaches (consumer pods in its view of them, pods
// offloaded there as their real address) and endpoints it cannot reach are
// dropped. It reports false for slices that belong to no Service and
// for slices that are reflections themselves.
func RemoteEndpointSlice(local *discoveryv1.EndpointSlice, o Origin) (*discoveryv1.EndpointSlice, bool) {
	if local.Labels[discoveryv1.LabelServiceName] == "" || local.Labels[discoveryv1.LabelManagedBy] == ManagedByReflection {
		return nil, false
	}
	l := local.DeepCopy()
	out := &discoveryv1.EndpointSlice{
		TypeMeta:    metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta:  ReflectedMeta(&l.ObjectMeta, o),
		AddressType: l.AddressType,
	}
	out.Labels[discoveryv1.LabelManagedBy] = ManagedByReflection
	for _, e := range l.Endpoints {
		var addrs []string
		for _, a := range e.Addresses {
			if p, ok := o.Addresses.ProviderIP(a); ok {
				addrs = append(addrs, p)
			}
		}
		if len(addrs) == 0 {
			continue // not reachable from the provider through this peering
		}
		out.Endpoints = append(out.Endpoints, discoveryv1.Endpoint{
			Addresses:  addrs,
			Conditions: e.Conditions,
			Hostname:   e.Hostname,
		})
	}
	for _, p := range l.Ports {
		// The API server's defaults, as in RemoteService.
		if p.Name == nil {
			p.Name = ptr.To("")
		}
		if p.Protocol == nil {
			p.Protocol = ptr.To(corev1.ProtocolTCP)
		}
		out.Ports = append(out.Ports, p)
	}
	return out, true
}

// EndpointSliceNeedsUpdate reports whether remote differs from desired in
// labels, annotations, address type, endpoints or ports.
func EndpointSliceNeedsUpdate(remote, desired *discoveryv1.EndpointSlice) bool {
	return !SameMeta(&remote.ObjectMeta, &desired.ObjectMeta) ||
		EndpointSliceNeedsRecreate(remote, desired) ||
		!apiequality.Semantic.DeepEqual(remote.Endpoints, desired.Endpoints) ||
		!apiequality.Semantic.DeepEqual(remote.Ports, desired.Ports)
}

// EndpointSliceNeedsRecreate reports whether the address type, which is
// immutable, differs.
func EndpointSliceNeedsRecreate(remote, desired *discoveryv1.EndpointSlice) bool {
	return remote.AddressType != desired.AddressType
}
