package podreflection

import (
	"context"
	"fmt"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/objectreflection"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// everything selects every object.
var everything = labels.Everything()

// reflectObjects creates or updates, in o.TwinNamespace, the ConfigMaps and
// Secrets pod references, through the one writer of reflected objects
// (objectreflection.Kind). Objects missing on the consumer are skipped: the
// remote pod then waits for them as a kubelet would, and the object
// reflectors copy them once they exist.
func (h *Handler) reflectObjects(ctx context.Context, pod *corev1.Pod, o reflection.Origin) error {
	configMaps, secrets := reflection.ReferencedObjects(pod)
	for _, name := range sets.List(configMaps) {
		if name == rootCAConfigMap {
			// Never reflected (see reflection.RemoteConfigMap): skip the read.
			continue
		}
		local, err := h.opts.Consumer.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading ConfigMap %s/%s: %w", pod.Namespace, name, err)
		}
		if desired, ok := reflection.RemoteConfigMap(local, o); ok {
			if err := apply(ctx, h, objectreflection.ConfigMaps, desired); err != nil {
				return err
			}
		}
	}
	for _, name := range sets.List(secrets) {
		local, err := h.opts.Consumer.CoreV1().Secrets(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading Secret %s/%s: %w", pod.Namespace, name, err)
		}
		if desired, ok := reflection.RemoteSecret(local, o); ok {
			if err := apply(ctx, h, objectreflection.Secrets, desired); err != nil {
				return err
			}
		}
	}
	return nil
}

// apply writes desired into the provider. A same-named object there that
// reflection did not create makes the pod invalid input: virtual-kubelet
// then reports it on the pod instead of retrying for ever.
func apply[T interface {
	comparable
	metav1.Object
}](ctx context.Context, h *Handler, kind *objectreflection.Kind[T], desired T) error {
	var unknown T
	result, err := kind.Apply(ctx, h.opts.Provider, h.opts.ConsumerClusterID, desired, unknown)
	if err != nil {
		return err
	}
	if result == objectreflection.Conflict {
		return errdefs.AsInvalidInput(fmt.Errorf("%s %s/%s on the provider was not created by offload for this cluster: delete or rename it there",
			kind.Name, desired.GetNamespace(), desired.GetName()))
	}
	return nil
}
