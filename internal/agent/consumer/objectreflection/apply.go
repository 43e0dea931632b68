package objectreflection

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// object is what every reflected type is.
type object interface {
	comparable
	metav1.Object
}

// objectClient is the part of a typed client-go client reflection uses.
type objectClient[T object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// Kind is how copies of objects of type T are written into a provider's
// twin namespaces. It is the one writer of reflected objects: the
// Reflector writes every kind through it, and pod reflection the
// ConfigMaps and Secrets a new pod needs before the Reflector has seen them.
type Kind[T object] struct {
	// Name is the kind, as named in keys, logs and errors.
	Name string
	// Client is the typed client of the kind in namespace ns.
	Client func(c kubernetes.Interface, ns string) objectClient[T]
	// NeedsUpdate and NeedsRecreate compare a copy with the desired one
	// (the pure functions of package reflection).
	NeedsUpdate, NeedsRecreate func(remote, desired T) bool
	// ForUpdate is the object to write to update remote to desired; nil
	// means desired.
	ForUpdate func(remote, desired T) T
}

// Result is what Apply did.
type Result int

// The results of Apply.
const (
	// Unchanged: the copy was already as desired.
	Unchanged Result = iota
	Created
	Updated
	// Recreated: the copy could not be updated in place, so it was deleted
	// and created again.
	Recreated
	// Conflict: the provider has an object of that name that reflection
	// did not create for this consumer; it was left alone.
	Conflict
)

// Apply makes the copy of desired in the provider match it, writing with
// provider as consumerID's tenant. remote is the copy known to exist, from
// a cache; the zero T means none is known, and Apply then creates first
// and reads the copy only when it exists. An object that is not
// reflection's for consumerID is never changed: Apply reports Conflict.
func (k *Kind[T]) Apply(ctx context.Context, provider kubernetes.Interface, consumerID string, desired, remote T) (Result, error) {
	var none T
	api := k.Client(provider, desired.GetNamespace())
	if remote == none {
		_, err := api.Create(ctx, desired, metav1.CreateOptions{})
		if err == nil {
			return Created, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return Unchanged, fmt.Errorf("reflecting %s %s/%s: %w", k.Name, desired.GetNamespace(), desired.GetName(), err)
		}
		if remote, err = api.Get(ctx, desired.GetName(), metav1.GetOptions{}); err != nil {
			return Unchanged, fmt.Errorf("reading the reflected %s %s/%s: %w", k.Name, desired.GetNamespace(), desired.GetName(), err)
		}
	}
	if !reflection.IsReflection(remote, consumerID) {
		return Conflict, nil
	}
	if !k.NeedsUpdate(remote, desired) {
		return Unchanged, nil
	}
	if k.NeedsRecreate(remote, desired) {
		if _, err := k.Delete(ctx, provider, remote); err != nil {
			return Unchanged, err
		}
		if _, err := api.Create(ctx, desired, metav1.CreateOptions{}); err != nil {
			return Unchanged, fmt.Errorf("replacing the reflected %s %s/%s: %w", k.Name, desired.GetNamespace(), desired.GetName(), err)
		}
		return Recreated, nil
	}
	update := desired
	if k.ForUpdate != nil {
		update = k.ForUpdate(remote, desired)
	}
	update.SetResourceVersion(remote.GetResourceVersion())
	if _, err := api.Update(ctx, update, metav1.UpdateOptions{}); err != nil {
		return Unchanged, fmt.Errorf("updating the reflected %s %s/%s: %w", k.Name, desired.GetNamespace(), desired.GetName(), err)
	}
	return Updated, nil
}

// Delete deletes remote, a copy reflection made, and reports whether it
// did. The UID precondition makes sure a same-named object created
// meanwhile is not deleted instead.
func (k *Kind[T]) Delete(ctx context.Context, provider kubernetes.Interface, remote T) (bool, error) {
	uid := remote.GetUID()
	err := k.Client(provider, remote.GetNamespace()).Delete(ctx, remote.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("deleting the reflected %s %s/%s: %w", k.Name, remote.GetNamespace(), remote.GetName(), err)
	}
	return true, nil
}

// The kinds reflection writes.
var (
	ConfigMaps = &Kind[*corev1.ConfigMap]{
		Name: "ConfigMap",
		Client: func(c kubernetes.Interface, ns string) objectClient[*corev1.ConfigMap] {
			return c.CoreV1().ConfigMaps(ns)
		},
		NeedsUpdate:   reflection.NeedsUpdate[*corev1.ConfigMap],
		NeedsRecreate: reflection.NeedsRecreate[*corev1.ConfigMap],
	}
	Secrets = &Kind[*corev1.Secret]{
		Name: "Secret",
		Client: func(c kubernetes.Interface, ns string) objectClient[*corev1.Secret] {
			return c.CoreV1().Secrets(ns)
		},
		NeedsUpdate:   reflection.NeedsUpdate[*corev1.Secret],
		NeedsRecreate: reflection.NeedsRecreate[*corev1.Secret],
	}
	Services = &Kind[*corev1.Service]{
		Name: "Service",
		Client: func(c kubernetes.Interface, ns string) objectClient[*corev1.Service] {
			return c.CoreV1().Services(ns)
		},
		NeedsUpdate:   reflection.ServiceNeedsUpdate,
		NeedsRecreate: reflection.ServiceNeedsRecreate,
		ForUpdate:     reflection.ServiceForUpdate,
	}
	EndpointSlices = &Kind[*discoveryv1.EndpointSlice]{
		Name: "EndpointSlice",
		Client: func(c kubernetes.Interface, ns string) objectClient[*discoveryv1.EndpointSlice] {
			return c.DiscoveryV1().EndpointSlices(ns)
		},
		NeedsUpdate:   reflection.EndpointSliceNeedsUpdate,
		NeedsRecreate: reflection.EndpointSliceNeedsRecreate,
	}
)
