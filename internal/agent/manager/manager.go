// Package manager runs the offload-agent controller-manager: a
// controller-runtime Manager with health probes and leader election, which
// the offload.io controllers will be added to. For now it only checks and
// logs the cluster identity at start.
package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
)

// Options configure the controller-manager.
type Options struct {
	// Namespace is the namespace the agent runs in: it holds the leader
	// election Lease and the cluster identity ConfigMap.
	Namespace string
	// ClusterName is the name of this cluster as the install set it. When
	// set, it is compared with the identity ConfigMap's.
	ClusterName string
	// HealthProbeBindAddress is the address of /healthz and /readyz.
	HealthProbeBindAddress string
	// MetricsBindAddress is the address of /metrics, served over HTTPS to
	// the clients RBAC allows (metricsOptions); "0" turns it off.
	MetricsBindAddress string
	// PprofBindAddress is the address of Go's /debug/pprof endpoints;
	// empty or "0" turns them off (the default).
	PprofBindAddress string
	// LeaderElection makes only one replica run the controllers at a time.
	LeaderElection bool
	// GracefulShutdownTimeout bounds how long the controllers may take to
	// stop once the context is cancelled.
	GracefulShutdownTimeout time.Duration
	// Logger receives the manager's logs; the zero value discards them.
	Logger klog.Logger
	// NamespacedObjects are types whose cache watches only Namespace (the
	// agent's RBAC allows no more for them).
	NamespacedObjects []client.Object
	// Controllers add the controllers to the manager New creates. They are
	// functions so that controller packages may import this one.
	Controllers []func(ctrlmanager.Manager) error
}

// NewOptions returns Options with the defaults the chart relies on.
func NewOptions() Options {
	return Options{
		HealthProbeBindAddress:  ":8081",
		MetricsBindAddress:      "0",
		LeaderElection:          true,
		GracefulShutdownTimeout: 30 * time.Second,
	}
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.Namespace == "" {
		return errors.New("the namespace is not set: pass --namespace or set POD_NAMESPACE")
	}
	if o.HealthProbeBindAddress == "" || o.HealthProbeBindAddress == "0" {
		return errors.New("--health-probe-bind-address must be set: the kubelet probes it")
	}
	if o.GracefulShutdownTimeout < 0 {
		return fmt.Errorf("the graceful shutdown timeout must not be negative, got %s", o.GracefulShutdownTimeout)
	}
	return nil
}

// New returns a controller-runtime Manager configured by o, talking to the
// API server of cfg, with /healthz and /readyz and the identity check
// added. Start it with its Start method, or use Run.
func New(cfg *rest.Config, o Options) (ctrlmanager.Manager, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	shutdown := o.GracefulShutdownTimeout
	byObject := map[client.Object]cache.ByObject{}
	for _, obj := range o.NamespacedObjects {
		byObject[obj] = cache.ByObject{Namespaces: map[string]cache.Config{o.Namespace: {}}}
	}
	// Every pod of the cluster bound to a node, slimmed: the consumer's
	// offloaded pods are held again, whole, by the virtual nodes' pod
	// controllers. Its readers count or address bound pods only (the
	// offer of the free resources, the consumer's network filter), so the
	// API server leaves out a pod's creation event and a pending pod costs
	// nothing. The informer starts with its first reader: a cluster that
	// only provides, with the default offer, has none.
	byObject[&corev1.Pod{}] = cache.ByObject{Transform: SlimPod, Field: fields.OneTermNotEqualSelector("spec.nodeName", "")}
	var lock resourcelock.Interface
	if o.LeaderElection {
		var err error
		if lock, err = leaderLock(cfg, o.Namespace); err != nil {
			return nil, err
		}
	}
	mgr, err := ctrlmanager.New(cfg, ctrlmanager.Options{
		Scheme:                              scheme.Scheme,
		Logger:                              o.Logger,
		HealthProbeBindAddress:              o.HealthProbeBindAddress,
		Metrics:                             metricsOptions(o.MetricsBindAddress),
		PprofBindAddress:                    o.PprofBindAddress,
		LeaderElection:                      o.LeaderElection,
		LeaderElectionResourceLockInterface: lock,
		LeaderElectionID:                    offloadv1alpha1.ControllerManager,
		LeaderElectionNamespace:             o.Namespace,
		// A replica that is shut down hands the Lease over at once, so a
		// rollout does not wait for the Lease to expire.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &shutdown,
		// The cache holds every bound Pod and every Node of the cluster;
		// managed fields are a third of a pod's size and no controller
		// reads them. Pods keep only what the controllers read (SlimPod).
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: byObject},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the controller manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the liveness check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the readiness check: %w", err)
	}
	check := &identityCheck{reader: mgr.GetAPIReader(), namespace: o.Namespace, clusterName: o.ClusterName, log: o.Logger}
	if err := mgr.Add(check); err != nil {
		return nil, fmt.Errorf("adding the identity check: %w", err)
	}
	for _, add := range o.Controllers {
		if err := add(mgr); err != nil {
			return nil, fmt.Errorf("adding a controller: %w", err)
		}
	}
	return mgr, nil
}

// metricsOptions serves /metrics at addr over HTTPS, to the clients the
// API server authenticates (TokenReview) and authorizes to get the
// non-resource URL /metrics (SubjectAccessReview), as kubelets and API
// servers serve theirs: the peers' names, capacity and traffic are for
// whom the cluster's RBAC lets read them. The certificate is self-signed,
// made at start; scrapers skip its verification and rely on the bearer
// token's authorization, as with the kubelet's.
func metricsOptions(addr string) metricsserver.Options {
	if addr == "" || addr == "0" {
		return metricsserver.Options{BindAddress: "0"}
	}
	return metricsserver.Options{BindAddress: addr, SecureServing: true, FilterProvider: filters.WithAuthenticationAndAuthorization}
}

// ErrLeaderElectionLost is returned by Run when the replica lost its
// Lease while running, which an API server unreachable for longer than the
// renew deadline causes. The manager cannot be started again; the caller
// starts anew (offload-agent executes itself again, in place).
var ErrLeaderElectionLost = errors.New("lost the leader election: the API server could not renew the Lease in time")

// leaderElectionLost is the error controller-runtime's manager stops with
// when it loses its Lease. controller-runtime has no sentinel for it, so
// this one comparison with its text is the only place that knows it.
const leaderElectionLost = "leader election lost"

// Run creates the Manager with New and runs it until ctx is cancelled, then
// stops it gracefully and returns nil. It returns ErrLeaderElectionLost
// when the manager lost its Lease, and another error when the manager
// cannot start or a component fails.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	// Building the manager reads the API server (its REST mapping): an
	// agent that starts, or starts again, during an outage waits here.
	if err := WaitForAPIServer(ctx, cfg, o.HealthProbeBindAddress, o.Logger); err != nil || ctx.Err() != nil {
		return err
	}
	mgr, err := New(cfg, o)
	if err != nil {
		return err
	}
	o.Logger.Info("Starting the controller manager", "namespace", o.Namespace, "leaderElection", o.LeaderElection,
		"healthProbeBindAddress", o.HealthProbeBindAddress, "metricsBindAddress", o.MetricsBindAddress)
	if err := mgr.Start(ctx); err != nil {
		if ctx.Err() == nil && err.Error() == leaderElectionLost {
			return ErrLeaderElectionLost
		}
		return fmt.Errorf("running the controller manager: %w", err)
	}
	o.Logger.Info("Stopped the controller manager")
	return nil
}
