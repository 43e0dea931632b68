// Package foreigncluster is the consumer's credentials controller: for each
// ForeignCluster with outgoing peering it exchanges the peering token the
// CLI stored for credentials on the provider, over TLS pinned to the
// provider's auth CA, keeps them in a kubeconfig Secret and renews them. It
// reports in the ForeignCluster's PeeringCredentials child, its one writer;
// the summary controller mirrors that into the ForeignCluster's status.
package foreigncluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/children"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/ssa"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// Reasons of the Authenticated condition set by the agent itself; the auth
// service's own reasons (peering.Reason*) are copied as they are.
const (
	ReasonAuthenticated  = "Authenticated"
	ReasonUnreachable    = "Unreachable"
	ReasonCAHashMismatch = "CAHashMismatch"
	ReasonTokenMissing   = "TokenMissing"
	ReasonInvalidSpec    = "InvalidSpec"
)

// FieldManager is the field manager of the PeeringCredentials' status.
const FieldManager = "offload-credentials"

// DefaultHTTPClientTimeout bounds a call to an auth service when
// Reconciler.HTTPClientTimeout is zero.
const DefaultHTTPClientTimeout = 30 * time.Second

// refusedRetryInterval is how long the agent waits before it retries a
// token the provider refused; a spec or token change retries at once.
const refusedRetryInterval = time.Minute

// Reconciler exchanges the peering token of each ForeignCluster with
// outgoing peering enabled for a kubeconfig Secret.
type Reconciler struct {
	// Client writes ForeignClusters and Secrets.
	Client client.Client
	// Reader reads Secrets and the identity ConfigMap in Namespace. It must
	// not be a cache over every namespace; SetupWithManager sets it to the
	// manager's API reader when nil.
	Reader client.Reader
	// Namespace is the install namespace: the identity ConfigMap and the peer Secrets.
	Namespace string
	// HTTPClientTimeout bounds a call to an auth service; zero means DefaultHTTPClientTimeout.
	HTTPClientTimeout time.Duration
	// KubernetesVersion returns this cluster's Kubernetes version, sent to
	// the provider and checked with the provider's against the version
	// policy (peering.CheckKubernetesPair). SetupWithManager asks the
	// manager's API server when nil.
	KubernetesVersion func(context.Context) (string, error)
}

