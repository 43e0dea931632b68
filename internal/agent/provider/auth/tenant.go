package auth

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// cleanupTimeout bounds the deletions that undo a failed peering.
const cleanupTimeout = 30 * time.Second

// validateConsumer checks a consumer's cluster ID and name before anything
// is created for it.
func validateConsumer(id, name, selfID string) error {
	bad := func(format string, args ...any) error {
		return &peering.Error{Reason: peering.ReasonMalformedRequest, Message: fmt.Sprintf(format, args...), Status: http.StatusBadRequest}
	}
	if id == "" || name == "" {
		return bad("the request needs the consumer's clusterID and clusterName: upgrade kubectl-offload on the consumer")
	}
	if errs := validation.IsValidLabelValue(id); len(errs) > 0 {
		return bad("the consumer clusterID is invalid: %s", errs[0])
	}
	if err := peering.ValidateConsumerName(name); err != nil {
		return bad("the consumer clusterName %v", err)
	}
	if id == selfID {
		return bad("a cluster cannot peer with itself: run the peer command on another cluster")
	}
	return nil
}

func tenantConflict(format string, args ...any) error {
	return &peering.Error{Reason: peering.ReasonTenantConflict, Message: fmt.Sprintf(format, args...), Status: http.StatusConflict}
}

// checkTenantFree refuses, before the token is spent, a consumer name that
// another cluster already uses, and a cluster ID that another tenant holds:
// a cluster ID belongs to the tenant that first peered with it, so a second
// consumer claiming it cannot reach the first one's twin namespaces. A
// tenant that exists is peered again only with a token its provider's
// admin bound to it: its name and cluster ID are no secret, so anyone with
// another token could otherwise take its place, its credentials and pods.
func (p *Peering) checkTenantFree(ctx context.Context, id, name string, bound bool) error {
	var same offloadv1alpha1.TenantList
	if err := p.client.List(ctx, &same, client.MatchingLabels{offloadv1alpha1.LabelTenant: id}); err != nil {
		return fmt.Errorf("listing the tenants of cluster ID %s: %w", id, err)
	}
	for _, t := range same.Items {
		if t.Name != name || t.Spec.ClusterID != id {
			return tenantConflict("cluster ID %s is already peered with this provider under another name: a cluster ID belongs to one consumer; unpeer that one first, or peer from the cluster that owns the ID", id)
		}
	}
	var t offloadv1alpha1.Tenant
	err := p.client.Get(ctx, client.ObjectKey{Name: name}, &t)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading tenant %s: %w", name, err)
	}
	if err := verifyTenant(&t, id, name); err != nil {
		return err
	}
	if !bound {
		return &peering.Error{Reason: peering.ReasonTenantExists, Status: http.StatusConflict, Message: fmt.Sprintf(
			"consumer %s is already peered with this provider, and a tenant belongs to the cluster that first peered with it: "+
				"to peer it again, ask the provider's admin for a token bound to it (kubectl offload peer generate --consumer %s), or to unpeer it there first",
			name, name)}
	}
	return nil
}

func verifyTenant(t *offloadv1alpha1.Tenant, id, name string) error {
	if t.Spec.ClusterID != id {
		return tenantConflict("another cluster named %s is already peered with this provider: unpeer it first, or peer from a cluster with another name", name)
	}
	if t.DeletionTimestamp != nil || t.Spec.TenantNamespace != offloadv1alpha1.TenantNamespace(name) {
		return tenantConflict("the tenant %s is being removed: retry in a minute", name)
	}
	return nil
}

