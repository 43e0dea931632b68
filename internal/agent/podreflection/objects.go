package podreflection

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/reflection"
)

// everything selects every object.
var everything = labels.Everything()

// reflectObjects creates or updates, in o.TwinNamespace, the ConfigMaps and
// Secrets pod references. Objects missing on the consumer are skipped: the
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
		desired, ok := reflection.RemoteConfigMap(local, o)
		if !ok {
			continue
		}
		if err := reflectOne(ctx, h, desired, configMapAPI{h}); err != nil {
			return err
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
		desired, ok := reflection.RemoteSecret(local, o)
		if !ok {
			continue
		}
		if err := reflectOne(ctx, h, desired, secretAPI{h}); err != nil {
			return err
		}
	}
	return nil
}

// objectAPI is the provider API of ConfigMaps or Secrets.
type objectAPI[T reflection.Reflected] interface {
	kind() string
	get(ctx context.Context, ns, name string) (T, error)
	create(ctx context.Context, obj T) error
	update(ctx context.Context, obj T) error
	delete(ctx context.Context, ns, name string) error
	meta(obj T) *metav1.ObjectMeta
}

// reflectOne makes the provider's copy of desired match it. It refuses to
// overwrite an object that reflection did not create.
func reflectOne[T reflection.Reflected](ctx context.Context, h *Handler, desired T, api objectAPI[T]) error {
	m := api.meta(desired)
	err := api.create(ctx, desired)
	if err == nil || !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("reflecting %s %s/%s: %w", api.kind(), m.Namespace, m.Name, err)
		}
		return nil
	}
	current, err := api.get(ctx, m.Namespace, m.Name)
	if err != nil {
		return fmt.Errorf("reading the reflected %s %s/%s: %w", api.kind(), m.Namespace, m.Name, err)
	}
	cm := api.meta(current)
	if !reflection.IsReflection(cm, h.opts.ConsumerClusterID) {
		return errdefs.AsInvalidInput(fmt.Errorf("%s %s/%s on the provider was not created by offload for this cluster: delete or rename it there",
			api.kind(), m.Namespace, m.Name))
	}
	if !reflection.NeedsUpdate(current, desired) {
		return nil
	}
	if reflection.NeedsRecreate(current, desired) {
		if err := api.delete(ctx, m.Namespace, m.Name); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replacing the reflected %s %s/%s: %w", api.kind(), m.Namespace, m.Name, err)
		}
		if err := api.create(ctx, desired); err != nil {
			return fmt.Errorf("replacing the reflected %s %s/%s: %w", api.kind(), m.Namespace, m.Name, err)
		}
		return nil
	}
	m.ResourceVersion = cm.ResourceVersion
	if err := api.update(ctx, desired); err != nil {
		return fmt.Errorf("updating the reflected %s %s/%s: %w", api.kind(), m.Namespace, m.Name, err)
	}
	return nil
}

type configMapAPI struct{ h *Handler }

func (configMapAPI) kind() string { return "ConfigMap" }
func (a configMapAPI) get(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return a.h.opts.Provider.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}
func (a configMapAPI) create(ctx context.Context, obj *corev1.ConfigMap) error {
	_, err := a.h.opts.Provider.CoreV1().ConfigMaps(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	return err
}
func (a configMapAPI) update(ctx context.Context, obj *corev1.ConfigMap) error {
	_, err := a.h.opts.Provider.CoreV1().ConfigMaps(obj.Namespace).Update(ctx, obj, metav1.UpdateOptions{})
	return err
}
func (a configMapAPI) delete(ctx context.Context, ns, name string) error {
	return a.h.opts.Provider.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
}
func (configMapAPI) meta(obj *corev1.ConfigMap) *metav1.ObjectMeta { return &obj.ObjectMeta }

type secretAPI struct{ h *Handler }

func (secretAPI) kind() string { return "Secret" }
func (a secretAPI) get(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return a.h.opts.Provider.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}
func (a secretAPI) create(ctx context.Context, obj *corev1.Secret) error {
	_, err := a.h.opts.Provider.CoreV1().Secrets(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	return err
}
func (a secretAPI) update(ctx context.Context, obj *corev1.Secret) error {
	_, err := a.h.opts.Provider.CoreV1().Secrets(obj.Namespace).Update(ctx, obj, metav1.UpdateOptions{})
	return err
}
func (a secretAPI) delete(ctx context.Context, ns, name string) error {
	return a.h.opts.Provider.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{})
}
func (secretAPI) meta(obj *corev1.Secret) *metav1.ObjectMeta { return &obj.ObjectMeta }
