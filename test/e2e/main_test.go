// Package e2e holds the end-to-end tests of kubectl-offload: they start real
// local control planes with test/framework and drive the built binaries the
// way a user does.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

// binDir holds the kubectl-offload and offload-agent binaries under test.
var binDir string

func TestMain(m *testing.M) {
	// The tests' controller-runtime clients log through klog, as the
	// agent does, not a stack trace saying no logger was set.
	ctrllog.SetLogger(klog.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	start := time.Now()
	if err := tools.EnsureTools(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, err := tools.BuildBinaries(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	fmt.Fprintf(os.Stderr, "e2e: tools and binaries ready in %s\n", time.Since(start).Round(time.Millisecond))
	code := m.Run()
	_ = tools.RemoveBinaries()
	os.Exit(code)
}
