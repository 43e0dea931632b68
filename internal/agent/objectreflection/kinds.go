package objectreflection

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/reflection"
)

// The kinds a Reflector reflects, as named in its keys and logs.
const (
	kindConfigMap     = "ConfigMap"
	kindSecret        = "Secret"
	kindService       = "Service"
	kindEndpointSlice = "EndpointSlice"
)

// kind reflects the objects of one kind.
type kind interface {
	name() string
	// informers returns the informers of the kind on the consumer and the
	// provider sides.
	informers(local, remote informers.SharedInformerFactory) (cache.SharedIndexInformer, cache.SharedIndexInformer)
	// reconcile makes the copy of consumer object name in p.twin match it.
	reconcile(ctx context.Context, r *Reflector, p *pair, name string) error
}

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

// resource is a kind of type T.
type resource[T object] struct {
	kind string
	// client is the client of the kind in namespace ns.
	client func(c kubernetes.Interface, ns string) objectClient[T]
	// informer is the informer of the kind of a factory.
	informer func(f informers.SharedInformerFactory) cache.SharedIndexInformer
	// reflect is the desired copy of local; false when local is not
	// reflected.
	reflect func(p *pair, local T, o reflection.Origin) (T, bool)
	// needsUpdate and needsRecreate compare a copy with the desired one.
	needsUpdate, needsRecreate func(remote, desired T) bool
	// forUpdate is the object to write to update remote to desired.
	forUpdate func(remote, desired T) T
}

func (res *resource[T]) name() string { return res.kind }

func (res *resource[T]) informers(local, remote informers.SharedInformerFactory) (cache.SharedIndexInformer, cache.SharedIndexInformer) {
	return res.informer(local), res.informer(remote)
}

// cached returns the object name of informer inf, if any.
func (res *resource[T]) cached(inf cache.SharedIndexInformer, ns, name string) (T, bool) {
	var zero T
	obj, ok, err := inf.GetStore().GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return zero, false
	}
	t, ok := obj.(T)
	return t, ok
}

func (res *resource[T]) reconcile(ctx context.Context, r *Reflector, p *pair, name string) error {
	log := r.opts.Logger.WithValues("kind", res.kind, "object", klog.KRef(p.twin, name), "namespace", p.consumer)
	o := reflection.Origin{ClusterID: r.opts.ConsumerClusterID, TwinNamespace: p.twin}
	remoteAPI := res.client(r.opts.Provider, p.twin)
	local, haveLocal := res.cached(p.local[res.kind], p.consumer, name)
	remote, haveRemote := res.cached(p.remote[res.kind], p.twin, name)

	var desired T
	ok := false
	if haveLocal {
		if desired, ok = res.reflect(p, local, o); !ok {
			r.refused.Add(1)
		}
	}
	if !ok {
		if !haveRemote {
			return nil
		}
		if !haveLocal {
			// The cache may lag behind: ask the consumer before deleting.
			_, err := res.client(r.opts.Consumer, p.consumer).Get(ctx, name, metav1.GetOptions{})
			switch {
			case err == nil:
				return nil // the informer will report it
			case !apierrors.IsNotFound(err):
				return fmt.Errorf("reading %s %s/%s on the consumer: %w", res.kind, p.consumer, name, err)
			}
		}
		return res.delete(ctx, r, remoteAPI, remote, log)
	}

	if !haveRemote {
		_, err := remoteAPI.Create(ctx, desired, metav1.CreateOptions{})
		if err == nil {
			r.created.Add(1)
			log.V(1).Info("Reflected object")
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("reflecting %s %s/%s: %w", res.kind, p.twin, name, err)
		}
		if remote, err = remoteAPI.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("reading the reflected %s %s/%s: %w", res.kind, p.twin, name, err)
		}
		if !reflection.IsReflection(remote, r.opts.ConsumerClusterID) {
			r.conflicts.Add(1)
			log.Info("Not reflecting: the provider has an object of the same name that offload did not create for this cluster; delete or rename it there")
			return nil
		}
	}
	if !res.needsUpdate(remote, desired) {
		return nil
	}
	if res.needsRecreate(remote, desired) {
		if err := res.delete(ctx, r, remoteAPI, remote, log); err != nil {
			return err
		}
		if _, err := remoteAPI.Create(ctx, desired, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("replacing the reflected %s %s/%s: %w", res.kind, p.twin, name, err)
		}
		r.recreated.Add(1)
		log.V(1).Info("Replaced reflected object")
		return nil
	}
	update := res.forUpdate(remote, desired)
	update.SetResourceVersion(remote.GetResourceVersion())
	if _, err := remoteAPI.Update(ctx, update, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating the reflected %s %s/%s: %w", res.kind, p.twin, name, err)
	}
	r.updated.Add(1)
	log.V(1).Info("Updated reflected object")
	return nil
}

