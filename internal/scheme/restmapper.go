package scheme

import (
	"k8s.io/apimachinery/pkg/api/meta"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// GatewayRESTMapper maps the one kind the gateway reads and writes, the
// Tunnel. It asks the API server nothing, so that a gateway that starts
// while the API server is unreachable waits for it in its informer,
// instead of failing on discovery and exiting.
func GatewayRESTMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(offloadv1alpha1.GroupVersion.WithKind("Tunnel"), meta.RESTScopeNamespace)
	return m
}
