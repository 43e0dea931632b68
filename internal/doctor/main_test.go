package doctor

import (
	"os"
	"testing"

	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// The peer tests run against a real kube-apiserver, started on first use.
func TestMain(m *testing.M) { os.Exit(envtest.RunWithAPIServer(m)) }
