// Package podcontroller runs the pods bound to a virtual node through a
// Provider: it creates, updates and deletes their remote pods as the
// consumer's pods change, writes the statuses the Provider notifies onto
// the consumer's pods, and deletes the consumer's pods once their remote
// pods are gone.
//
// It keeps virtual-kubelet's PodController's behaviours (the Provider is
// one of its PodLifecycleHandlers, less GetPods) without its copies of
// every pod: the informer's copy is the only one, and it may be slim (the
// whole pod is read from the API server for the Provider, once per remote
// pod created or updated, unless the informer's transform kept it whole
// until then: WholePods). virtual-kubelet's keeps the version of each pod
// it last reflected and a deep copy of the last
// status notified, besides the informer's, which made the agent's memory
// grow by about two pods' worth for every pod offloaded. Here a notified
// status is held only until it is written, and a pod that did not change is
// recognised by comparing it with its remote pod, which the Provider has at
// hand. The remote pods whose consumer pods went while the controller did
// not run are the Provider's to collect (podreflection's orphan
// collection): virtual-kubelet's start built the consumer's view of every
// remote pod at once to find them.
package podcontroller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Provider runs pods elsewhere: virtual-kubelet's PodLifecycleHandler, less
// GetPods, and its asynchronous notification of statuses. Its errors follow
// virtual-kubelet's errdefs: NotFound is a pod it does not have.
type Provider interface {
	// CreatePod creates the remote pod of pod.
	CreatePod(ctx context.Context, pod *corev1.Pod) error
	// UpdatePod brings the remote pod of pod up to date with it.
	UpdatePod(ctx context.Context, pod *corev1.Pod) error
	// DeletePod deletes the remote pod of pod, with pod's grace period.
	DeletePod(ctx context.Context, pod *corev1.Pod) error
	// GetPod returns the remote pod of namespace/name as the consumer
	// sees it, or a NotFound error.
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// NotifyPods registers the function the Provider calls with a
	// consumer pod and its new status whenever a remote pod changes.
	NotifyPods(ctx context.Context, notify func(*corev1.Pod))
}

// Event reasons and the status reason of a pod the Provider failed,
// virtual-kubelet's, which users and tests look for.
const (
	ReasonProviderFailed = "ProviderFailed"
	EventCreateFailed    = "ProviderCreateFailed"
	EventUpdateFailed    = "ProviderUpdateFailed"
	EventDeleteFailed    = "ProviderDeleteFailed"
)

// maxRetries is how many times a failed step of a pod is retried, with
// the rate limiter's backoff, before it waits for the pod's next change.
const maxRetries = 20

// Config is what a Controller is built from.
type Config struct {
	// Pods is the informer of the consumer's pods bound to the virtual
	// node; Lister lists them from it. Its pods may be slim (a transform):
	// what specEqual compares, the metadata and the status are enough. The
	// Provider is given the whole pod, read from Client, to create or
	// update a remote pod.
	Pods   cache.SharedIndexInformer
	Lister corelisters.PodLister
	// Client reads the consumer's pods whole, and writes their statuses
	// and deletions.
	Client typedcorev1.PodsGetter
	// Whole, if not nil, has the whole version of the new pods, kept by
	// the informer's transform (WholePods.Keep): a pod found there is not
	// read from Client.
	Whole *WholePods
	// Provider runs the pods.
	Provider Provider
	// Events records the Warning events of the pods the Provider failed.
	Events record.EventRecorder
	// RateLimiter makes the rate limiter of each of the queues: pods to
	// sync with the Provider, statuses to write, pods to delete.
	RateLimiter func() workqueue.TypedRateLimiter[string]
	// Logger logs the controller's work.
	Logger logr.Logger
}

// Controller is the pod controller of one virtual node.
type Controller struct {
	cfg Config
	// sync holds the keys (namespace/name) of the pods to bring to the
	// Provider; status the keys of the pods whose notified status is to be
	// written; remove the keys (namespace/name/uid) of the pods to delete
	// from the consumer.
	sync, status, remove workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// notified holds the statuses notified and not yet written, by key:
	// the only pods the controller keeps.
	notified map[string]*corev1.Pod

	ready, done chan struct{}
	err         error
}