// SetupWithManager registers the reconciler with mgr. It reacts to spec and
// annotation changes of ForeignClusters, not to its own status updates.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Reader == nil {
		r.Reader = mgr.GetAPIReader()
	}
	if r.KubernetesVersion == nil {
		dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
		if err != nil {
			return fmt.Errorf("creating the discovery client: %w", err)
		}
		r.KubernetesVersion = peering.KubernetesVersionOf(dc)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("foreigncluster").
		For(&offloadv1alpha1.ForeignCluster{}, builder.WithPredicates(
			predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		// The virtual node says when the provider refused its credentials.
		Watches(&offloadv1alpha1.VirtualNode{},
			handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &offloadv1alpha1.ForeignCluster{}, handler.OnlyControllerOwner()),
			builder.WithPredicates(credentialsRefused)).
		Complete(r)
}

// +kubebuilder:rbac:groups=offload.io,resources=foreignclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=offload.io,resources=peeringcredentials;peeringcredentials/status,verbs=get;list;watch;create;patch
// In the install namespace only (the chart's Role offload-controller-manager):
// Secrets get, create, delete; ConfigMaps get.

// Reconcile authenticates with the provider of the ForeignCluster, keeps
// the credentials fresh, and unpeers when the ForeignCluster is deleted.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	var fc offloadv1alpha1.ForeignCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &fc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !fc.DeletionTimestamp.IsZero() {
		return r.unpeer(ctx, logger, &fc)
	}
	if !fc.Spec.OutgoingPeering.Enabled {
		return ctrl.Result{}, nil
	}
	// The finalizer goes on before the token is spent, so that a deletion
	// always reaches the provider.
	if controllerutil.AddFinalizer(&fc, offloadv1alpha1.FinalizerUnpeer) {
		if err := r.Client.Update(ctx, &fc); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer %s: %w", offloadv1alpha1.FinalizerUnpeer, err)
		}
	}
	kubeconfig, err := r.getSecret(ctx, peering.PeerKubeconfigSecretName(fc.Name))
	if err != nil {
		return ctrl.Result{}, err
	}
	pc, err := r.credentials(ctx, &fc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if kubeconfig == nil {
		res, err := r.authenticate(ctx, logger, &fc, pc)
		if err != nil || !res.IsZero() {
			return res, errors.Join(err, r.observeToken(ctx, &fc, pc))
		}
		if kubeconfig, err = r.getSecret(ctx, peering.PeerKubeconfigSecretName(fc.Name)); err != nil || kubeconfig == nil {
			return ctrl.Result{}, errors.Join(err, errors.New("the kubeconfig Secret vanished right after it was written"))
		}
	}
	// The virtual node saw a 401, or this controller did before: ask the
	// provider whether it still accepts the credentials.
	refused, err := r.unauthorizedReported(ctx, &fc, pc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if refused {
		revoked, err := r.credentialsRevoked(ctx, &fc, kubeconfig)
		switch {
		case revoked:
			logger.Info("The provider no longer accepts the credentials", "foreignCluster", klog.KObj(&fc))
			return ctrl.Result{RequeueAfter: refusedRetryInterval}, r.setFailed(ctx, pc, offloadv1alpha1.ReasonUnauthorized, revokedMessage(fc.Name))
		case err != nil:
			logger.Info("Cannot check the credentials with the provider", "foreignCluster", klog.KObj(&fc), "error", err.Error())
			if c := meta.FindStatusCondition(pc.Status.Conditions, offloadv1alpha1.ConditionAuthenticated); c != nil && c.Reason == offloadv1alpha1.ReasonUnauthorized {
				// No verdict: the refusal stands until the provider accepts the credentials.
				return ctrl.Result{RequeueAfter: refusedRetryInterval}, nil
			}
		}
	}
	if err := r.authenticated(ctx, pc, kubeconfig); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.observeToken(ctx, &fc, pc); err != nil {
		return ctrl.Result{}, err
	}
	return r.rotate(ctx, logger, &fc, pc, kubeconfig)
}

// authenticate exchanges the token for credentials and writes them into the
// kubeconfig Secret. A non-zero result or an error means it did not, and
// that the condition says why.
func (r *Reconciler) authenticate(ctx context.Context, logger klog.Logger, fc *offloadv1alpha1.ForeignCluster, pc *offloadv1alpha1.PeeringCredentials) (ctrl.Result, error) {
	if fc.Spec.AuthURL == "" || fc.Spec.CACertHash == "" {
		return ctrl.Result{}, r.setFailed(ctx, pc, ReasonInvalidSpec,
			"spec.authURL and spec.caCertHash are required for outgoing peering: run kubectl offload peer out-of-band with the command peer generate printed")
	}
	tokenSecret, err := r.getSecret(ctx, peering.PeerTokenSecretName(fc.Name))
	if err != nil {
		return ctrl.Result{}, err
	}
	if tokenSecret == nil || len(tokenSecret.Data[peering.PeerTokenKey]) == 0 {
		return ctrl.Result{RequeueAfter: refusedRetryInterval}, r.setFailed(ctx, pc, ReasonTokenMissing, fmt.Sprintf(
			"no peering token in Secret %s: generate one on the provider with `kubectl offload peer generate` and run the command it prints here",
			peering.PeerTokenSecretName(fc.Name)))
	}
	identity, err := peering.ReadIdentity(ctx, r.Reader, r.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	own, err := r.kubernetesVersion(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if refused := peering.CheckKubernetesPair(own, ""); refused != nil {
		// Refused here, before the token is spent.
		return ctrl.Result{RequeueAfter: refusedRetryInterval}, r.setFailed(ctx, pc, refused.Reason, refused.Message)
	}
	auth := r.authClient(fc)
	resp, err := auth.Peer(ctx, peering.PeerRequest{
		Token:             peering.PeerToken(tokenSecret),
		ClusterID:         identity.ID,
		ClusterName:       identity.Name,
		ProviderClusterID: fc.Spec.ClusterID,
		KubernetesVersion: own,
	})
	var pinErr *peering.PinError
	var authErr *peering.Error
	switch {
	case errors.As(err, &pinErr):
		logger.Info("The auth server's CA does not match the pin", "foreignCluster", klog.KObj(fc), "authURL", fc.Spec.AuthURL, "reason", pinErr.Reason)
		return ctrl.Result{}, errors.Join(r.setFailed(ctx, pc, ReasonCAHashMismatch,
			"the auth server's CA does not match --ca-cert-hash: "+pinErr.Reason+"; check --auth-url and --ca-cert-hash against what kubectl offload peer generate printed"), err)
	case errors.As(err, &authErr):
		logger.Info("The auth service refused the peering", "foreignCluster", klog.KObj(fc), "status", authErr.Status, "reason", authErr.Reason)
		if setErr := r.setFailed(ctx, pc, authErr.Reason, authErr.Message); setErr != nil {
			return ctrl.Result{}, setErr
		}
		if authErr.Status >= http.StatusInternalServerError {
			return ctrl.Result{}, authErr // retried with backoff
		}
		// 4xx: the same token will not do better; wait for a new one.
		return ctrl.Result{RequeueAfter: refusedRetryInterval}, nil
	case err != nil:
		// Often transient (a NodePort kube-proxy has not programmed yet, a
		// provider restarting): Unknown, so that peer --wait keeps waiting
		// while the agent retries with backoff, and shows this on timeout.
		return ctrl.Result{}, errors.Join(r.setPending(ctx, pc, ReasonUnreachable,
			fmt.Sprintf("cannot reach the auth service at %s: %v; retrying; check that --auth-url is reachable from this cluster", fc.Spec.AuthURL, err)), err)
	}
	if resp.ClusterID != "" && resp.ClusterID != fc.Spec.ClusterID {
		return ctrl.Result{RequeueAfter: refusedRetryInterval}, r.setFailed(ctx, pc, peering.ReasonWrongCluster, fmt.Sprintf(
			"the auth service answered as cluster %s, not %s: check --cluster-id", resp.ClusterID, fc.Spec.ClusterID))
	}
	if refused := peering.CheckKubernetesPair(own, resp.KubernetesVersion); refused != nil {
		// A provider of another release, whose policy let the pair through:
		// the credentials go back (its tenant is removed), none is kept.
		if err := auth.Unpeer(ctx, resp.Credentials.Token, identity.ID); err != nil {
			logger.Info("Could not hand back the credentials of a refused provider", "foreignCluster", klog.KObj(fc), "error", err.Error())
		}
		return ctrl.Result{RequeueAfter: refusedRetryInterval}, r.setFailed(ctx, pc, refused.Reason, refused.Message+"; the credentials it issued were handed back")
	}
	secret, err := r.kubeconfigSecret(fc, resp.Credentials)
	if errors.Is(err, peering.ErrInsecureCredentials) {
		return ctrl.Result{RequeueAfter: refusedRetryInterval}, r.setFailed(ctx, pc, ReasonInsecureProvider,
			fmt.Sprintf("%v; the credentials were not kept: peer again once the provider is fixed", err))
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	// The token is spent: the credentials must be kept whatever happens next.
	if err := r.Client.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("storing the credentials in Secret %s: %w", secret.Name, err)
	}
	logger.Info("Authenticated with the provider", "foreignCluster", klog.KObj(fc), "tenantNamespace", resp.Credentials.TenantNamespace,
		"expiration", resp.Credentials.ExpirationTimestamp)
	now := metav1.Now()
	pc.Status.LastSeen = &now
	return ctrl.Result{}, nil
}

// kubernetesVersion is this cluster's Kubernetes version, or "" when
// Reconciler.KubernetesVersion is not set.
func (r *Reconciler) kubernetesVersion(ctx context.Context) (string, error) {
	if r.KubernetesVersion == nil {
		return "", nil
	}
	v, err := r.KubernetesVersion(ctx)
	if err != nil {
		return "", fmt.Errorf("asking the API server for its Kubernetes version: %w", err)
	}
	return v, nil
}

// authenticated finishes a peering whose kubeconfig Secret exists: it
// deletes the spent token and reports the credentials.
func (r *Reconciler) authenticated(ctx context.Context, pc *offloadv1alpha1.PeeringCredentials, kubeconfig *corev1.Secret) error {
	tokenSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: peering.PeerTokenSecretName(pc.Name)}}
	if err := r.Client.Delete(ctx, tokenSecret); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the spent token Secret %s: %w", tokenSecret.Name, err)
	}
	before := pc.Status.DeepCopy()
	cfg, _, err := peering.TenantConfig(pc.Name, kubeconfig.Data[peering.PeerKubeconfigKey])
	if err != nil {
		return err
	}
	pc.Status.APIServerURL = cfg.Host
	// A failed renewal stands until a renewal succeeds (rotate).
	if !renewalFailed(pc) {
		meta.SetStatusCondition(&pc.Status.Conditions, metav1.Condition{
			Type: offloadv1alpha1.ConditionAuthenticated, Status: metav1.ConditionTrue, Reason: ReasonAuthenticated,
			Message: "the provider issued credentials, kept in Secret " + kubeconfig.Name, ObservedGeneration: pc.Generation,
		})
		pc.Status.Phase = offloadv1alpha1.PhaseEstablished
	}
	if expiry, _, err := peering.CredentialTimes(kubeconfig); err == nil {
		pc.Status.Expiry = &metav1.Time{Time: expiry}
	}
	if equality.Semantic.DeepEqual(before, &pc.Status) {
		return nil
	}
	return r.writeStatus(ctx, pc)
}

