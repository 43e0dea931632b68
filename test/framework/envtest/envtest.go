// Package envtest starts one real kube-apiserver (with etcd, from the
// pinned binaries) per test binary, on first use, for the tests of
// controllers and commands: APIServer, RunWithAPIServer in TestMain,
// clients, the chart's CRDs and a controller-runtime manager.
package envtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubectl-offload/kubectl-offload/internal/install"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

// The envtest API server of a test process, started on first use, so that
// packages whose tests do not need it run without it.
var apiServer struct {
	once   sync.Once
	env    *envtest.Environment
	config *rest.Config
	err    error
}

// APIServer returns an admin config for a real kube-apiserver and etcd
// (controller-runtime envtest, from the binaries hack/tools.sh builds),
// shared by the tests of a package. Call StopAPIServer from TestMain.
// With -short the test is skipped.
func APIServer(t testing.TB) *rest.Config {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real API server; skipped with -short")
	}
	apiServer.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		if apiServer.err = tools.EnsureTools(ctx, "kube-apiserver", "etcd"); apiServer.err != nil {
			return
		}
		dir, err := tools.BinDir()
		if err != nil {
			apiServer.err = err
			return
		}
		if apiServer.err = os.Setenv("KUBEBUILDER_ASSETS", dir); apiServer.err != nil {
			return
		}
		apiServer.env = &envtest.Environment{ControlPlaneStartTimeout: 2 * time.Minute, ControlPlaneStopTimeout: time.Minute}
		apiServer.config, apiServer.err = apiServer.env.Start()
	})
	if apiServer.err != nil {
		t.Fatalf("starting the test API server: %v", apiServer.err)
	}
	return apiServer.config
}

// RunWithAPIServer runs a package's tests, then stops the API server that
// APIServer started for them, if any, and returns the exit code for
// TestMain: os.Exit(envtest.RunWithAPIServer(m)).
func RunWithAPIServer(m *testing.M) int {
	code := m.Run()
	if err := StopAPIServer(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the test API server:", err)
	}
	return code
}

// StopAPIServer stops the API server APIServer started, if any.
func StopAPIServer() error {
	if apiServer.env == nil {
		return nil
	}
	return apiServer.env.Stop()
}

// NewClient returns a controller-runtime client that knows the offload.io types.
func NewClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// NewNamespace creates a namespace named prefix-<random> for one test.
func NewNamespace(t *testing.T, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + rand.String(6)}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// APIServerKubeconfig returns an admin kubeconfig for the API server that
// APIServer started.
func APIServerKubeconfig(t *testing.T) []byte {
	t.Helper()
	APIServer(t)
	return apiServer.env.KubeConfig
}

var crds struct {
	once sync.Once
	err  error
}

// InstallCRDs applies the chart's CRDs to the API server c talks to, once
// per test process, and waits until they are served.
func InstallCRDs(t testing.TB, c client.Client) {
	t.Helper()
	crds.once.Do(func() {
		crds.err = install.ApplyCRDs(context.Background(), c, time.Minute)
	})
	if crds.err != nil {
		t.Fatalf("installing the CRDs: %v", crds.err)
	}
}