// provision creates, in order, the Tenant, its namespace, its budget (a
// ResourceQuota), the consumer's ServiceAccount and its RoleBinding, and
// adopts those that already exist for the same consumer. When a step fails
// it deletes what this call created, so no half-made tenant is left behind.
//
// The Tenant names token tokenID, which peered it, and has
// PendingPolicy: the auth service never writes a policy
// (offload-auth-scope); the controller-manager gives the Tenant the one its
// token grants (tenant.AdoptTokenPolicy). Once every step succeeded, a
// Tenant that already existed is given tokenID's name: the newest token is
// the provider's newest choice.
func (p *Peering) provision(ctx context.Context, id, name, tokenID string, log klog.Logger) (_ *offloadv1alpha1.Tenant, _ func(), err error) {
	var created []client.Object
	undo := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		for i := len(created) - 1; i >= 0; i-- {
			o := created[i]
			remove := p.deleteIfExists
			if t, ok := o.(*offloadv1alpha1.Tenant); ok {
				remove = func(ctx context.Context, _ client.Object) error { return p.unpeer(ctx, t) }
			}
			if err := remove(dctx, o); err != nil {
				log.Error(err, "Undoing a failed peering", "object", klog.KObj(o), "kind", fmt.Sprintf("%T", o))
			}
		}
	}
	defer func() {
		if err != nil {
			undo()
		}
	}()
	step := func(o client.Object, verify func() error) error {
		ok, err := p.createOrGet(ctx, o)
		if err != nil {
			return err
		}
		if ok {
			created = append(created, o)
			return nil
		}
		return verify()
	}

	ns := offloadv1alpha1.TenantNamespace(name)
	t := &offloadv1alpha1.Tenant{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: map[string]string{offloadv1alpha1.LabelTenant: id},
			Annotations: map[string]string{offloadv1alpha1.AnnotationPeeringToken: tokenID},
			// The tenant controller of the controller-manager owns the teardown.
			Finalizers: []string{offloadv1alpha1.FinalizerTenant},
		},
		Spec: offloadv1alpha1.TenantSpec{ClusterID: id, ClusterName: name, TenantNamespace: ns, Policy: offloadv1alpha1.PendingPolicy()},
	}
	if err := step(t, func() error { return verifyTenant(t, id, name) }); err != nil {
		return nil, nil, err
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{offloadv1alpha1.LabelTenant: id}}}
	if err := step(nsObj, func() error {
		if nsObj.Labels[offloadv1alpha1.LabelTenant] != id {
			return tenantConflict("namespace %s exists and does not belong to this consumer: delete it on the provider, or peer from a cluster with another name", ns)
		}
		if nsObj.DeletionTimestamp != nil {
			return tenantConflict("namespace %s is being deleted after an unpeering: retry once it is gone", ns)
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	// The budget comes before any credential: a consumer never holds one
	// while its tenant namespace is unbounded. One the provider's admin
	// changed is kept.
	budget := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.TenantBudgetName, Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: offloadv1alpha1.TenantBudget()}}
	if err := step(budget, func() error { return nil }); err != nil {
		return nil, nil, err
	}
	if err := p.seedQuotaStatus(ctx, budget); err != nil {
		return nil, nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: ns}}
	if err := step(sa, func() error { return nil }); err != nil {
		return nil, nil, err
	}
	subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: ns}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.TenantRole, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: offloadv1alpha1.TenantRole},
		Subjects:   []rbacv1.Subject{subject},
	}
	if err := step(rb, func() error {
		if rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.Name != offloadv1alpha1.TenantRole || len(rb.Subjects) != 1 || rb.Subjects[0] != subject {
			return fmt.Errorf("RoleBinding %s/%s grants something else than ClusterRole %s to %s", ns, offloadv1alpha1.TenantRole, offloadv1alpha1.TenantRole, offloadv1alpha1.ConsumerServiceAccount)
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	if err := p.nameToken(ctx, t, tokenID, log); err != nil {
		return nil, nil, err
	}
	return t, undo, nil
}

// nameToken records on Tenant t that token tokenID peered it last, when
// another one did before.
func (p *Peering) nameToken(ctx context.Context, t *offloadv1alpha1.Tenant, tokenID string, log klog.Logger) error {
	if t.Annotations[offloadv1alpha1.AnnotationPeeringToken] == tokenID {
		return nil
	}
	patch := client.MergeFrom(t.DeepCopy())
	if t.Annotations == nil {
		t.Annotations = map[string]string{}
	}
	t.Annotations[offloadv1alpha1.AnnotationPeeringToken] = tokenID
	if err := p.client.Patch(ctx, t, patch); err != nil {
		return fmt.Errorf("recording the new peering token on tenant %s: %w", t.Name, err)
	}
	log.Info("The tenant peered again: it gets the new peering token's policy", "tenant", t.Name, "tokenID", tokenID)
	return nil
}

// createOrGet creates o or, when it exists, reads it into o. It reports
// whether it created it.
func (p *Peering) createOrGet(ctx context.Context, o client.Object) (bool, error) {
	err := p.client.Create(ctx, o)
	if err == nil {
		return true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("creating %T %s: %w", o, klog.KObj(o), err)
	}
	if err := p.client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
		return false, fmt.Errorf("reading %T %s: %w", o, klog.KObj(o), err)
	}
	return false, nil
}

// seedQuotaStatus counts, in the status of quota q, nothing used of what
// the quota controller has not counted yet. While a quota has no count of a
// resource the API server refuses every object of it, and the controller
// counts objects of a CustomResourceDefinition only once its discovery
// (every 30 s) has seen it, and then at the quota's next full resync, up to
// 5 minutes later: a consumer peering right after the install could
// offload nothing for minutes. The tenant namespace is new, so nothing is
// used; the API server's quota admission counts from there, and the
// controller keeps those counts until it counts itself.
func (p *Peering) seedQuotaStatus(ctx context.Context, q *corev1.ResourceQuota) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := p.client.Get(ctx, client.ObjectKeyFromObject(q), q); err != nil {
			return err
		}
		changed := false
		if len(q.Status.Hard) == 0 {
			q.Status.Hard, changed = q.Spec.Hard.DeepCopy(), true
		}
		if q.Status.Used == nil {
			q.Status.Used = corev1.ResourceList{}
		}
		for name := range q.Status.Hard {
			if _, ok := q.Status.Used[name]; !ok {
				q.Status.Used[name], changed = resource.MustParse("0"), true
			}
		}
		if !changed {
			return nil
		}
		return p.client.Status().Update(ctx, q)
	})
	if err != nil {
		return fmt.Errorf("counting the use of ResourceQuota %s: %w", klog.KObj(q), err)
	}
	return nil
}

