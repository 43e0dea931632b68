package objectreflection

import (
	"context"
	"sync/atomic"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// byServiceIndex indexes EndpointSlices by the Service they belong to.
const byServiceIndex = "service"

// pair is a consumer namespace and its twin namespace, with the informers
// of both sides.
type pair struct {
	twin     string // the provider namespace
	consumer string // the consumer namespace it mirrors

	cancel  context.CancelFunc
	stopped chan struct{} // closed once the informers have stopped
	synced  atomic.Bool   // every informer has listed its namespace once

	local, remote map[string]cache.SharedIndexInformer // by kind
	// pods are the consumer pods of the namespace bound to the virtual
	// node, indexed by the ConfigMaps and Secrets they reference.
	pods cache.SharedIndexInformer
}

// syncPairs starts and stops pairs to match TwinNamespaces.
func (r *Reflector) syncPairs(ctx context.Context) {
	want, err := r.opts.TwinNamespaces(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.opts.Logger.Error(err, "Listing the offloaded namespaces failed; retrying")
		}
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for twin, p := range r.pairs {
		if ns, ok := want[twin]; !ok || ns != p.consumer {
			p.cancel()
			delete(r.pairs, twin)
			r.opts.Logger.Info("Stopped reflecting a namespace", "namespace", p.consumer, "twinNamespace", twin)
		}
	}
	for twin, ns := range want {
		if _, ok := r.pairs[twin]; ok || twin == "" || ns == "" {
			continue
		}
		p, err := r.startPair(ctx, twin, ns)
		if err != nil {
			r.opts.Logger.Error(err, "Watching a namespace pair failed; retrying", "namespace", ns, "twinNamespace", twin)
			continue
		}
		r.pairs[twin] = p
	}
}

// stopAll stops every pair and waits until their informers have stopped.
func (r *Reflector) stopAll() {
	r.mu.Lock()
	pairs := r.pairs
	r.pairs = map[string]*pair{}
	r.mu.Unlock()
	for _, p := range pairs {
		p.cancel()
	}
	for _, p := range pairs {
		<-p.stopped
	}
}

// startPair starts the informers of consumer namespace ns and twin
// namespace twin. Once all have synced, it enqueues every object either
// side has, which also collects the orphans a previous run left: copies
// whose consumer object is gone are found only after a full list of both
// sides.
func (r *Reflector) startPair(ctx context.Context, twin, ns string) (*pair, error) {
	pctx, cancel := context.WithCancel(ctx)
	p := &pair{
		twin: twin, consumer: ns, cancel: cancel, stopped: make(chan struct{}),
		local: map[string]cache.SharedIndexInformer{}, remote: map[string]cache.SharedIndexInformer{},
	}
	// Objects that belong to one pod (its service-account token Secret)
	// are the pod reflection's, which deletes them with the pod.
	selector := labels.SelectorFromSet(labels.Set{offloadv1alpha1.LabelOriginClusterID: r.opts.ConsumerClusterID}).String() +
		",!" + offloadv1alpha1.LabelOriginPodUID
	strip := informers.WithTransform(crcache.TransformStripManagedFields())
	lf := informers.NewSharedInformerFactoryWithOptions(r.opts.Consumer, 0, informers.WithNamespace(ns), strip)
	rf := informers.NewSharedInformerFactoryWithOptions(r.opts.Provider, 0, informers.WithNamespace(twin),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }), strip)
	pf := informers.NewSharedInformerFactoryWithOptions(r.opts.Consumer, 0, informers.WithNamespace(ns), informers.WithTransform(referencesOnly),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", r.opts.NodeName).String()
		}))
	p.pods = pf.Core().V1().Pods().Informer()
	if err := p.pods.AddIndexers(cache.Indexers{byReferenceIndex: podReferences}); err != nil {
		cancel()
		return nil, err
	}
	if _, err := p.pods.AddEventHandler(r.referenceEnqueuer(twin)); err != nil {
		cancel()
		return nil, err
	}
	synced := []cache.InformerSynced{p.pods.HasSynced}
	for name, k := range r.kinds {
		li, ri := k.informers(lf, rf)
		for _, inf := range []cache.SharedIndexInformer{li, ri} {
			if _, err := inf.AddEventHandler(r.enqueuer(name, twin)); err != nil {
				cancel()
				return nil, err
			}
			synced = append(synced, inf.HasSynced)
		}
		p.local[name], p.remote[name] = li, ri
	}
	// A slice is reflected only while its Service is: a Service that comes
	// or goes re-evaluates its slices.
	for _, side := range []map[string]cache.SharedIndexInformer{p.local, p.remote} {
		if err := side[kindEndpointSlice].AddIndexers(cache.Indexers{byServiceIndex: sliceService}); err != nil {
			cancel()
			return nil, err
		}
		if _, err := side[kindService].AddEventHandler(r.sliceEnqueuer(p)); err != nil {
			cancel()
			return nil, err
		}
	}
	lf.Start(pctx.Done())
	rf.Start(pctx.Done())
	pf.Start(pctx.Done())
	go func() {
		defer close(p.stopped)
		defer pf.Shutdown()
		defer rf.Shutdown()
		defer lf.Shutdown()
		if !cache.WaitForCacheSync(pctx.Done(), synced...) {
			return
		}
		p.synced.Store(true)
		for name := range r.kinds {
			for _, inf := range []cache.SharedIndexInformer{p.local[name], p.remote[name]} {
				for _, k := range inf.GetStore().ListKeys() {
					if _, n, err := cache.SplitMetaNamespaceKey(k); err == nil {
						r.queue.Add(key{kind: name, twin: twin, name: n})
					}
				}
			}
		}
		r.opts.Logger.Info("Reflecting a namespace", "namespace", ns, "twinNamespace", twin)
		<-pctx.Done()
	}()
	return p, nil
}