// New returns the controller of cfg; Run runs it.
func New(cfg Config) (*Controller, error) {
	if cfg.Pods == nil || cfg.Lister == nil || cfg.Client == nil || cfg.Provider == nil || cfg.Events == nil || cfg.RateLimiter == nil {
		return nil, errors.New("podcontroller: the informer, lister, client, provider, event recorder and rate limiter are all required")
	}
	queue := func(name string) workqueue.TypedRateLimitingInterface[string] {
		return workqueue.NewTypedRateLimitingQueueWithConfig(cfg.RateLimiter(), workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
	}
	return &Controller{cfg: cfg, sync: queue("sync"), status: queue("status"), remove: queue("remove"),
		notified: map[string]*corev1.Pod{}, ready: make(chan struct{}), done: make(chan struct{})}, nil
}

// Ready is closed once the controller handles the pods of the node.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Done is closed once Run returned; Err says why.
func (c *Controller) Done() <-chan struct{} { return c.done }

// Err is the error Run returned.
func (c *Controller) Err() error { return c.err }

// Run runs the controller until ctx is done, with syncWorkers workers
// bringing pods to the Provider and otherWorkers on each of the other
// queues (statuses to write, pods to delete). It waits for the informer to
// sync, deletes the remote pods whose consumer pods are gone, then follows
// the consumer's pods.
func (c *Controller) Run(ctx context.Context, syncWorkers, otherWorkers int) (err error) {
	defer func() {
		c.err = err
		close(c.done)
	}()
	defer c.sync.ShutDown()
	defer c.status.ShutDown()
	defer c.remove.ShutDown()
	c.cfg.Provider.NotifyPods(ctx, c.notify)
	if !cache.WaitForCacheSync(ctx.Done(), c.cfg.Pods.HasSynced) {
		return errors.New("the informer of the virtual node's pods did not sync")
	}
	reg, err := c.cfg.Pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueue(obj) },
		UpdateFunc: c.updated,
		DeleteFunc: c.deleted,
	})
	if err != nil {
		return fmt.Errorf("following the virtual node's pods: %w", err)
	}
	defer func() { _ = c.cfg.Pods.RemoveEventHandler(reg) }()
	var wg sync.WaitGroup
	for range syncWorkers {
		wg.Go(func() { c.work(ctx, c.sync, c.syncPod) })
	}
	for range otherWorkers {
		wg.Go(func() { c.work(ctx, c.status, c.writeStatus) })
		wg.Go(func() { c.work(ctx, c.remove, c.removePod) })
	}
	close(c.ready)
	<-ctx.Done()
	c.sync.ShutDown()
	c.status.ShutDown()
	c.remove.ShutDown()
	wg.Wait()
	return nil
}

// work processes the keys of q with handle until q shuts down. A failed key
// is retried with backoff up to maxRetries times.
func (c *Controller) work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], handle func(context.Context, string) error) {
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		err := handle(ctx, key)
		switch {
		case err == nil:
			q.Forget(key)
		case q.NumRequeues(key) < maxRetries:
			c.cfg.Logger.V(1).Info("Retrying a pod", "key", key, "error", err.Error())
			q.AddRateLimited(key)
		default:
			c.cfg.Logger.Error(err, "Giving up on a pod until it changes", "key", key)
			q.Forget(key)
		}
		q.Done(key)
	}
}

// enqueue queues the pod obj for sync.
func (c *Controller) enqueue(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.sync.Add(key)
	}
}

// updated queues a pod for sync when what the Provider reflects of it, or
// its deletion, changed: not for a new status, which the controller most
// likely wrote itself.
func (c *Controller) updated(oldObj, newObj any) {
	o, ok1 := oldObj.(*corev1.Pod)
	n, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 {
		return
	}
	if !specEqual(o, n) || !ptr.Equal(o.DeletionGracePeriodSeconds, n.DeletionGracePeriodSeconds) || !o.DeletionTimestamp.Equal(n.DeletionTimestamp) {
		c.enqueue(n)
		return
	}
	// No sync will take this version whole: a pod pending on the provider,
	// whose status changes, stays new without holding a place in Whole.
	c.cfg.Whole.forget(cache.MetaObjectToName(n).String(), n.ResourceVersion)
}

// deleted queues a pod that is gone for sync, which deletes its remote pod.
func (c *Controller) deleted(obj any) {
	c.enqueue(obj)
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok {
		c.remove.Forget(removeKey(p))
	}
}

