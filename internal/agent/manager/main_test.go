package manager

import (
	"os"
	"testing"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestMain(m *testing.M) {
	// controller-runtime's own packages log through its global logger.
	ctrllog.SetLogger(klog.Background())
	os.Exit(envtest.RunWithAPIServer(m))
}
