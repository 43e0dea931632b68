package podreflection

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// Service-account tokens of offloaded pods are requested from the consumer,
// bound to the pod (they die with it) and valid for tokenLifetime; they are
// renewed once less than tokenRenewBefore of their life is left, as the
// kubelet does for projected tokens.
const (
	tokenLifetime    = time.Hour
	tokenRenewBefore = 20 * time.Minute
	// annotationTokenExpiry records, on the token Secret, when its token expires (RFC 3339).
	annotationTokenExpiry = "offload.io/token-expiry"
	// rootCAConfigMap holds the consumer's CA in every namespace.
	rootCAConfigMap = "kube-root-ca.crt"
)

// podOrigin is the reflection origin of pod in twin namespace twin: with
// the name of its token Secret when the pod mounts a service-account token.
func (h *Handler) podOrigin(twin string, pod *corev1.Pod) reflection.Origin {
	o := h.origin(twin)
	if reflection.NeedsToken(pod) {
		o.ServiceAccountTokenSecret = reflection.TokenSecretName(pod.Name)
	}
	h.podClaims(&o, pod)
	return o
}

// podClaims records in o the remote claims of the claims pod mounts, and
// why those that have none do not.
func (h *Handler) podClaims(o *reflection.Origin, pod *corev1.Pod) {
	if h.opts.Claims == nil {
		return
	}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		name := v.PersistentVolumeClaim.ClaimName
		ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
		remote, err := h.opts.Claims(ctx, pod.Namespace, name, o.TwinNamespace)
		cancel()
		if err != nil {
			if o.ClaimProblems == nil {
				o.ClaimProblems = map[string]string{}
			}
			o.ClaimProblems[name] = err.Error()
			continue
		}
		if o.Claims == nil {
			o.Claims = map[string]string{}
		}
		o.Claims[name] = remote
	}
}

// reflectToken writes the token Secret of pod into o.TwinNamespace, with a
// new token when the one there is missing, of another pod, or due for
// renewal. create says the pod is new, so the Secret is created first
// without reading it.
func (h *Handler) reflectToken(ctx context.Context, pod *corev1.Pod, o reflection.Origin, create bool) error {
	if o.ServiceAccountTokenSecret == "" {
		return nil
	}
	secrets := h.opts.Provider.CoreV1().Secrets(o.TwinNamespace)
	if create {
		// A new pod: no Secret yet, most likely.
		desired, err := h.tokenSecret(ctx, pod, o)
		if err != nil {
			return err
		}
		_, err = secrets.Create(ctx, desired, metav1.CreateOptions{})
		if err == nil {
			h.rememberToken(pod.UID, desired)
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the token Secret of %s: %w", klog.KObj(pod), err)
		}
	}
	existing, err := secrets.Get(ctx, o.ServiceAccountTokenSecret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		existing = nil
	case err != nil:
		return fmt.Errorf("reading the token Secret of %s: %w", klog.KObj(pod), err)
	case !tokenDue(existing, pod, time.Now()):
		h.rememberToken(pod.UID, existing)
		return nil
	}
	desired, err := h.tokenSecret(ctx, pod, o)
	if err != nil {
		return err
	}
	if existing == nil {
		_, err := secrets.Create(ctx, desired, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the token Secret of %s: %w", klog.KObj(pod), err)
		}
		if err == nil {
			h.rememberToken(pod.UID, desired)
		}
		return nil
	}
	if !reflection.IsReflection(existing, h.opts.ConsumerClusterID) {
		return fmt.Errorf("secret %s in twin namespace %s was not created by offload for this cluster: delete it on the provider", existing.Name, o.TwinNamespace)
	}
	desired.ResourceVersion = existing.ResourceVersion
	if _, err := secrets.Update(ctx, desired, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renewing the token Secret of %s: %w", klog.KObj(pod), err)
	}
	h.rememberToken(pod.UID, desired)
	h.opts.Logger.V(1).Info("Renewed the service-account token of a pod", "pod", klog.KObj(pod))
	return nil
}

// tokenDue reports whether the token Secret s must get a new token for pod.
func tokenDue(s *corev1.Secret, pod *corev1.Pod, now time.Time) bool {
	expiry, ok := tokenExpiry(s, pod.UID)
	return !ok || expiry.Sub(now) < tokenRenewBefore
}

// tokenExpiry returns when the token in Secret s expires, if s holds a
// token of the pod of UID uid with a readable expiry.
func tokenExpiry(s *corev1.Secret, uid types.UID) (time.Time, bool) {
	if s.Labels[offloadv1alpha1.LabelOriginPodUID] != string(uid) {
		return time.Time{}, false
	}
	expiry, err := time.Parse(time.RFC3339, s.Annotations[annotationTokenExpiry])
	return expiry, err == nil
}

