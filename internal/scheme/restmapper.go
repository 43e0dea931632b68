package scheme

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// NodeAgentRESTMapper maps the kinds the node agents (the gateway and the
// fabric) read and write: Tunnels, Pods and Nodes. It asks the API server
// nothing, so that an agent that starts while the API server is
// unreachable waits for it in its informers, instead of failing on
// discovery and exiting.
func NodeAgentRESTMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(offloadv1alpha1.GroupVersion.WithKind("Tunnel"), meta.RESTScopeNamespace)
	m.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
	m.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
	return m
}
