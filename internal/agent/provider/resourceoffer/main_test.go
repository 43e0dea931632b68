package resourceoffer

import (
	"os"
	"testing"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

func TestMain(m *testing.M) { os.Exit(framework.RunWithAPIServer(m)) }
