package objectreflection

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// The kinds the Reflector's EndpointSlice handling names, as in its keys.
var (
	kindService       = Services.Name
	kindEndpointSlice = EndpointSlices.Name
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

// resource is a kind of type T: how it is written (Kind), watched and
// translated.
type resource[T object] struct {
	*Kind[T]
	// informer is the informer of the kind of a factory.
	informer func(f informers.SharedInformerFactory) cache.SharedIndexInformer
	// reflect is the desired copy of local; false when local is not
	// reflected.
	reflect func(p *pair, local T, o reflection.Origin) (T, bool)
	// needed says the kind is copied only while pods reference an object:
	// before a copy is deleted for want of one, the consumer's API server
	// is asked whether a pod the informer has not seen yet references it.
	needed bool
}

func (res *resource[T]) name() string { return res.Name }

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
	log := r.opts.Logger.WithValues("kind", res.Name, "object", klog.KRef(p.twin, name), "namespace", p.consumer)
	o := reflection.Origin{ClusterID: r.opts.ConsumerClusterID, TwinNamespace: p.twin, Addresses: r.opts.addresses()}
	local, haveLocal := res.cached(p.local[res.Name], p.consumer, name)
	remote, haveRemote := res.cached(p.remote[res.Name], p.twin, name)

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
		if haveLocal && res.needed {
			needed, err := r.referencedLive(ctx, p, res.Name, name)
			if err != nil {
				return err
			}
			if needed {
				// The pod informer is behind: its event will come.
				return nil
			}
		}
		if !haveLocal {
			// The cache may lag behind: ask the consumer before deleting.
			_, err := res.Client(r.opts.Consumer, p.consumer).Get(ctx, name, metav1.GetOptions{})
			switch {
			case err == nil:
				return nil // the informer will report it
			case !apierrors.IsNotFound(err):
				return fmt.Errorf("reading %s %s/%s on the consumer: %w", res.Name, p.consumer, name, err)
			}
		}
		deleted, err := res.Delete(ctx, r.opts.Provider, remote)
		if deleted {
			r.deleted.Add(1)
			log.V(1).Info("Deleted reflected object")
		}
		return err
	}
	result, err := res.Apply(ctx, r.opts.Provider, r.opts.ConsumerClusterID, desired, remote)
	if err != nil {
		return err
	}
	switch result {
	case Created:
		r.created.Add(1)
		log.V(1).Info("Reflected object")
	case Updated:
		r.updated.Add(1)
		log.V(1).Info("Updated reflected object")
	case Recreated:
		r.recreated.Add(1)
		log.V(1).Info("Replaced reflected object")
	case Conflict:
		r.conflicts.Add(1)
		log.Info("Not reflecting: the provider has an object of the same name that offload did not create for this cluster; delete or rename it there")
	case Unchanged:
	}
	return nil
}

// allKinds are the kinds a Reflector reflects.
func allKinds() []kind {
	return []kind{
		&resource[*corev1.ConfigMap]{
			Kind: ConfigMaps,
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Core().V1().ConfigMaps().Informer()
			},
			reflect: func(p *pair, local *corev1.ConfigMap, o reflection.Origin) (*corev1.ConfigMap, bool) {
				if !optedIn(local) && !p.referenced(kindConfigMap, local.Name) {
					return nil, false
				}
				return reflection.RemoteConfigMap(local, o)
			},
			needed: true,
		},
		&resource[*corev1.Secret]{
			Kind: Secrets,
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Core().V1().Secrets().Informer()
			},
			reflect: func(p *pair, local *corev1.Secret, o reflection.Origin) (*corev1.Secret, bool) {
				if !optedIn(local) && !p.referenced(kindSecret, local.Name) {
					return nil, false
				}
				return reflection.RemoteSecret(local, o)
			},
			needed: true,
		},
		&resource[*corev1.Service]{
			Kind: Services,
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Core().V1().Services().Informer()
			},
			reflect: func(_ *pair, local *corev1.Service, o reflection.Origin) (*corev1.Service, bool) {
				return reflection.RemoteService(local, o), true
			},
		},
		&resource[*discoveryv1.EndpointSlice]{
			Kind: EndpointSlices,
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Discovery().V1().EndpointSlices().Informer()
			},
			reflect: reflectEndpointSlice,
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
	return reflection.RemoteEndpointSlice(local, o)
}
