package virtualnode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/objectreflection"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/podcontroller"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/podreflection"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/storage"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// Client rates of pod reflection. Every offloaded pod costs a few requests
// on each side (create, status updates); client-go's default of 5 requests
// per second would make a Deployment of a thousand replicas take minutes.
const (
	reflectionQPS   = 200
	reflectionBurst = 400
)

// reflectionConfig is a copy of cfg for the clientsets of pod and object
// reflection: reflectionQPS, and protobuf, which the API server encodes
// and the agent decodes several times faster than JSON (every pod of a
// virtual node is watched on both sides). Only built-in types speak it:
// never use the config for custom resources.
func reflectionConfig(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.QPS, out.Burst = reflectionQPS, reflectionBurst
	out.ContentType = runtime.ContentTypeProtobuf
	out.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return out
}

// DefaultPodWorkers is how many pods of one virtual node are brought to the
// provider at once when Reconciler.PodWorkers is zero. Creating a remote
// pod takes three requests one after the other (the consumer's token, the
// provider's token Secret, the provider's pod), and during a burst each
// waits behind the API servers' other work. With 32 workers, the pods of a
// 1,000-pod burst waited a median 6 to 16 s between binding and remote
// creation while the two clusters' CPUs were partly idle; with 128, 3 to
// 5 s, and P1 fell from 1.41 to 1.24 (bench/offload_bench_test.go). The
// clients' rates (reflectionQPS) still bound what the workers send.
const DefaultPodWorkers = 128

// statusWorkers is how many statuses of one virtual node's pods are
// written, and how many of its pods deleted, at once. A status is one
// request, and with 32 writers the statuses of a 1,000-pod burst took a
// median 0.05 to 0.1 s from remote Running to Running. With 128, a
// restarted agent, which writes every status again, peaked about 10 MiB
// higher at 1,000 pods; at 10,000 its peak was already 241 of 256 MiB.
const statusWorkers = 32

// runPodController runs the pod controller of the peer's virtual node
// (podcontroller) over a podreflection.Handler, and the handler's own loops
// (orphan collection, token renewal) once the controller is ready, until
// ctx is cancelled or the controller fails.
func (r *Reconciler) runPodController(ctx context.Context, rt *peerRuntime) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	name := rt.peer.node()
	// The informer keeps slim pods, and the new ones whole until their
	// remote pods are created, which spares reading each back.
	whole := podcontroller.NewWholePods(0)
	onNode := informers.NewSharedInformerFactoryWithOptions(r.podsKube(), 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", name).String()
	}), informers.WithTransform(func(obj any) (any, error) {
		whole.Keep(obj)
		return podreflection.SlimConsumerPod(obj)
	}))
	pods := onNode.Core().V1().Pods()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.podsKube().CoreV1().Events("")})
	defer broadcaster.Shutdown()
	h, err := r.newPodHandler(ctx, rt.peer, pods, broadcaster)
	if err != nil {
		return err
	}
	o := newObserver(rt.peer.fc.Name)
	if _, err := pods.Informer().AddEventHandler(o.handler()); err != nil {
		return fmt.Errorf("following the pods of %q: %w", name, err)
	}
	pc, err := r.newPodController(name, instrumented{Handler: h, o: o}, podsClient{PodsGetter: r.podsKube().CoreV1(), o: o}, pods, whole, broadcaster, log.FromContext(ctx).WithName("podcontroller"))
	if err != nil {
		return err
	}
	onNode.Start(ctx.Done())
	defer onNode.Shutdown()
	var wg sync.WaitGroup
	defer func() {
		cancel()
		<-pc.Done()
		wg.Wait()
	}()
	go func() { _ = pc.Run(ctx, cmp.Or(r.PodWorkers, DefaultPodWorkers), statusWorkers) }()
	select {
	case <-pc.Ready():
	case <-pc.Done():
		return fmt.Errorf("starting the pod controller of %q: %w", name, pc.Err())
	case <-ctx.Done():
		return nil
	}
	run := &podsRun{handler: h, pods: pods.Lister()}
	rt.setPods(run, nil)
	defer rt.setPods(nil, run)
	// Both sides are fully listed now: the handler's loops may start.
	wg.Go(func() { _ = h.Run(ctx) })
	select {
	case <-ctx.Done():
		return nil
	case <-pc.Done():
		return fmt.Errorf("running the pod controller of %q: %w", name, errors.Join(pc.Err(), errors.New("the pod controller stopped")))
	}
}