// setPending sets Authenticated=Unknown with reason and message, and auth Pending.
func (r *Reconciler) setPending(ctx context.Context, pc *offloadv1alpha1.PeeringCredentials, reason, message string) error {
	return r.setAuth(ctx, pc, metav1.ConditionUnknown, offloadv1alpha1.PhasePending, reason, message)
}

// setFailed sets Authenticated=False with reason and message, and auth Failed.
func (r *Reconciler) setFailed(ctx context.Context, pc *offloadv1alpha1.PeeringCredentials, reason, message string) error {
	return r.setAuth(ctx, pc, metav1.ConditionFalse, offloadv1alpha1.PhaseFailed, reason, message)
}

// setAuth writes Authenticated and the auth phase.
func (r *Reconciler) setAuth(ctx context.Context, pc *offloadv1alpha1.PeeringCredentials, status metav1.ConditionStatus, phase offloadv1alpha1.PeeringPhase, reason, message string) error {
	meta.SetStatusCondition(&pc.Status.Conditions, metav1.Condition{
		Type: offloadv1alpha1.ConditionAuthenticated, Status: status, Reason: reason,
		Message: message, ObservedGeneration: pc.Generation,
	})
	pc.Status.Phase = phase
	return r.writeStatus(ctx, pc)
}

// writeStatus applies pc's status, as the one writer of it.
func (r *Reconciler) writeStatus(ctx context.Context, pc *offloadv1alpha1.PeeringCredentials) error {
	if err := ssa.ApplyStatus(ctx, r.Client, pc, pc.Status, FieldManager); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("writing the status of PeeringCredentials %s: %w", pc.Name, err)
	}
	return nil
}

