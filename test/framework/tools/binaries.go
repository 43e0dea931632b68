package tools

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// BuildBinaries builds kubectl-offload, its completion helper and
// offload-agent into a temporary directory, once per process, and returns
// that directory. Tests run these binaries the way a user does.
func BuildBinaries(ctx context.Context) (string, error) {
	buildOnce.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "offload-bin-"); buildErr != nil {
			return
		}
		for _, pkg := range []string{"kubectl-offload", "offload-agent"} {
			cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(buildDir, pkg), "./cmd/"+pkg)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("building %s: %w\n%s", pkg, err, out)
				return
			}
		}
		shim, err := os.ReadFile(filepath.Join(root, "kubectl_complete-offload"))
		if err != nil {
			buildErr = err
			return
		}
		buildErr = os.WriteFile(filepath.Join(buildDir, "kubectl_complete-offload"), shim, 0o755)
	})
	return buildDir, buildErr
}

// RemoveBinaries removes what BuildBinaries built. Every test of the
// process shares those binaries: call it once they are all done, as
// TestMain does after m.Run.
func RemoveBinaries() error {
	if buildDir == "" {
		return nil
	}
	return os.RemoveAll(buildDir)
}
