package foreigncluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// unpeerRetryInterval is how often the agent retries a provider that could
// not be reached to remove the tenant.
const unpeerRetryInterval = 5 * time.Second

// ReasonUnpeerFailed is the reason of Unpeered=False while the provider
// cannot be made to remove the tenant.
const ReasonUnpeerFailed = "ProviderNotCleaned"

// unpeer runs when the ForeignCluster is deleted: it asks the provider to
// remove this cluster's tenant with the current credentials (unless
// AnnotationForceUnpeer is set), deletes the peer's Secrets and lets the
// ForeignCluster go.
func (r *Reconciler) unpeer(ctx context.Context, logger klog.Logger, fc *offloadv1alpha1.ForeignCluster) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(fc, offloadv1alpha1.FinalizerUnpeer) {
		return ctrl.Result{}, nil
	}
	kubeconfig, err := r.getSecret(ctx, peering.PeerKubeconfigSecretName(fc.Name))
	if err != nil {
		return ctrl.Result{}, err
	}
	force := fc.Annotations[offloadv1alpha1.AnnotationForceUnpeer] == "true"
	if kubeconfig != nil && !force {
		if err := r.releaseTenant(ctx, fc, kubeconfig); err != nil {
			logger.Info("Cannot remove the tenant on the provider; retrying", "foreignCluster", klog.KObj(fc), "error", err.Error())
			msg := fmt.Sprintf("cannot get the provider to remove this cluster's tenant: %v; the agent keeps retrying, and kubectl offload unpeer %s --force removes the peering on this side only", err, fc.Name)
			return ctrl.Result{RequeueAfter: unpeerRetryInterval}, r.setUnpeered(ctx, fc.Name, metav1.ConditionFalse, ReasonUnpeerFailed, msg)
		}
		logger.Info("The provider removed this cluster's tenant", "foreignCluster", klog.KObj(fc))
	}
	for _, name := range []string{peering.PeerKubeconfigSecretName(fc.Name), peering.PeerTokenSecretName(fc.Name)} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: name}}
		if err := r.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("deleting Secret %s: %w", name, err)
		}
	}
	controllerutil.RemoveFinalizer(fc, offloadv1alpha1.FinalizerUnpeer)
	if err := r.Client.Update(ctx, fc); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("removing finalizer %s: %w", offloadv1alpha1.FinalizerUnpeer, err)
	}
	return ctrl.Result{}, nil
}

// releaseTenant calls the provider's /v1/unpeer. A provider that no longer
// accepts the credentials has nothing left for this cluster to remove.
func (r *Reconciler) releaseTenant(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, kubeconfig *corev1.Secret) error {
	token, err := peering.BearerToken(kubeconfig)
	if err != nil {
		return err
	}
	identity, err := peering.ReadIdentity(ctx, r.Reader, r.Namespace)
	if err != nil {
		return err
	}
	err = r.authClient(fc).Unpeer(ctx, token, identity.ID)
	var authErr *peering.Error
	if errors.As(err, &authErr) && authErr.Status == http.StatusUnauthorized {
		log := ctrl.LoggerFrom(ctx)
		if expiry, _, terr := peering.CredentialTimes(kubeconfig); terr == nil && time.Now().After(expiry) {
			log.Info("The credentials expired: the provider keeps this cluster's tenant until it is removed there with kubectl offload unpeer",
				"foreignCluster", klog.KObj(fc), "expiration", expiry)
		}
		return nil
	}
	return err
}

// setUnpeered sets the Unpeered condition of the peering's
// PeeringCredentials when it changed.
func (r *Reconciler) setUnpeered(ctx context.Context, name string, status metav1.ConditionStatus, reason, message string) error {
	var pc offloadv1alpha1.PeeringCredentials
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: name}, &pc); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !meta.SetStatusCondition(&pc.Status.Conditions, metav1.Condition{
		Type: offloadv1alpha1.ConditionUnpeered, Status: status, Reason: reason, Message: message, ObservedGeneration: pc.Generation,
	}) {
		return nil
	}
	return r.writeStatus(ctx, &pc)
}
