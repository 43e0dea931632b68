package virtualnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/virtual-kubelet/virtual-kubelet/node"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/objectreflection"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/podreflection"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/providerclient"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// Client rates of pod reflection. Every offloaded pod costs a few requests
// on each side (create, status updates); client-go's default of 5 requests
// per second would make a Deployment of a thousand replicas take minutes.
const (
	reflectionQPS   = 200
	reflectionBurst = 400
)

// tokenRenewInterval is how often the service-account tokens of offloaded
// pods are checked for renewal; they live an hour and are renewed in their
// last 20 minutes.
const tokenRenewInterval = 5 * time.Minute

// DefaultPodWorkers is how many pods of one virtual node are reflected at
// once when Reconciler.PodWorkers is zero.
const DefaultPodWorkers = 32

// runPods runs the pod reflection of fc's virtual node until ctx is
// cancelled, restarting it with backoff when it fails. It runs beside the
// node controller, so a provider that cannot be reached makes the node
// NotReady but never stops the node itself.
func (r *Reconciler) runPods(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, creds *providerclient.Credentials) {
	logger := log.FromContext(ctx).WithValues("foreignCluster", klog.KObj(fc), "node", offloadv1alpha1.VirtualNodeName(fc.Name))
	ctx = log.IntoContext(ctx, logger)
	r.restarting(ctx, "the pod controller stopped", func(ctx context.Context) error { return r.reflectPods(ctx, fc, creds) },
		func(err error, delay time.Duration) {
			logger.Info("The pod reflection of the virtual node stopped; restarting it", "error", err.Error(), "after", delay)
		})
}

