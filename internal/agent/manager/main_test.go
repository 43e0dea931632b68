package manager

import (
	"os"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

func TestMain(m *testing.M) {
	// controller-runtime's own packages log through its global logger.
	ctrllog.SetLogger(klog.Background())
	os.Exit(framework.RunWithAPIServer(m))
}

// apiServer returns the config of a real kube-apiserver (envtest).
func apiServer(t *testing.T) *rest.Config { return framework.APIServer(t) }

// newNamespace creates a namespace with a random name for one test.
func newNamespace(t *testing.T, c client.Client) string { return framework.NewNamespace(t, c, "cm") }

func newClient(t *testing.T, cfg *rest.Config) client.Client { return framework.NewClient(t, cfg) }
