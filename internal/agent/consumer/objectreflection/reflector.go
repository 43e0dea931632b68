// Package objectreflection keeps the twin namespaces of one provider in step
// with their consumer namespaces: it reflects the Services and
// EndpointSlices of an offloaded namespace into its twin, and the
// ConfigMaps and Secrets that the pods on the provider's virtual node
// reference (or that are labelled offload.io/reflect=true), pushes updates
// as they happen, and deletes the copies whose consumer objects are gone or
// no longer needed: nothing else of the namespace leaves the consumer.
//
// The translations are the pure functions of internal/agent/consumer/reflection;
// every copy is written by this package's Kind.Apply, which pod reflection
// uses too for the ConfigMaps and Secrets of a new pod. Every
// copy carries the origin cluster label (api/v1alpha1
// LabelOriginClusterID), and the Reflector only ever changes or deletes
// provider objects that carry it with the consumer's cluster ID: a
// same-named object someone else created is logged and left alone.
//
// Both identities involved are namespaced: the consumer agent may read these
// kinds only in offloaded namespaces, and the tenant identity may only touch
// twin namespaces. So the Reflector runs namespace-scoped informers, one set
// per (consumer namespace, twin namespace) pair; the provider's are
// restricted to the origin cluster label. A rate-limited work queue keyed by
// kind, twin namespace and name reconciles each object from those caches.
package objectreflection

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// DefaultResync is the default interval at which the Reflector asks
// Options.TwinNamespaces for the set of offloaded namespaces.
const DefaultResync = 5 * time.Second

// workers is the number of objects reconciled at once.
const workers = 2

// Options configure a Reflector.
type Options struct {
	// Provider is a client of the provider cluster acting as the tenant
	// identity. It may only touch twin namespaces.
	Provider kubernetes.Interface
	// Consumer is a client of the consumer cluster. It reads ConfigMaps,
	// Secrets, Services and EndpointSlices in offloaded namespaces.
	Consumer kubernetes.Interface
	// ConsumerClusterID is the consumer's cluster ID, the value of the
	// origin cluster label on everything the Reflector creates.
	ConsumerClusterID string
	// NodeName is the virtual node of the provider. Of the ConfigMaps and
	// Secrets of an offloaded namespace, only those that its pods reference
	// (reflection.ReferencedObjects) or that are labelled
	// offloadv1alpha1.LabelReflect=true are copied; a copy no pod needs any
	// more is deleted.
	NodeName string
	// TwinNamespaces lists the namespace pairs to reflect, keyed by twin
	// namespace with the consumer namespace as value. It should list only
	// twin namespaces that are usable (Ready), as ReadyTwinNamespaces does:
	// the Reflector starts writing into a twin namespace as soon as it is
	// listed, and retries with backoff while it cannot. A pair that is no
	// longer listed stops being reflected; its copies are left to whoever
	// deletes the twin namespace.
	TwinNamespaces func(ctx context.Context) (map[string]string, error)
	// Resync is how often TwinNamespaces is called. Default DefaultResync.
	Resync time.Duration
	// Addresses returns the address translation of the peering's network
	// fabric; nil (or a nil func) translates nothing.
	Addresses func() *reflection.Addresses
	// Logger logs what the Reflector does.
	Logger klog.Logger
}

// addresses is the current address translation.
func (o Options) addresses() *reflection.Addresses {
	if o.Addresses == nil {
		return nil
	}
	return o.Addresses()
}

// Reflector reflects the objects of the offloaded namespaces into their twin
// namespaces on one provider. Create it with New and run it with Start.
type Reflector struct {
	opts  Options
	kinds map[string]kind
	queue workqueue.TypedRateLimitingInterface[key]

	mu      sync.Mutex
	pairs   map[string]*pair // by twin namespace
	started bool
	// addressesSeen is the address translation the slices were last
	// reflected with.
	addressesSeen string

	created, updated, recreated, deleted, refused, conflicts atomic.Int64
}

// key names one object to reconcile.
type key struct {
	kind string // a key of Reflector.kinds
	twin string // the twin namespace
	name string
}

