package tenant

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// AdoptTokenPolicy gives Tenant t the policy of the peering token that last
// peered it (offloadv1alpha1.AnnotationPeeringToken), once per token: the
// auth service, which faces the internet, never writes a Tenant's policy
// (offload-auth-scope), and the token, which the provider's admin made,
// is the policy's one source. The token is read with reader from namespace,
// and is taken only when it was used by t's cluster (or is reusable) and,
// when bound, is bound to t's name; otherwise t keeps the policy it has
// (PendingPolicy for a new Tenant). It reports whether it changed t.
func AdoptTokenPolicy(ctx context.Context, c client.Client, reader client.Reader, namespace string, t *offloadv1alpha1.Tenant) (bool, error) {
	id := t.Annotations[offloadv1alpha1.AnnotationPeeringToken]
	if id == "" || t.Annotations[offloadv1alpha1.AnnotationPolicyFromToken] == id {
		return false, nil
	}
	log := klog.FromContext(ctx).WithValues("tenant", klog.KObj(t), "tokenID", id)
	policy, why, err := tokenPolicy(ctx, reader, namespace, id, t)
	if err != nil {
		return false, err
	}
	patch := client.MergeFrom(t.DeepCopy())
	t.Annotations[offloadv1alpha1.AnnotationPolicyFromToken] = id
	if why != "" {
		log.Info("Kept the tenant's policy: its peering token grants none to it", "why", why, "podSecurity", t.Spec.Policy.Level())
	} else {
		t.Spec.Policy = *policy
	}
	if err := c.Patch(ctx, t, patch); err != nil {
		return false, fmt.Errorf("giving Tenant %s the policy of peering token %s: %w", t.Name, id, err)
	}
	if why == "" {
		log.Info("Gave the tenant its peering token's policy", "podSecurity", policy.Level(), "nodePlacement", policy.NodePlacement,
			"sameNameNamespaces", policy.SameNameNamespaces, "unlimitedContainers", policy.UnlimitedContainers, "nodeSelector", offloadv1alpha1.NodeSelectorString(policy.NodeSelector),
			"tolerations", offloadv1alpha1.TolerationsString(policy.Tolerations), "extendedResources", peering.ExtendedResourcesString(policy.ExtendedResources),
			"storage", peering.StorageString(policy.Storage))
	}
	return true, nil
}

// tokenPolicy reads the policy token id grants t, or why it grants none.
func tokenPolicy(ctx context.Context, reader client.Reader, namespace, id string, t *offloadv1alpha1.Tenant) (*offloadv1alpha1.ConsumerPolicy, string, error) {
	var cm corev1.ConfigMap
	err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: peering.TokenConfigMapName(id)}, &cm)
	if apierrors.IsNotFound(err) {
		return nil, "the token is gone", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading peering token %s: %w", id, err)
	}
	tok, err := peering.ReadTokenConfigMap(&cm)
	switch {
	case err != nil:
		return nil, err.Error(), nil
	case tok.UsedAt.IsZero():
		return nil, "the token was never used", nil
	case !tok.Reusable && tok.UsedBy != t.Spec.ClusterID:
		return nil, "another cluster used the token", nil
	case tok.Consumer != "" && tok.Consumer != t.Name:
		return nil, "the token is bound to another consumer", nil
	}
	return &tok.Policy, "", nil
}
