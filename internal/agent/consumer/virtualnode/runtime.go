package virtualnode

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/kubeletapi"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/podreflection"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/providerclient"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// maxRestartDelay bounds the wait before a failed step restarts.
const maxRestartDelay = time.Minute

// peer is what every step of a peer's runtime reads. It is fixed for the
// runtime's life: a change of any of it starts a new runtime.
type peer struct {
	// fc is the ForeignCluster as it was when the runtime started.
	fc *offloadv1alpha1.ForeignCluster
	// creds are the provider's credentials; a renewed token is swapped in
	// place, and the clients below use it from their next request on.
	creds *providerclient.Credentials
	// providerConfig and provider reach the provider as the tenant, at the
	// rates of reflection.
	providerConfig *rest.Config
	provider       kubernetes.Interface
	// metrics reads the provider's metrics API as the tenant.
	metrics metricsclient.Interface
	// offers reads and watches the provider's ResourceOffer (JSON, no
	// client-wide timeout, which would cut the watch: reads are bounded
	// one by one).
	offers client.WithWatch
	// discovery asks the provider's API server for its version, within
	// the poll interval.
	discovery discovery.ServerVersionInterface
	// addresses is the peering's address translation, one read of the
	// Tunnel shared by pod and object reflection.
	addresses func() *reflection.Addresses
	// policy is the provider's policy for this cluster's pods, as the
	// newest ResourceOffer read says; nil until one is read.
	policy atomic.Pointer[offloadv1alpha1.ConsumerPolicy]
	// offered is what the newest ResourceOffer read lends; nil until one
	// is read.
	offered atomic.Pointer[corev1.ResourceList]
}

// providerPolicy is the provider's policy for this cluster's pods; nil
// until the provider said it.
func (p *peer) providerPolicy() *offloadv1alpha1.ConsumerPolicy { return p.policy.Load() }

// node is the name of the peer's virtual node.
func (p *peer) node() string { return offloadv1alpha1.VirtualNodeName(p.fc.Name) }

// step is one named part of a peer's runtime.
type step struct {
	name string
	// run runs the step until ctx is done (it then returns nil) or it fails.
	run func(ctx context.Context) error
	// failed reports a failure of run, beside the log line. Optional.
	failed func(ctx context.Context, err error)
}

// steps are the parts of rt's runtime. Each is restarted with backoff on
// its own when it fails: a provider that cannot be reached makes the node
// NotReady, but never stops the pods of the node, nor the reverse.
//   - node controller: the virtual node and its Lease, following the offer
//     and pinging the provider (node.go);
//   - pod controller: the agent's pod controller (podcontroller) over a
//     podreflection.Handler, whose own loops collect orphans and renew the
//     service-account tokens of offloaded pods (pods.go);
//   - object reflection: the ConfigMaps, Secrets, Services and
//     EndpointSlices of the namespaces offloaded to the peer (pods.go).
func (r *Reconciler) steps(rt *peerRuntime) []step {
	p := rt.peer
	return []step{
		{
			name:   "node controller",
			run:    func(ctx context.Context) error { return r.runNode(ctx, p) },
			failed: func(ctx context.Context, err error) { r.nodeFailed(ctx, p, err) },
		},
		{
			name: "pod controller",
			run:  func(ctx context.Context) error { return r.runPodController(ctx, rt) },
		},
		{
			name: "object reflection",
			run:  func(ctx context.Context) error { return r.runObjectReflection(ctx, p) },
		},
	}
}

// peerRuntime is everything that runs for one authenticated peer: its
// steps, started together and stopped together.
type peerRuntime struct {
	// key is what the runtime was started from, but the token.
	key    string
	peer   *peer
	cancel context.CancelFunc
	done   chan struct{}
	// started is when the runtime was made.
	started time.Time

	mu   sync.Mutex
	pods *podsRun // the running pod reflection; nil while none runs
}

// podsRun is the running pod reflection of one peer, which the kubelet API
// resolves pods with.
type podsRun struct {
	handler *podreflection.Handler
	// pods lists the consumer pods bound to the virtual node.
	pods corelisters.PodLister
}

// running is the running pod reflection; nil while none runs.
func (rt *peerRuntime) running() *podsRun {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.pods
}

// setPods records the running pod reflection, or forgets it when it is
// nil and the one recorded is still was.
func (rt *peerRuntime) setPods(run, was *podsRun) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if run != nil || rt.pods == was {
		rt.pods = run
	}
}