// delete deletes remote, a copy the Reflector made. The UID precondition
// makes sure a same-named object created meanwhile is not deleted instead.
func (res *resource[T]) delete(ctx context.Context, r *Reflector, api objectClient[T], remote T, log klog.Logger) error {
	uid := remote.GetUID()
	err := api.Delete(ctx, remote.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("deleting the reflected %s %s/%s: %w", res.kind, remote.GetNamespace(), remote.GetName(), err)
	}
	r.deleted.Add(1)
	log.V(1).Info("Deleted reflected object")
	return nil
}

// allKinds are the kinds a Reflector reflects.
func allKinds() []kind {
	return []kind{
		&resource[*corev1.ConfigMap]{
			kind: kindConfigMap,
			client: func(c kubernetes.Interface, ns string) objectClient[*corev1.ConfigMap] {
				return c.CoreV1().ConfigMaps(ns)
			},
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Core().V1().ConfigMaps().Informer()
			},
			reflect: func(_ *pair, local *corev1.ConfigMap, o reflection.Origin) (*corev1.ConfigMap, bool) {
				return reflection.RemoteConfigMap(local, o)
			},
			needsUpdate:   reflection.NeedsUpdate[*corev1.ConfigMap],
			needsRecreate: reflection.NeedsRecreate[*corev1.ConfigMap],
			forUpdate:     func(_, desired *corev1.ConfigMap) *corev1.ConfigMap { return desired },
		},
		&resource[*corev1.Secret]{
			kind: kindSecret,
			client: func(c kubernetes.Interface, ns string) objectClient[*corev1.Secret] {
				return c.CoreV1().Secrets(ns)
			},
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Core().V1().Secrets().Informer()
			},
			reflect: func(_ *pair, local *corev1.Secret, o reflection.Origin) (*corev1.Secret, bool) {
				return reflection.RemoteSecret(local, o)
			},
			needsUpdate:   reflection.NeedsUpdate[*corev1.Secret],
			needsRecreate: reflection.NeedsRecreate[*corev1.Secret],
			forUpdate:     func(_, desired *corev1.Secret) *corev1.Secret { return desired },
		},
		&resource[*corev1.Service]{
			kind: kindService,
			client: func(c kubernetes.Interface, ns string) objectClient[*corev1.Service] {
				return c.CoreV1().Services(ns)
			},
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Core().V1().Services().Informer()
			},
			reflect: func(_ *pair, local *corev1.Service, o reflection.Origin) (*corev1.Service, bool) {
				return RemoteService(local, o), true
			},
			needsUpdate:   ServiceNeedsUpdate,
			needsRecreate: ServiceNeedsRecreate,
			forUpdate:     serviceForUpdate,
		},
		&resource[*discoveryv1.EndpointSlice]{
			kind: kindEndpointSlice,
			client: func(c kubernetes.Interface, ns string) objectClient[*discoveryv1.EndpointSlice] {
				return c.DiscoveryV1().EndpointSlices(ns)
			},
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Discovery().V1().EndpointSlices().Informer()
			},
			reflect:       reflectEndpointSlice,
			needsUpdate:   EndpointSliceNeedsUpdate,
			needsRecreate: EndpointSliceNeedsRecreate,
			forUpdate:     func(_, desired *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice { return desired },
		},
	}
}

// reflectEndpointSlice reflects local while the consumer Service it belongs
// to exists and its copy on the provider is the Reflector's: slices must not
// feed consumer endpoints to a same-named Service someone else created.
// Service events re-evaluate the slices (see sliceEnqueuer).
func reflectEndpointSlice(p *pair, local *discoveryv1.EndpointSlice, o reflection.Origin) (*discoveryv1.EndpointSlice, bool) {
	svc := local.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil, false
	}
	if _, ok, err := p.local[kindService].GetStore().GetByKey(p.consumer + "/" + svc); err != nil || !ok {
		return nil, false
	}
	if _, ok, err := p.remote[kindService].GetStore().GetByKey(p.twin + "/" + svc); err != nil || !ok {
		return nil, false
	}
	return RemoteEndpointSlice(local, o)
}
