package framework

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
)

// StartManager starts a controller-runtime manager on cfg, with no metrics
// or health endpoints, after setup registered its controllers, and stops it
// when the test ends, failing the test if it stopped with an error.
func StartManager(t *testing.T, cfg *rest.Config, setup func(ctrlmanager.Manager) error) ctrlmanager.Manager {
	t.Helper()
	mgr, err := ctrlmanager.New(cfg, ctrlmanager.Options{
		Scheme: scheme.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := setup(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return mgr
}

// Eventually polls cond every 100 ms until it holds, and fails the test
// with what when timeout passes first.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) bool) {
	t.Helper()
	if _, err := Poll(t.Context(), 100*time.Millisecond, timeout, func(ctx context.Context) (bool, string) { return cond(ctx), "" }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Poll calls cond every interval until it holds, and returns how long that
// took. When timeout passes first, the error carries what cond said last,
// such as the state it was still waiting on.
func Poll(ctx context.Context, interval, timeout time.Duration, cond func(ctx context.Context) (bool, string)) (time.Duration, error) {
	start := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why := cond(ctx)
		last = why
		return ok, nil
	})
	if err != nil && last != "" {
		return time.Since(start), fmt.Errorf("%w (%s)", err, last)
	}
	return time.Since(start), err
}
