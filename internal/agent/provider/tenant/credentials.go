package tenant

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// DefaultCredentialGrace is how long a consumer's previous credentials keep
// working after a new one is issued: long enough for its agent to store the
// new one and for its clients to switch to it, short enough that a copy of
// an old credential is of little use.
const DefaultCredentialGrace = time.Minute

// maxRetired is how many retired credentials a Tenant remembers.
const maxRetired = 16

// retire deletes the credential Secrets of t that are not its current
// credential once the grace period has passed since the current one was
// issued, which revokes their tokens at once, and remembers their UIDs so
// that the auth service recognises a replay. When a replay was detected it
// deletes every one of them at once. It returns how long to wait for the
// next retirement, zero when none is due.
func (r *Reconciler) retire(ctx context.Context, t *offloadv1alpha1.Tenant) (time.Duration, error) {
	replayed := meta.IsStatusConditionTrue(t.Status.Conditions, offloadv1alpha1.ConditionCredentialReplayed)
	var current *offloadv1alpha1.IssuedCredential
	for i := range t.Status.Credentials {
		if c := &t.Status.Credentials[i]; c.Name == t.Status.CurrentCredential && !replayed {
			current = c
		}
	}
	grace := r.CredentialGrace
	if grace == 0 {
		grace = DefaultCredentialGrace
	}
	var due []offloadv1alpha1.IssuedCredential
	var wait time.Duration
	for _, c := range t.Status.Credentials {
		if current != nil && c.Name == current.Name {
			continue
		}
		// A credential issued after the current one is being recorded by
		// the auth service, or its recording failed: it gets its grace too.
		since := c.Issued.Time
		if current != nil && current.Issued.After(since) {
			since = current.Issued.Time
		}
		if left := time.Until(since.Add(grace)); left > 0 && !replayed {
			if wait == 0 || left < wait {
				wait = left
			}
			continue
		}
		due = append(due, c)
	}
	if len(due) == 0 {
		return wait, nil
	}
	// Remember them first, so that a replay is never missed, then delete.
	if err := r.forget(ctx, t, due); err != nil {
		return 0, err
	}
	for _, c := range due {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: t.Spec.TenantNamespace}}
		uid := types.UID(c.UID)
		if err := r.Client.Delete(ctx, s, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return 0, fmt.Errorf("revoking credential %s of tenant %s: %w", c.Name, t.Name, err)
		}
	}
	ctrl.LoggerFrom(ctx).Info("Revoked replaced credentials", "tenant", klog.KObj(t), "count", len(due), "replayed", replayed)
	return wait, nil
}

// forget moves the credentials due from the Tenant's live credentials to
// its retired ones, under an optimistic lock: the auth service adds
// credentials concurrently.
func (r *Reconciler) forget(ctx context.Context, t *offloadv1alpha1.Tenant, due []offloadv1alpha1.IssuedCredential) error {
	patch := client.MergeFromWithOptions(t.DeepCopy(), client.MergeFromWithOptimisticLock{})
	gone := func(c offloadv1alpha1.IssuedCredential) bool {
		return slices.ContainsFunc(due, func(d offloadv1alpha1.IssuedCredential) bool { return d.UID == c.UID })
	}
	t.Status.Credentials = slices.DeleteFunc(t.Status.Credentials, gone)
	for _, c := range due {
		if !slices.Contains(t.Status.RetiredCredentials, c.UID) {
			t.Status.RetiredCredentials = append(t.Status.RetiredCredentials, c.UID)
		}
	}
	if n := len(t.Status.RetiredCredentials); n > maxRetired {
		t.Status.RetiredCredentials = t.Status.RetiredCredentials[n-maxRetired:]
	}
	if err := r.Client.Status().Patch(ctx, t, patch); err != nil {
		return fmt.Errorf("recording the retired credentials of tenant %s: %w", t.Name, err)
	}
	return nil
}
