package auth

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

	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// The API server is started on first use, so the unit tests run without it.
var (
	envOnce   sync.Once
	env       *envtest.Environment
	envConfig *rest.Config
	envErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the test API server:", err)
		}
	}
	os.Exit(code)
}

// apiServer returns the config of a real kube-apiserver and etcd started
// with envtest from the binaries hack/tools.sh builds.
func apiServer(t *testing.T) *rest.Config {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real API server; skipped with -short")
	}
	envOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		if envErr = framework.EnsureTools(ctx, "kube-apiserver", "etcd"); envErr != nil {
			return
		}
		dir, err := framework.BinDir()
		if err != nil {
			envErr = err
			return
		}
		if envErr = os.Setenv("KUBEBUILDER_ASSETS", dir); envErr != nil {
			return
		}
		env = &envtest.Environment{ControlPlaneStartTimeout: 2 * time.Minute, ControlPlaneStopTimeout: time.Minute}
		envConfig, envErr = env.Start()
	})
	if envErr != nil {
		t.Fatalf("starting the test API server: %v", envErr)
	}
	return envConfig
}

// newNamespace creates a namespace with a random name for one test.
func newNamespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "auth-" + rand.String(6)}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