// tokenSecret requests a token for pod's service account, bound to pod,
// and returns its Secret.
func (h *Handler) tokenSecret(ctx context.Context, pod *corev1.Pod, o reflection.Origin) (*corev1.Secret, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(tokenLifetime / time.Second)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	tr, err := h.opts.Consumer.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, tr, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token of service account %s/%s for pod %s: %w", pod.Namespace, sa, pod.Name, err)
	}
	ca, err := h.consumerCA(ctx, pod.Namespace)
	if err != nil {
		return nil, err
	}
	s := reflection.RemoteTokenSecret(pod, o, []byte(tr.Status.Token), ca)
	s.Annotations[annotationTokenExpiry] = tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339)
	return s, nil
}

// rememberToken records when the token of Secret s, of the consumer pod
// of UID uid, expires.
func (h *Handler) rememberToken(uid types.UID, s *corev1.Secret) {
	expiry, ok := tokenExpiry(s, uid)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tokens == nil {
		h.tokens = map[types.UID]time.Time{}
	}
	h.tokens[uid] = expiry
}

// knownNotDue reports whether the token Secret of the pod of UID uid holds
// a token this handler wrote or read that is not due for renewal at now.
func (h *Handler) knownNotDue(uid types.UID, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	expiry, ok := h.tokens[uid]
	return ok && expiry.Sub(now) >= tokenRenewBefore
}

// forgetTokens drops what rememberToken recorded of the pods that keep
// does not report.
func (h *Handler) forgetTokens(keep func(types.UID) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for uid := range h.tokens {
		if !keep(uid) {
			delete(h.tokens, uid)
		}
	}
}

// RenewTokens renews the token Secrets of the pods bound to the virtual
// node that are due. The Secrets of tokens the handler knows are not due
// are not read.
func (h *Handler) RenewTokens(ctx context.Context) error {
	pods, err := h.localPods(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	current := make(map[types.UID]bool, len(pods))
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || !reflection.NeedsToken(pod) {
			continue
		}
		current[pod.UID] = true
		if h.knownNotDue(pod.UID, now) {
			continue
		}
		ti, err := h.resolve(pod.Namespace)
		if err != nil {
			continue
		}
		if err := h.reflectToken(ctx, pod, h.podOrigin(ti.twin, pod), false); err != nil {
			h.opts.Logger.Info("Cannot renew the service-account token of a pod", "pod", klog.KObj(pod), "error", err.Error())
		}
	}
	h.forgetTokens(func(uid types.UID) bool { return current[uid] })
	return nil
}

// hasTokenVolume reports whether remote mounts a reflected token Secret.
func hasTokenVolume(remote *corev1.Pod) bool {
	name := reflection.TokenSecretName(remote.Name)
	for _, v := range remote.Spec.Volumes {
		if mountsSecret(v, name) {
			return true
		}
	}
	return false
}

// mountsSecret reports whether volume v mounts Secret name, whole or
// projected.
func mountsSecret(v corev1.Volume, name string) bool {
	if v.Secret != nil && v.Secret.SecretName == name {
		return true
	}
	if v.Projected != nil {
		for _, src := range v.Projected.Sources {
			if src.Secret != nil && src.Secret.Name == name {
				return true
			}
		}
	}
	return false
}

// deleteToken deletes the token Secret of the remote pod twin/name of the
// consumer pod uid, if it is still that pod's.
func (h *Handler) deleteToken(ctx context.Context, twin, name string, uid types.UID) {
	secrets := h.opts.Provider.CoreV1().Secrets(twin)
	s, err := secrets.Get(ctx, reflection.TokenSecretName(name), metav1.GetOptions{})
	if err != nil || s.Labels[offloadv1alpha1.LabelOriginPodUID] != string(uid) || !reflection.IsReflection(s, h.opts.ConsumerClusterID) {
		return
	}
	err = secrets.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(s.UID))})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		h.opts.Logger.Info("Cannot delete the token Secret of a deleted pod", "secret", klog.KObj(s), "error", err.Error())
	}
}

// caCacheTTL is how long the consumer CA read from a namespace's
// kube-root-ca.crt is reused for the token Secrets of its pods.
const caCacheTTL = time.Minute

// cachedCA is the consumer CA as read from one namespace.
type cachedCA struct {
	ca   []byte
	read time.Time
}

// consumerCA returns the consumer's CA bundle from ConfigMap
// kube-root-ca.crt of namespace ns, read at most once per caCacheTTL.
func (h *Handler) consumerCA(ctx context.Context, ns string) ([]byte, error) {
	h.mu.Lock()
	c, ok := h.cas[ns]
	h.mu.Unlock()
	if ok && time.Since(c.read) < caCacheTTL {
		return c.ca, nil
	}
	var ca []byte
	cm, err := h.opts.Consumer.CoreV1().ConfigMaps(ns).Get(ctx, rootCAConfigMap, metav1.GetOptions{})
	switch {
	case err == nil:
		ca = []byte(cm.Data["ca.crt"])
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", ns, rootCAConfigMap, err)
	}
	h.mu.Lock()
	if h.cas == nil {
		h.cas = map[string]cachedCA{}
	}
	h.cas[ns] = cachedCA{ca: ca, read: time.Now()}
	h.mu.Unlock()
	return ca, nil
}
