package remotenamespace

import (
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestBothControllersRegisterWithAManager(t *testing.T) {
	mgr, err := ctrl.NewManager(envtest.APIServer(t), ctrl.Options{Scheme: scheme.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Namespace: installNamespace, skipNameValidation: true}).SetupWithManager(mgr); err != nil {
		t.Error(err)
	}
	if err := (&GarbageCollector{Client: mgr.GetClient(), skipNameValidation: true}).SetupWithManager(mgr); err != nil {
		t.Error(err)
	}
}
