package manager

import (
	"os"
	"testing"

	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	// controller-runtime's own packages log through its global logger.
	ctrllog.SetLogger(klog.Background())
	os.Exit(envtest.RunWithAPIServer(m))
}