// specEqual reports whether a and b agree on what a pod update may change
// and the Provider reflects: images, the deadline, tolerations, labels and
// annotations, and the containers (resizes, ephemeral containers).
func specEqual(a, b *corev1.Pod) bool {
	return apiequality.Semantic.DeepEqual(a.Spec.Containers, b.Spec.Containers) &&
		apiequality.Semantic.DeepEqual(a.Spec.InitContainers, b.Spec.InitContainers) &&
		apiequality.Semantic.DeepEqual(a.Spec.EphemeralContainers, b.Spec.EphemeralContainers) &&
		ptr.Equal(a.Spec.ActiveDeadlineSeconds, b.Spec.ActiveDeadlineSeconds) &&
		apiequality.Semantic.DeepEqual(a.Spec.Tolerations, b.Spec.Tolerations) &&
		apiequality.Semantic.DeepEqual(a.Labels, b.Labels) &&
		apiequality.Semantic.DeepEqual(a.Annotations, b.Annotations)
}

// syncPod brings the pod of key to the Provider: it deletes the remote
// pod of a pod that is gone or being deleted, creates the remote pod of a
// new one, and updates the remote pod of one that changed.
func (c *Controller) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := c.cfg.Lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.cfg.Whole.forget(key, "")
		return c.deleteGone(ctx, ns, name)
	}
	if err != nil {
		return err
	}
	// This version is synced, whether its whole version was needed or not.
	defer c.cfg.Whole.forget(key, pod.ResourceVersion)
	if pod.DeletionTimestamp != nil {
		if !running(&pod.Status) {
			// Nothing runs any more: the pod goes at once, and its sync,
			// once it is gone, deletes what remains of its remote pod.
			c.remove.Add(removeKey(pod))
			return nil
		}
		if err := c.cfg.Provider.DeletePod(ctx, pod.DeepCopy()); err != nil && !errdefs.IsNotFound(err) {
			c.cfg.Events.Event(pod, corev1.EventTypeWarning, EventDeleteFailed, err.Error())
			return fmt.Errorf("deleting the remote pod of %s: %w", klog.KObj(pod), err)
		}
		// The remote pod's end comes back as a status; the consumer pod
		// goes at the latest when its grace period is over.
		var grace time.Duration
		if pod.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		}
		c.remove.AddAfter(removeKey(pod), grace)
		return nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	return c.createOrUpdate(ctx, pod)
}

// deleteGone deletes the remote pod of namespace/name, whose consumer pod
// is gone.
func (c *Controller) deleteGone(ctx context.Context, ns, name string) error {
	remote, err := c.cfg.Provider.GetPod(ctx, ns, name)
	if errdefs.IsNotFound(err) || (err == nil && remote == nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the remote pod of %s/%s: %w", ns, name, err)
	}
	if err := c.cfg.Provider.DeletePod(ctx, remote); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("deleting the remote pod of %s/%s: %w", ns, name, err)
	}
	return nil
}

// createOrUpdate creates the remote pod of pod, or updates it when pod
// changed since. A failure is written on the pod, as reason ProviderFailed
// and a Warning event.
func (c *Controller) createOrUpdate(ctx context.Context, pod *corev1.Pod) error {
	remote, _ := c.cfg.Provider.GetPod(ctx, pod.Namespace, pod.Name)
	if remote != nil && specEqual(remote, pod) {
		return nil
	}
	whole, err := c.whole(ctx, pod)
	if whole == nil || err != nil {
		return err
	}
	if remote != nil {
		if err := c.cfg.Provider.UpdatePod(ctx, whole); err != nil {
			c.providerFailed(ctx, pod, EventUpdateFailed, err)
			return err
		}
		return nil
	}
	if err := c.cfg.Provider.CreatePod(ctx, whole); err != nil {
		c.providerFailed(ctx, pod, EventCreateFailed, err)
		return err
	}
	return nil
}

// whole returns pod whole, for the Provider: the informer may keep slim
// pods (Config.Pods). The version the informer has is taken from
// Config.Whole if it is there; otherwise it is read at the informer's
// resourceVersion or later, which the API server serves from its watch
// cache. A pod that is gone or was replaced gives nil: its own events
// bring what follows.
func (c *Controller) whole(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	if kept := c.cfg.Whole.take(cache.MetaObjectToName(pod).String(), pod.UID, pod.ResourceVersion); kept != nil {
		return kept, nil
	}
	got, err := c.cfg.Client.Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{ResourceVersion: pod.ResourceVersion})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading pod %s: %w", klog.KObj(pod), err)
	}
	if got.UID != pod.UID {
		return nil, nil
	}
	return got, nil
}