// newPodHandler builds the peer's podreflection.Handler over the pods of
// its virtual node, and starts its watch of the remote pods.
func (r *Reconciler) newPodHandler(ctx context.Context, p *peer, pods coreinformers.PodInformer, broadcaster record.EventBroadcaster) (*podreflection.Handler, error) {
	consumerID, err := r.consumerClusterID(ctx)
	if err != nil {
		return nil, err
	}
	name := p.node()
	h, err := podreflection.New(podreflection.Options{
		Provider:          p.provider,
		Consumer:          r.podsKube(),
		ConsumerReader:    r.Client,
		LocalPods:         pods.Lister(),
		LocalPodsSynced:   pods.Informer().HasSynced,
		ConsumerClusterID: consumerID,
		ProviderClusterID: p.fc.Spec.ClusterID,
		VirtualNodeName:   name,
		VirtualNodeLabels: newNode(p.fc, endpoint{}, nil).Labels,
		NodeIP:            r.NodeIP,
		Addresses:         p.addresses,
		Policy:            p.providerPolicy,
		Claims: func(ctx context.Context, namespace, claim, twin string) (string, error) {
			return storage.RemoteClaimOf(ctx, r.Client, namespace, claim, p.fc.Spec.ClusterID, twin)
		},
		TokenRenewInterval: r.TokenRenewInterval,
		// The provider's events of a remote pod, on its consumer pod, from
		// "provider/NAME": correlated and rate-limited per pod.
		Events: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "provider/" + p.fc.Name, Host: name}),
		Logger: log.FromContext(ctx).WithName("pods"),
	})
	if err != nil {
		return nil, err
	}
	if err := h.Start(ctx); err != nil {
		return nil, fmt.Errorf("watching the remote pods on provider %s: %w", p.fc.Name, err)
	}
	return h, nil
}

// newPodController builds the pod controller of node name over h,
// writing the consumer's pods with podClient, and reading them whole from
// whole or podClient. It records Warning events only: the failures of the
// provider, as a kubelet would.
func (r *Reconciler) newPodController(name string, h instrumented, podClient typedcorev1.PodsGetter, pods coreinformers.PodInformer, whole *podcontroller.WholePods, broadcaster record.EventBroadcaster, logger logr.Logger) (*podcontroller.Controller, error) {
	pc, err := podcontroller.New(podcontroller.Config{
		Pods:        pods.Informer(),
		Lister:      pods.Lister(),
		Client:      podClient,
		Whole:       whole,
		Provider:    h,
		Events:      broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "offload-virtual-kubelet", Host: name}),
		RateLimiter: queueRateLimiter,
		Logger:      logger,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the pod controller of %q: %w", name, err)
	}
	return pc, nil
}

// runObjectReflection reflects the ConfigMaps, Secrets, Services and
// EndpointSlices of the namespaces offloaded to the peer until ctx is done.
func (r *Reconciler) runObjectReflection(ctx context.Context, p *peer) error {
	consumerID, err := r.consumerClusterID(ctx)
	if err != nil {
		return err
	}
	objects, err := objectreflection.New(objectreflection.Options{
		Provider:          p.provider,
		Consumer:          r.podsKube(),
		ConsumerClusterID: consumerID,
		NodeName:          p.node(),
		TwinNamespaces:    objectreflection.ReadyTwinNamespaces(r.Client, p.fc.Spec.ClusterID),
		Addresses:         p.addresses,
		Logger:            log.FromContext(ctx).WithName("objects"),
	})
	if err != nil {
		return err
	}
	return objects.Start(ctx)
}

// podsKube is the consumer client of pod and object reflection.
func (r *Reconciler) podsKube() kubernetes.Interface {
	if r.PodsKube != nil {
		return r.PodsKube
	}
	return r.Kube
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

// queueRateLimiter is the rate limiter of the pod controller's queues: per
// pod, exponential backoff of failures from 5 ms to 30 s. Only retries
// wait: the clients' rate limits (reflectionQPS) protect the API servers,
// and a limit on every enqueue would make a 1000-replica Deployment wait
// on the queue.
func queueRateLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 30*time.Second)
}