func (p *Peering) deleteIfExists(ctx context.Context, o client.Object) error {
	err := p.client.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %T %s: %w", o, klog.KObj(o), err)
	}
	return nil
}

// issue mints a new credential for the tenant: a token of its
// ServiceAccount bound to a new credential Secret, so that deleting the
// Secret revokes it. It records the Secret as the current credential, which
// makes the tenant controller retire the older ones after a grace period,
// and the expiry in the Tenant's status, and returns the credentials.
// peered says a peering token was just spent: that clears a replay.
func (p *Peering) issue(ctx context.Context, t *offloadv1alpha1.Tenant, self peering.Identity, peered bool) (*peering.PeerResponse, error) {
	caCert, err := p.apiServerCA(ctx)
	if err != nil {
		return nil, err
	}
	if !peered && meta.IsStatusConditionTrue(t.Status.Conditions, offloadv1alpha1.ConditionCredentialReplayed) {
		return nil, unauthorized()
	}
	cred := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{GenerateName: offloadv1alpha1.CredentialSecretPrefix, Namespace: t.Spec.TenantNamespace,
			Labels: map[string]string{offloadv1alpha1.LabelCredential: t.Spec.ClusterID}},
		Type: offloadv1alpha1.CredentialSecretType,
	}
	if err := p.client.Create(ctx, cred); err != nil {
		return nil, fmt.Errorf("creating the credential Secret of tenant %s: %w", t.Name, err)
	}
	secs := int64(p.opts.CredentialExpiration / time.Second)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs,
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: cred.Name, UID: cred.UID}}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: t.Spec.TenantNamespace}}
	if err := p.client.SubResource("token").Create(ctx, sa, tr); err != nil {
		_ = p.deleteIfExists(context.WithoutCancel(ctx), cred)
		return nil, fmt.Errorf("requesting a token for ServiceAccount %s: %w", klog.KObj(sa), err)
	}
	expiry := tr.Status.ExpirationTimestamp
	if err := p.recordCredential(ctx, t, cred, expiry, peered); err != nil {
		// The credential is not current: the tenant controller retires it.
		return nil, err
	}
	return &peering.PeerResponse{
		ClusterID:   self.ID,
		ClusterName: self.Name,
		Credentials: peering.Credentials{
			APIServerURL:        p.opts.APIServerURL,
			CACert:              string(caCert),
			Token:               tr.Status.Token,
			ExpirationTimestamp: expiry.UTC(),
			TenantNamespace:     t.Spec.TenantNamespace,
		},
	}, nil
}