// providerFailed records err, the Provider's failure to create or update
// pod, on pod: Pending with reason ProviderFailed (Failed if it is never
// to restart), and a Warning event.
func (c *Controller) providerFailed(ctx context.Context, pod *corev1.Pod, reason string, err error) {
	c.cfg.Events.Event(pod, corev1.EventTypeWarning, reason, err.Error())
	failed := pod.DeepCopy()
	failed.Status.Phase = corev1.PodPending
	if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
		failed.Status.Phase = corev1.PodFailed
	}
	failed.Status.Reason, failed.Status.Message = ReasonProviderFailed, err.Error()
	if apiequality.Semantic.DeepEqual(failed.Status, pod.Status) {
		return
	}
	if _, err := c.cfg.Client.Pods(pod.Namespace).UpdateStatus(ctx, failed, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		c.cfg.Logger.Info("Could not record the provider's failure on a pod", "pod", klog.KObj(pod), "error", err.Error())
	}
}

// notify takes a status the Provider notified, to be written.
func (c *Controller) notify(pod *corev1.Pod) {
	key := cache.MetaObjectToName(pod).String()
	c.mu.Lock()
	c.notified[key] = pod
	c.mu.Unlock()
	c.status.Add(key)
}

// writeStatus writes the status last notified for the pod of key, unless
// the pod already has it or has ended. A pod the informer has not seen yet
// is retried; one that is gone is forgotten.
func (c *Controller) writeStatus(ctx context.Context, key string) error {
	c.mu.Lock()
	want := c.notified[key]
	c.mu.Unlock()
	if want == nil {
		return nil
	}
	cur, err := c.cfg.Lister.Pods(want.Namespace).Get(want.Name)
	if apierrors.IsNotFound(err) && c.status.NumRequeues(key) < 10 {
		// The Provider may have found the pod before the informer did.
		return fmt.Errorf("pod %s is not in the informer yet", key)
	}
	if err != nil || cur.UID != want.UID || cur.Status.Phase == corev1.PodSucceeded || cur.Status.Phase == corev1.PodFailed ||
		apiequality.Semantic.DeepEqual(cur.Status, want.Status) {
		c.forgetStatus(key, want)
		return nil
	}
	// The pod as the informer has it, but for its status: the API server
	// writes the labels and annotations of a status update too.
	out := *cur
	out.Status = want.Status
	if _, err := c.cfg.Client.Pods(cur.Namespace).UpdateStatus(ctx, &out, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			c.forgetStatus(key, want)
			return nil
		}
		return fmt.Errorf("writing the status of pod %s: %w", key, err)
	}
	c.forgetStatus(key, want)
	return nil
}

// forgetStatus forgets the notified status of key, if it is still want.
func (c *Controller) forgetStatus(key string, want *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.notified[key] == want {
		delete(c.notified, key)
	}
}

// removeKey is the key of pod in the queue of deletions: its UID too, so
// that a new pod of the same name is never deleted in its place.
func removeKey(pod *corev1.Pod) string {
	return cache.MetaObjectToName(pod).String() + "/" + string(pod.UID)
}

// removePod deletes the consumer pod of key at once, if it still is the
// pod of that UID: its remote pod is gone, or its grace period over.
func (c *Controller) removePod(ctx context.Context, key string) error {
	i := strings.LastIndex(key, "/")
	if i < 0 {
		return nil
	}
	uid := types.UID(key[i+1:])
	ns, name, err := cache.SplitMetaNamespaceKey(key[:i])
	if err != nil {
		return nil
	}
	pod, err := c.cfg.Lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.UID != uid {
		return nil
	}
	opts := metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: metav1.NewUIDPreconditions(string(uid))}
	err = c.cfg.Client.Pods(ns).Delete(ctx, name, opts)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// running reports whether a container of the pod of st runs: one that is
// neither waiting nor terminated. The kubelet's own test, as
// virtual-kubelet has it.
func running(st *corev1.PodStatus) bool {
	for _, cs := range st.ContainerStatuses {
		if cs.State.Terminated == nil && cs.State.Waiting == nil {
			return true
		}
	}
	return false
}