// enqueuer enqueues the objects of kind name that an informer of twin
// namespace twin's pair reports.
func (r *Reflector) enqueuer(name, twin string) cache.ResourceEventHandler {
	add := func(obj any) {
		if m := objectMeta(obj); m != nil {
			r.queue.Add(key{kind: name, twin: twin, name: m.GetName()})
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    add,
		UpdateFunc: func(_, obj any) { add(obj) },
		DeleteFunc: add,
	}
}

// sliceEnqueuer enqueues the EndpointSlices, on both sides of p, of the
// Services a Service informer of p reports.
func (r *Reflector) sliceEnqueuer(p *pair) cache.ResourceEventHandler {
	add := func(obj any) {
		m := objectMeta(obj)
		if m == nil {
			return
		}
		for _, side := range []map[string]cache.SharedIndexInformer{p.local, p.remote} {
			keys, err := side[kindEndpointSlice].GetIndexer().IndexKeys(byServiceIndex, m.GetName())
			if err != nil {
				continue
			}
			for _, k := range keys {
				if _, n, err := cache.SplitMetaNamespaceKey(k); err == nil {
					r.queue.Add(key{kind: kindEndpointSlice, twin: p.twin, name: n})
				}
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    add,
		UpdateFunc: func(_, obj any) { add(obj) },
		DeleteFunc: add,
	}
}

// sliceService is the byServiceIndex index function.
func sliceService(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelServiceName] == "" {
		return nil, nil
	}
	return []string{s.Labels[discoveryv1.LabelServiceName]}, nil
}

// objectMeta is the metadata of an informer's object or tombstone.
func objectMeta(obj any) metav1.Object {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	return m
}

// ReadyTwinNamespaces lists, from the consumer's NamespaceOffloadings, the
// Ready twin namespaces on provider providerClusterID of the namespaces
// that are not being deleted, keyed by twin namespace with the consumer
// namespace as value. It suits Options.TwinNamespaces.
func ReadyTwinNamespaces(c client.Reader, providerClusterID string) func(context.Context) (map[string]string, error) {
	return func(ctx context.Context) (map[string]string, error) {
		return ListTwinNamespaces(ctx, c, providerClusterID, true)
	}
}
