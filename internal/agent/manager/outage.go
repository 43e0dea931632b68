package manager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// An API server outage longer than the Lease's renew deadline makes the
// leader lose its Lease, and controller-runtime's manager stop; Run then
// returns ErrLeaderElectionLost and offload-agent executes itself again in
// place. Two things keep that from costing more than the outage:
//   - the new program keeps the replica's leader election identity
//     (leaderIdentityEnv), so when nobody else took the Lease it takes it
//     back at once, instead of waiting for a Lease it held to expire;
//   - it waits for the API server before it builds its manager, which
//     reads the API server, and meanwhile answers the kubelet's liveness
//     probe, so the container is not restarted during a long outage.

// leaderIdentityEnv carries this replica's leader election identity into
// the program it executes again in place, through the environment.
const leaderIdentityEnv = "OFFLOAD_LEADER_IDENTITY"

// apiServerProbeTimeout bounds each probe of the API server while waiting
// for it: a frozen API server accepts connections and never answers.
const apiServerProbeTimeout = 5 * time.Second

// leaderLock is the Lease lock of the controller-manager, held under this
// replica's identity: the one the program it replaced in place had, else
// a new one (host name and a UUID, as controller-runtime makes them),
// which it records in the environment for the next.
func leaderLock(cfg *rest.Config, namespace string) (resourcelock.Interface, error) {
	id := os.Getenv(leaderIdentityEnv)
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("naming this replica for the leader election: %w", err)
		}
		id = host + "_" + string(uuid.NewUUID())
		if err := os.Setenv(leaderIdentityEnv, id); err != nil {
			return nil, fmt.Errorf("recording the leader election identity: %w", err)
		}
	}
	kube, err := kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election"))
	if err != nil {
		return nil, fmt.Errorf("creating the leader election client: %w", err)
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, offloadv1alpha1.ControllerManager,
		kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return nil, fmt.Errorf("creating the leader election lock: %w", err)
	}
	return lock, nil
}

// WaitForAPIServer returns once the API server of cfg answers, or ctx is
// done. While it waits, it serves the health probes on healthAddr: the
// liveness probe (/healthz) passes, the readiness probe (/readyz) fails.
// The controller-manager and the auth service call it at start: an agent
// that starts during an outage waits instead of exiting.
func WaitForAPIServer(ctx context.Context, cfg *rest.Config, healthAddr string, log klog.Logger) error {
	probeCfg := rest.CopyConfig(cfg)
	probeCfg.Timeout = apiServerProbeTimeout
	disco, err := discovery.NewDiscoveryClientForConfig(probeCfg)
	if err != nil {
		return fmt.Errorf("creating the API server probe: %w", err)
	}
	answers := func() error {
		_, err := disco.ServerVersion()
		return err
	}
	if err := answers(); err == nil {
		return nil
	}
	ln, err := net.Listen("tcp", healthAddr)
	if err != nil {
		return fmt.Errorf("serving the health probes on %s while waiting for the API server: %w", healthAddr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "waiting for the API server", http.StatusServiceUnavailable)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "Serving the health probes while waiting for the API server")
		}
	}()
	defer func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		<-done
	}()
	start := time.Now()
	log.Info("Waiting for the API server", "host", cfg.Host)
	err = wait.PollUntilContextCancel(ctx, time.Second, false, func(context.Context) (bool, error) {
		return answers() == nil, nil
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("waiting for the API server: %w", err)
	}
	log.Info("The API server answers", "waited", time.Since(start).Round(time.Millisecond))
	return nil
}
