package namespaceoffloading

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// ReflectionRole is the ClusterRole, from the chart, that lets the
// controller-manager read what it reflects (ConfigMaps, Secrets, Services,
// EndpointSlices) and request service-account tokens. The controller binds
// it in offloaded namespaces only, so the agent never reads Secrets
// cluster-wide.
const ReflectionRole = "offload-reflection"

// reflectionBinding is the name of the RoleBinding of ReflectionRole in an
// offloaded namespace.
const reflectionBinding = "offload-reflection"

// grant binds ReflectionRole to the controller-manager in namespace ns, or
// removes that binding.
func (r *Reconciler) grant(ctx context.Context, ns string, granted bool) error {
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: reflectionBinding, Namespace: ns, Labels: map[string]string{
			"app.kubernetes.io/managed-by": "offload",
		}},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ReflectionRole},
		Subjects: []rbacv1.Subject{{
			Kind: rbacv1.ServiceAccountKind, Name: offloadv1alpha1.ControllerManager, Namespace: r.Namespace,
		}},
	}
	if !granted {
		if err := r.Client.Delete(ctx, rb); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting RoleBinding %s/%s: %w", ns, reflectionBinding, err)
		}
		return nil
	}
	err := r.Client.Create(ctx, rb)
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.IsNotFound(err):
		return nil // the namespace is gone
	}
	return fmt.Errorf("letting the agent read the objects of namespace %s (RoleBinding %s): %w", ns, reflectionBinding, err)
}