// newRuntime prepares the runtime of fc: every client of the provider the
// runtime's steps use, built once, and the peering's address translation.
// It starts nothing.
func newRuntime(fc *offloadv1alpha1.ForeignCluster, creds *providerclient.Credentials, key string, addresses func() *reflection.Addresses,
	scheme *runtime.Scheme, timeout time.Duration) (*peerRuntime, error) {
	cfg := creds.Config()
	cfg.QPS, cfg.Burst = reflectionQPS, reflectionBurst
	p := &peer{fc: fc.DeepCopy(), creds: creds, providerConfig: cfg, addresses: addresses}
	var err error
	if p.provider, err = kubernetes.NewForConfig(reflectionConfig(cfg)); err != nil {
		return nil, fmt.Errorf("creating the client of provider %s: %w", fc.Name, err)
	}
	if p.metrics, err = metricsclient.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("creating the metrics client of provider %s: %w", fc.Name, err)
	}
	if p.offers, err = client.NewWithWatch(creds.Config(), client.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("creating the client of provider %s's offer: %w", fc.Name, err)
	}
	versionConfig := creds.Config()
	versionConfig.Timeout = timeout
	if p.discovery, err = discovery.NewDiscoveryClientForConfig(versionConfig); err != nil {
		return nil, fmt.Errorf("creating the discovery client of provider %s: %w", fc.Name, err)
	}
	return &peerRuntime{key: key, started: time.Now(), peer: p}, nil
}

// start runs steps, the steps of rt, each in its goroutine, until stop.
func (r *Reconciler) start(ctx context.Context, rt *peerRuntime, steps []step) {
	logger := log.FromContext(ctx).WithValues("foreignCluster", klog.KObj(rt.peer.fc), "node", rt.peer.node())
	ctx, rt.cancel = context.WithCancel(log.IntoContext(context.WithoutCancel(ctx), logger))
	rt.done = make(chan struct{})
	r.mu.Lock()
	if r.peers == nil {
		r.peers = map[string]*peerRuntime{}
	}
	r.peers[rt.peer.fc.Name] = rt
	r.mu.Unlock()
	logger.Info("Starting the virtual node")
	var wg sync.WaitGroup
	for _, s := range steps {
		wg.Go(func() {
			r.restarting(ctx, "the "+s.name+" stopped", s.run, func(err error, delay time.Duration) {
				logger.Info("A step of the virtual node stopped; restarting it", "step", s.name, "error", err.Error(), "after", delay)
				if s.failed != nil {
					s.failed(ctx, err)
				}
			})
		})
	}
	go func() {
		defer close(rt.done)
		wg.Wait()
	}()
}

// running returns the key of the runtime of name, "" when none runs.
func (r *Reconciler) running(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rt := r.peers[name]; rt != nil {
		return rt.key
	}
	return ""
}

// stop stops the runtime of name, if any, and waits until every step stopped.
func (r *Reconciler) stop(name string) {
	r.mu.Lock()
	rt := r.peers[name]
	delete(r.peers, name)
	r.mu.Unlock()
	if rt != nil {
		rt.cancel()
		<-rt.done
	}
}

// stopAll stops every runtime.
func (r *Reconciler) stopAll() {
	r.mu.Lock()
	names := make([]string, 0, len(r.peers))
	for name := range r.peers {
		names = append(names, name)
	}
	r.mu.Unlock()
	for _, name := range names {
		r.stop(name)
	}
}

// restarting runs run until ctx is cancelled, calling failed and waiting
// with backoff, from the poll interval up to maxRestartDelay, each time it
// returns; stopped is the error of a run that returned nil.
func (r *Reconciler) restarting(ctx context.Context, stopped string, run func(context.Context) error, failed func(err error, delay time.Duration)) {
	// apimachinery's backoff, back to the poll interval after a run that
	// lasted longer than the cap.
	backoff := wait.Backoff{Duration: r.pollInterval(), Factor: 2, Cap: maxRestartDelay, Steps: math.MaxInt32}
	next := backoff.DelayWithReset(clock.RealClock{}, maxRestartDelay)
	for ctx.Err() == nil {
		err := run(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New(stopped)
		}
		delay := next()
		failed(err, delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// Resolve implements kubeletapi.Resolver: the remote pod of consumer pod
// namespace/pod, when it is bound to one of the virtual nodes.
func (r *Reconciler) Resolve(ctx context.Context, namespace, pod string) (kubeletapi.Target, error) {
	p, err := r.podsKube().CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return kubeletapi.Target{}, fmt.Errorf("pod %s/%s: %w", namespace, pod, kubeletapi.ErrUnknownPod)
	}
	if err != nil {
		return kubeletapi.Target{}, fmt.Errorf("reading pod %s/%s: %w", namespace, pod, err)
	}
	rt, run := r.podsOf(p.Spec.NodeName)
	if run == nil {
		return kubeletapi.Target{}, fmt.Errorf("pod %s/%s runs on node %q: %w", namespace, pod, p.Spec.NodeName, kubeletapi.ErrUnknownPod)
	}
	twin, ok := run.handler.TwinNamespace(namespace)
	if !ok {
		return kubeletapi.Target{}, fmt.Errorf("namespace %s has no Ready twin namespace on the provider of node %s: %w", namespace, rt.peer.node(), kubeletapi.ErrUnknownPod)
	}
	return kubeletapi.Target{NodeName: rt.peer.node(), Config: rt.peer.providerConfig, Client: rt.peer.provider, Namespace: twin, Name: pod}, nil
}
