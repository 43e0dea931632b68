// Package tools finds and builds what the local clusters run on: the
// repository's root and cache, the Kubernetes binaries at the pinned
// versions (hack/tools.sh, hack/versions.env) and the kubectl-offload
// binaries under test.
package tools

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// RepoRoot returns the root of the kubectl-offload repository, found by
// walking up from the working directory to the go.mod of the module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/kubectl-offload/kubectl-offload\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the kubectl-offload repository: run from its checkout")
		}
		dir = parent
	}
}

// CacheDir returns the directory holding built tools and local clusters:
// $OFFLOAD_CACHE_DIR, or .cache under the repository root.
func CacheDir() (string, error) {
	if d := os.Getenv("OFFLOAD_CACHE_DIR"); d != "" {
		return filepath.Abs(d)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache"), nil
}

// BinDir returns the directory hack/tools.sh builds the tools into.
func BinDir() (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "bin"), nil
}

// Versions returns the pinned tool versions from hack/versions.env.
func Versions() (map[string]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(root, "hack", "versions.env"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, val, ok := strings.Cut(line, "="); ok {
			v[k] = val
		}
	}
	return v, s.Err()
}

var (
	toolsOnce sync.Map // tool list -> *toolsResult
	kubeOnce  sync.Map // Kubernetes version -> *toolsResult
)

// kubeCommands are the Kubernetes commands hack/tools.sh builds per version.
var kubeCommands = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet", "kube-proxy"}

// KubeBinDir returns the directory holding the Kubernetes commands of
// version (hack/tools.sh).
func KubeBinDir(version string) (string, error) {
	bin, err := BinDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(bin, "kubernetes-"+version), nil
}

// EnsureKube builds the Kubernetes commands of version (a release such as
// v1.34.4) with hack/tools.sh, once per process, and returns their
// directory. A version already built costs milliseconds; another one
// takes minutes, once per machine.
func EnsureKube(ctx context.Context, version string) (string, error) {
	dir, err := KubeBinDir(version)
	if err != nil {
		return "", err
	}
	v, _ := kubeOnce.LoadOrStore(version, &toolsResult{})
	r := v.(*toolsResult)
	r.run(ctx, "Kubernetes "+version, []string{"OFFLOAD_KUBE_VERSION=" + version}, kubeCommands)
	return dir, r.err
}

type toolsResult struct {
	once sync.Once
	err  error
}

// run runs hack/tools.sh with tools and env once, keeping its error; what
// names what it builds in that error.
func (r *toolsResult) run(ctx context.Context, what string, env, tools []string) {
	r.once.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			r.err = err
			return
		}
		cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "hack", "tools.sh")}, tools...)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			r.err = fmt.Errorf("building %s with hack/tools.sh: %w\n%s", what, err, out)
		}
	})
}

// EnsureTools builds the named tools (all control-plane tools when none are
// named) with hack/tools.sh, once per process. The script skips tools that
// are already built at the pinned version, so a warm cache costs
// milliseconds.
func EnsureTools(ctx context.Context, tools ...string) error {
	key := strings.Join(tools, ",")
	v, _ := toolsOnce.LoadOrStore(key, &toolsResult{})
	r := v.(*toolsResult)
	r.run(ctx, "tools", nil, tools)
	return r.err
}