// credentials returns fc's PeeringCredentials, created if need be; ones
// an earlier ForeignCluster of the same name left are replaced. It reads
// them from the API server, not a cache: the status is applied whole, so
// it must start from the last one written.
func (r *Reconciler) credentials(ctx context.Context, fc *offloadv1alpha1.ForeignCluster) (*offloadv1alpha1.PeeringCredentials, error) {
	return children.Ensure(ctx, r.Client, r.Reader, fc, &offloadv1alpha1.PeeringCredentials{
		ObjectMeta: metav1.ObjectMeta{Name: fc.Name},
		Spec:       offloadv1alpha1.PeeringCredentialsSpec{SecretName: peering.PeerKubeconfigSecretName(fc.Name)},
	}, &offloadv1alpha1.PeeringCredentials{})
}

// kubeconfigSecret builds the Secret holding creds, owned by fc.
func (r *Reconciler) kubeconfigSecret(fc *offloadv1alpha1.ForeignCluster, creds peering.Credentials) (*corev1.Secret, error) {
	s, err := peering.NewKubeconfigSecret(r.Namespace, fc.Name, creds, time.Now())
	if err != nil {
		return nil, err
	}
	if err := controllerutil.SetOwnerReference(fc, s, r.Client.Scheme()); err != nil {
		return nil, fmt.Errorf("owning the kubeconfig Secret: %w", err)
	}
	return s, nil
}

// getSecret returns the Secret name of the install namespace, or nil.
func (r *Reconciler) getSecret(ctx context.Context, name string) (*corev1.Secret, error) {
	var s corev1.Secret
	err := r.Reader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	return &s, nil
}

// observeToken records, once the status answers it, which token the agent
// acted on (the ForeignCluster's peering.TokenIDAnnotation), so that peer
// out-of-band --wait knows the conditions it reads are about the token it
// stored.
func (r *Reconciler) observeToken(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, pc *offloadv1alpha1.PeeringCredentials) error {
	id := fc.Annotations[peering.TokenIDAnnotation]
	if id == "" || pc.Status.ObservedTokenID == id {
		return nil
	}
	pc.Status.ObservedTokenID = id
	return r.writeStatus(ctx, pc)
}