// New checks opts and returns a Reflector.
func New(opts Options) (*Reflector, error) {
	switch {
	case opts.Provider == nil:
		return nil, errors.New("objectreflection: the provider client is missing")
	case opts.Consumer == nil:
		return nil, errors.New("objectreflection: the consumer client is missing")
	case opts.ConsumerClusterID == "":
		return nil, errors.New("objectreflection: the consumer cluster ID is missing")
	case opts.NodeName == "":
		return nil, errors.New("objectreflection: the virtual node name is missing")
	case opts.TwinNamespaces == nil:
		return nil, errors.New("objectreflection: TwinNamespaces is missing; use ReadyTwinNamespaces")
	case opts.Resync < 0:
		return nil, fmt.Errorf("objectreflection: negative resync interval %s", opts.Resync)
	}
	if opts.Resync == 0 {
		opts.Resync = DefaultResync
	}
	r := &Reflector{opts: opts, pairs: map[string]*pair{}}
	r.kinds = map[string]kind{}
	for _, k := range allKinds() {
		r.kinds[k.name()] = k
	}
	return r, nil
}

// Start reflects until ctx is done, then stops every informer and returns
// nil. It polls TwinNamespaces every Options.Resync, starting the informers
// of new pairs and stopping those of pairs no longer listed; a failing call
// is logged and retried at the next poll. It may be called once.
func (r *Reflector) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("objectreflection: the reflector is already started")
	}
	r.started = true
	r.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: "objectreflection"})
	r.mu.Unlock()

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for r.processNext(ctx) {
			}
		})
	}
	ticker := time.NewTicker(r.opts.Resync)
	defer ticker.Stop()
	for {
		r.syncPairs(ctx)
		r.followAddresses()
		select {
		case <-ctx.Done():
			r.queue.ShutDown()
			wg.Wait()
			r.stopAll()
			return nil
		case <-ticker.C:
		}
	}
}

// followAddresses re-reflects every EndpointSlice when the peering's
// address translation changed (the tunnel came up after the slices were
// reflected, say): their addresses depend on it, their objects did not
// change.
func (r *Reflector) followAddresses() {
	fp := fmt.Sprint(r.opts.addresses())
	r.mu.Lock()
	defer r.mu.Unlock()
	if fp == r.addressesSeen {
		return
	}
	first := r.addressesSeen == ""
	r.addressesSeen = fp
	if first {
		return
	}
	for _, p := range r.pairs {
		for _, k := range p.local[kindEndpointSlice].GetIndexer().ListKeys() {
			if _, n, err := cache.SplitMetaNamespaceKey(k); err == nil {
				r.queue.Add(key{kind: kindEndpointSlice, twin: p.twin, name: n})
			}
		}
	}
}

// Stats counts what a Reflector did since it started.
type Stats struct {
	// Namespaces is the number of namespace pairs being reflected.
	Namespaces int
	// Created, Updated and Recreated count the writes of copies (Kind.Apply's
	// results); Deleted counts the copies deleted as their consumer
	// object went or no pod needs it any more.
	Created, Updated, Recreated, Deleted int64
	// Refused counts the reconciliations of consumer objects that are not
	// reflected, such as service-account token Secrets, or ConfigMaps and
	// Secrets no offloaded pod references.
	Refused int64
	// Conflicts counts the reconciliations that left alone a provider
	// object of the same name that the Reflector did not create.
	Conflicts int64
}

// Stats returns what r did so far.
func (r *Reflector) Stats() Stats {
	r.mu.Lock()
	n := len(r.pairs)
	r.mu.Unlock()
	return Stats{
		Namespaces: n,
		Created:    r.created.Load(), Updated: r.updated.Load(), Recreated: r.recreated.Load(),
		Deleted: r.deleted.Load(), Refused: r.refused.Load(), Conflicts: r.conflicts.Load(),
	}
}

// processNext reconciles the next key; false means the queue shut down.
func (r *Reflector) processNext(ctx context.Context) bool {
	k, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	defer r.queue.Done(k)
	if err := r.reconcile(ctx, k); err != nil {
		if ctx.Err() == nil {
			r.opts.Logger.Error(err, "Reflecting an object failed; retrying", "kind", k.kind,
				"object", klog.KRef(k.twin, k.name), "retries", r.queue.NumRequeues(k))
		}
		r.queue.AddRateLimited(k)
		return true
	}
	r.queue.Forget(k)
	return true
}

// reconcile makes the provider's copy of k match the consumer object.
// Keys of pairs that are gone or not synced yet are dropped: a pair enqueues
// every object it knows once it has synced.
func (r *Reflector) reconcile(ctx context.Context, k key) error {
	r.mu.Lock()
	p := r.pairs[k.twin]
	r.mu.Unlock()
	if p == nil || !p.synced.Load() {
		return nil
	}
	return r.kinds[k.kind].reconcile(ctx, r, p, k.name)
}
