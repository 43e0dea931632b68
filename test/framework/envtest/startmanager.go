package envtest

import (
	"context"
	"testing"

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
