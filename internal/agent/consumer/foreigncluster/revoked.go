package foreigncluster

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/providerclient"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// unauthorizedReported reports whether the provider answered 401: the
// virtual node saw it (its CredentialsAccepted is False), or this
// controller confirmed it before (Authenticated says Unauthorized).
func (r *Reconciler) unauthorizedReported(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, pc *offloadv1alpha1.PeeringCredentials) (bool, error) {
	if c := meta.FindStatusCondition(pc.Status.Conditions, offloadv1alpha1.ConditionAuthenticated); c != nil && c.Status == metav1.ConditionFalse && c.Reason == offloadv1alpha1.ReasonUnauthorized {
		return true, nil
	}
	var vn offloadv1alpha1.VirtualNode
	if err := r.Client.Get(ctx, client.ObjectKey{Name: fc.Name}, &vn); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return metav1.IsControlledBy(&vn, fc) && credentialsRejected(&vn), nil
}

// credentialsRejected reports whether the VirtualNode says the provider
// refused its credentials.
func credentialsRejected(vn *offloadv1alpha1.VirtualNode) bool {
	return meta.IsStatusConditionFalse(vn.Status.Conditions, offloadv1alpha1.ConditionCredentialsAccepted)
}

// credentialsRefused passes the VirtualNode updates in which the node
// starts reporting a 401 from the provider, so that the controller checks
// the credentials then.
var credentialsRefused = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, ok1 := e.ObjectOld.(*offloadv1alpha1.VirtualNode)
		after, ok2 := e.ObjectNew.(*offloadv1alpha1.VirtualNode)
		return ok1 && ok2 && !credentialsRejected(before) && credentialsRejected(after)
	},
}

// credentialsRevoked asks the provider who the credentials of kubeconfig
// are (a SelfSubjectReview, which every authenticated identity may make) and
// reports whether it answered 401 Unauthorized. Any other failure is not a
// verdict: it returns false and the error.
func (r *Reconciler) credentialsRevoked(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, kubeconfig *corev1.Secret) (bool, error) {
	creds, err := providerclient.Parse(fc.Name, fc.UID, kubeconfig.Data[peering.PeerKubeconfigKey])
	if err != nil {
		return false, err
	}
	cfg := creds.Config()
	cfg.Timeout = r.httpTimeout()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, fmt.Errorf("a client for the provider of %s: %w", fc.Name, err)
	}
	_, err = cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if apierrors.IsUnauthorized(err) {
		return true, nil
	}
	return false, err
}

// revokedMessage says what to do when the provider no longer accepts the credentials.
func revokedMessage(name string) string {
	return fmt.Sprintf("the provider no longer accepts this cluster's credentials (401 Unauthorized): it removed this cluster's tenant, for example with kubectl offload unpeer --incoming there; run kubectl offload unpeer %s here, then peer again with a new command from kubectl offload peer generate on the provider", name)
}
