package peering

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// DeleteForeignCluster ends the outgoing peering of fc: it deletes fc, whose
// finalizers make the consumer's agent release its tenant on the provider.
// With force it first annotates fc (offloadv1alpha1.AnnotationForceUnpeer)
// so that the agent skips the provider, which may be gone. A fc already
// gone is no error.
func DeleteForeignCluster(ctx context.Context, c client.Client, fc *offloadv1alpha1.ForeignCluster, force bool) error {
	if force && fc.Annotations[offloadv1alpha1.AnnotationForceUnpeer] != "true" {
		patch := client.MergeFrom(fc.DeepCopy())
		metav1.SetMetaDataAnnotation(&fc.ObjectMeta, offloadv1alpha1.AnnotationForceUnpeer, "true")
		if err := c.Patch(ctx, fc, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("marking ForeignCluster %s for a forced unpeering: %w", fc.Name, err)
		}
	}
	if err := c.Delete(ctx, fc); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting ForeignCluster %s: %w", fc.Name, err)
	}
	return nil
}