// reflectPods runs virtual-kubelet's PodController for fc's virtual node
// with a podreflection.Handler, and the object reflection of the
// namespaces offloaded to fc, until ctx is cancelled or it fails.
//
// The PodController wants ConfigMap, Secret and Service informers to
// resolve the downward API and service environment variables. Pod
// reflection leaves both to the provider's kubelet (it copies the objects
// instead), so it skips that resolution and gets informers that are never
// started: the agent reads Secrets only in offloaded namespaces, never
// cluster-wide.
func (r *Reconciler) reflectPods(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, creds *providerclient.Credentials) error {
	logger := log.FromContext(ctx)
	consumerID, err := r.consumerClusterID(ctx)
	if err != nil {
		return err
	}
	pcfg := creds.Config()
	pcfg.QPS, pcfg.Burst = reflectionQPS, reflectionBurst
	provider, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		return fmt.Errorf("creating the pod client of provider %s: %w", fc.Name, err)
	}
	consumer := r.PodsKube
	if consumer == nil {
		consumer = r.Kube
	}
	name := offloadv1alpha1.VirtualNodeName(fc.Name)
	onNode := informers.NewSharedInformerFactoryWithOptions(consumer, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", name).String()
	}), informers.WithTransform(crcache.TransformStripManagedFields()))
	pods := onNode.Core().V1().Pods()
	h, err := podreflection.New(podreflection.Options{
		Provider:          provider,
		Consumer:          consumer,
		ConsumerReader:    r.Client,
		LocalPods:         pods.Lister(),
		ConsumerClusterID: consumerID,
		ProviderClusterID: fc.Spec.ClusterID,
		VirtualNodeName:   name,
		VirtualNodeLabels: newNode(fc, r.endpoint(), nil).Labels,
		NodeIP:            r.NodeIP,
		Logger:            logger.WithName("pods"),
	})
	if err != nil {
		return err
	}
	if err := h.Start(ctx); err != nil {
		return fmt.Errorf("watching the remote pods on provider %s: %w", fc.Name, err)
	}
	objects, err := objectreflection.New(objectreflection.Options{
		Provider:          provider,
		Consumer:          consumer,
		ConsumerClusterID: consumerID,
		TwinNamespaces:    objectreflection.ReadyTwinNamespaces(r.Client, fc.Spec.ClusterID),
		Logger:            logger.WithName("objects"),
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	octx, stopObjects := context.WithCancel(ctx)
	defer stopObjects()
	wg.Go(func() {
		if err := objects.Start(octx); err != nil {
			logger.Info("The object reflection stopped", "error", err.Error())
		}
	})
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: consumer.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	unstarted := informers.NewSharedInformerFactory(consumer, 0)
	pc, err := node.NewPodController(node.PodControllerConfig{
		PodClient:                 consumer.CoreV1(),
		PodInformer:               pods,
		EventRecorder:             broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "offload-virtual-kubelet", Host: name}),
		Provider:                  h,
		ConfigMapInformer:         unstarted.Core().V1().ConfigMaps(),
		SecretInformer:            unstarted.Core().V1().Secrets(),
		ServiceInformer:           unstarted.Core().V1().Services(),
		SkipDownwardAPIResolution: true,
		// virtual-kubelet's default limiter lets 10 pods a second through
		// once a burst of 100 is spent, on every enqueue, not only retries:
		// a 1000-replica Deployment would take a minute and a half to start.
		// The clients' rate limits (reflectionQPS) protect the API servers.
		SyncPodsFromKubernetesRateLimiter:    queueRateLimiter(),
		DeletePodsFromKubernetesRateLimiter:  queueRateLimiter(),
		SyncPodStatusFromProviderRateLimiter: queueRateLimiter(),
	})
	if err != nil {
		return fmt.Errorf("creating the pod controller of %q: %w", name, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	onNode.Start(ctx.Done())
	defer onNode.Shutdown()
	workers := r.PodWorkers
	if workers <= 0 {
		workers = DefaultPodWorkers
	}
	go func() { _ = pc.Run(ctx, workers) }()
	defer func() {
		cancel()
		<-pc.Done()
	}()
	select {
	case <-pc.Ready():
	case <-pc.Done():
		return fmt.Errorf("starting the pod controller of %q: %w", name, pc.Err())
	case <-ctx.Done():
		return nil
	}
	r.register(fc.Name, podsRun{node: name, handler: h, config: pcfg, provider: provider})
	defer r.unregister(fc.Name, h)
	// Both sides are fully listed now: the remote pods whose consumer pod
	// went while the agent was away can go.
	local, err := pods.Lister().List(labels.Everything())
	if err != nil {
		return err
	}
	if err := h.CollectOrphans(ctx, local); err != nil {
		logger.Info("Cannot collect orphaned remote pods yet", "error", err.Error())
	}
	renew := time.NewTicker(tokenRenewInterval)
	defer renew.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-pc.Done():
			return fmt.Errorf("running the pod controller of %q: %w", name, errors.Join(pc.Err(), errors.New("the pod controller stopped")))
		case <-renew.C:
			if err := h.RenewTokens(ctx); err != nil {
				logger.Info("Cannot renew the service-account tokens of offloaded pods", "error", err.Error())
			}
		}
	}
}

// consumerClusterID returns the cluster ID of this cluster, the consumer.
func (r *Reconciler) consumerClusterID(ctx context.Context) (string, error) {
	if r.ClusterID != "" {
		return r.ClusterID, nil
	}
	id, err := peering.ReadIdentity(ctx, r.Reader, r.Namespace)
	if err != nil {
		return "", err
	}
	return id.ID, nil
}

// queueRateLimiter is the rate limiter of the PodController's queues: per
// pod, exponential backoff of failures from 5 ms to 30 s; overall, a
// bucket well above what the clients may send.
func queueRateLimiter() workqueue.TypedRateLimiter[any] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[any](5*time.Millisecond, 30*time.Second),
		&workqueue.TypedBucketRateLimiter[any]{Limiter: rate.NewLimiter(rate.Limit(10*reflectionQPS), 10*reflectionBurst)},
	)
}