// recordCredential makes cred the tenant's current credential, with its
// expiry, under an optimistic lock: the tenant controller edits the list of
// credentials too.
func (p *Peering) recordCredential(ctx context.Context, t *offloadv1alpha1.Tenant, cred *corev1.Secret, expiry metav1.Time, peered bool) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := p.client.Get(ctx, client.ObjectKeyFromObject(t), t); err != nil {
			return err
		}
		patch := client.MergeFromWithOptions(t.DeepCopy(), client.MergeFromWithOptimisticLock{})
		t.Status.CredentialExpiry = &expiry
		t.Status.CurrentCredential = cred.Name
		t.Status.Credentials = append(t.Status.Credentials, offloadv1alpha1.IssuedCredential{
			Name: cred.Name, UID: string(cred.UID), Issued: metav1.Now()})
		if peered && meta.FindStatusCondition(t.Status.Conditions, offloadv1alpha1.ConditionCredentialReplayed) != nil {
			meta.SetStatusCondition(&t.Status.Conditions, metav1.Condition{Type: offloadv1alpha1.ConditionCredentialReplayed,
				Status: metav1.ConditionFalse, Reason: offloadv1alpha1.ReasonPeeredAgain, ObservedGeneration: t.Generation,
				Message: "the consumer peered again with a new peering token"})
		}
		return p.client.Status().Patch(ctx, t, patch)
	})
	if err != nil {
		return fmt.Errorf("recording the credential of tenant %s: %w", t.Name, err)
	}
	return nil
}

// apiServerCA returns the configured CA bundle of the API server, or else
// the one in ConfigMap kube-root-ca.crt of the agent's namespace.
func (p *Peering) apiServerCA(ctx context.Context) ([]byte, error) {
	if len(p.opts.APIServerCA) > 0 {
		return p.opts.APIServerCA, nil
	}
	var cm corev1.ConfigMap
	key := client.ObjectKey{Namespace: p.opts.Namespace, Name: "kube-root-ca.crt"}
	if err := p.client.Get(ctx, key, &cm); err != nil {
		return nil, fmt.Errorf("reading the API server CA from ConfigMap %s: %w", key, err)
	}
	if cm.Data["ca.crt"] == "" {
		return nil, fmt.Errorf("ConfigMap %s has no ca.crt", key)
	}
	return []byte(cm.Data["ca.crt"]), nil
}

// revocationPoll is how often unpeer looks whether the tenant controller
// revoked the consumer's credentials.
const revocationPoll = 50 * time.Millisecond

// unpeer deletes the Tenant t, whose finalizer makes the tenant controller
// revoke the consumer's credentials and start removing its tenant
// namespace, and waits until the Tenant is gone, so that the credentials no
// longer work when the consumer gets the answer.
func (p *Peering) unpeer(ctx context.Context, t *offloadv1alpha1.Tenant) error {
	if err := p.deleteIfExists(ctx, t); err != nil {
		return err
	}
	err := wait.PollUntilContextCancel(ctx, revocationPoll, true, func(ctx context.Context) (bool, error) {
		err := p.client.Get(ctx, client.ObjectKeyFromObject(t), &offloadv1alpha1.Tenant{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("waiting for the tenant controller of offload-controller-manager to remove Tenant %s: %w", t.Name, err)
	}
	return nil
}

// consumerFromUsername returns the consumer name of a tenant ServiceAccount
// user name, system:serviceaccount:offload-tenant-<name>:offload-consumer.
func consumerFromUsername(username string) (string, bool) {
	parts := strings.Split(username, ":")
	if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" || parts[3] != offloadv1alpha1.ConsumerServiceAccount {
		return "", false
	}
	name, ok := strings.CutPrefix(parts[2], offloadv1alpha1.TenantNamespacePrefix)
	return name, ok && name != ""
}
