package app

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
)

func TestHelpListsTheFlagsTheChartPasses(t *testing.T) {
	tests := []struct {
		component string
		wantFlags []string
	}{
		{"controller-manager", []string{"--health-probe-bind-address", "--metrics-bind-address", "--leader-elect", "--namespace", "--cluster-name", "--kubeconfig"}},
		{"auth", []string{"--listen", "--health-probe-bind-address", "--tls-san", "--namespace", "--kubeconfig"}},
		{"controller-manager", []string{"--network", "--pod-cidr", "--service-cidr", "--remap-pool", "--reserved-cidr", "--gateway-service-type", "--gateway-address", "--reserved-namespace", "--credential-grace", "--abandoned-tenant-after", "--tenant-endpoint-cidr", "--virtual-node-taint"}},
		{"gateway", []string{"--tunnel", "--namespace", "--implementation", "--private-key-file", "--config", "--health-probe-bind-address"}},
		{"fabric", []string{"--namespace", "--node-name"}},
	}
	for _, tt := range tests {
		t.Run(tt.component, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := Run(context.Background(), &out, &errOut, []string{tt.component, "--help"}); code != 0 {
				t.Fatalf("exit code %d, stderr %q", code, errOut.String())
			}
			for _, f := range tt.wantFlags {
				if !strings.Contains(out.String(), f) {
					t.Errorf("--help does not mention %s:\n%s", f, out.String())
				}
			}
		})
	}
}

func TestTheNetworkRefusesBadSettingsBeforeStarting(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no pod CIDR", []string{"--network"}, "--network needs --pod-cidr"},
		{"a pod CIDR that is not one", []string{"--network", "--pod-cidr", "10.244.0.0"}, `--pod-cidr "10.244.0.0" is not a CIDR`},
		{"overlapping pools", []string{"--network", "--pod-cidr", "10.244.0.0/16", "--remap-pool", "10.64.0.0/12", "--remap-pool", "10.70.0.0/16"}, "overlap"},
		{"an unknown Service type", []string{"--network", "--pod-cidr", "10.244.0.0/16", "--gateway-service-type", "ClusterIP"}, "NodePort or LoadBalancer"},
		{"a tenant endpoint CIDR that is not one", []string{"--tenant-endpoint-cidr", "10.0.0.1"}, `--tenant-endpoint-cidr "10.0.0.1" is not a CIDR`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Run(context.Background(), &out, &errOut, append([]string{"controller-manager", "--namespace", "offload-system"}, tc.args...))
			if code != 1 || !strings.Contains(errOut.String(), tc.want) || strings.Count(errOut.String(), "Error:") != 1 {
				t.Errorf("exit %d, stderr %q; want 1 and one error saying %q", code, errOut.String(), tc.want)
			}
		})
	}
}

func TestComponentsRefuseToStartWithoutANamespace(t *testing.T) {
	t.Setenv(envNamespace, "")
	for _, component := range []string{"controller-manager", "auth"} {
		t.Run(component, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Run(context.Background(), &out, &errOut, []string{component})
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			if got := errOut.String(); !strings.HasPrefix(got, "Error: ") || strings.Count(got, "Error:") != 1 || !strings.Contains(got, "POD_NAMESPACE") {
				t.Errorf("stderr %q, want one Error line that mentions POD_NAMESPACE", got)
			}
			if out.Len() != 0 {
				t.Errorf("stdout %q, want nothing", out.String())
			}
		})
	}
}

func TestComponentsRunOutOfClusterWithAKubeconfigUntilCancelled(t *testing.T) {
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	// The agent runs where kubectl offload install put its CRDs.
	envtest.InstallCRDs(t, c)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, envtest.APIServerKubeconfig(t), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("controller-manager takes its namespace and cluster name from the environment", func(t *testing.T) {
		ns := envtest.NewNamespace(t, c, "app")
		identity := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.IdentityConfigMap, Namespace: ns},
			Data:       map[string]string{"clusterID": "0b7f2c9e-1a2b-4c3d-8e9f-0123456789ab", "clusterName": "app-test"},
		}
		if err := c.Create(context.Background(), identity); err != nil {
			t.Fatal(err)
		}
		t.Setenv(envNamespace, ns)
		t.Setenv(envClusterName, "app-test")
		health := freeAddr(t)
		runUntilReady(t, health, func(t *testing.T) {
			key := types.NamespacedName{Namespace: ns, Name: offloadv1alpha1.ControllerManager}
			err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				var lease coordinationv1.Lease
				return c.Get(ctx, key, &lease) == nil, nil
			})
			if err != nil {
				t.Errorf("the leader election Lease %s does not appear: %v", key, err)
			}
		}, "controller-manager", "--kubeconfig", kubeconfig, "--health-probe-bind-address", health)
	})

	t.Run("auth creates the CA secret in the namespace of --namespace", func(t *testing.T) {
		ns := envtest.NewNamespace(t, c, "app")
		t.Setenv(envNamespace, "")
		health := freeAddr(t)
		runUntilReady(t, health, nil, "auth", "--kubeconfig", kubeconfig, "--namespace", ns,
			"--listen", freeAddr(t), "--health-probe-bind-address", health, "--tls-san", "192.0.2.10")
		var secret corev1.Secret
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: offloadv1alpha1.AuthCASecret}, &secret); err != nil {
			t.Errorf("the CA secret is not in %s: %v", ns, err)
		}
	})
}

// An auth service that starts before its API server answers waits for it,
// serving its liveness probe, instead of exiting (the lifecycle e2e test
// counts agent restarts during outages).
func TestTheAuthServiceWaitsForAnAPIServerThatDoesNotAnswerYet(t *testing.T) {
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	ns := envtest.NewNamespace(t, c, "app")
	apiServer, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	// The agent is given an address where nothing listens yet.
	kubeconfig, err := clientcmd.Load(envtest.APIServerKubeconfig(t))
	if err != nil {
		t.Fatal(err)
	}
	later := freeAddr(t)
	for _, cluster := range kubeconfig.Clusters {
		cluster.Server = "https://" + later
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfig, path); err != nil {
		t.Fatal(err)
	}
	health := freeAddr(t)
	hc := &http.Client{Timeout: 5 * time.Second}
	status := func(path string) int {
		resp, err := hc.Get("http://" + health + path)
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	runStartingUntilReady(t, health, func(t *testing.T) {
		framework.Eventually(t, 30*time.Second, "the auth service serves its liveness probe while it waits", func(context.Context) bool {
			return status("/healthz") == http.StatusOK
		})
		if got := status("/readyz"); got != http.StatusServiceUnavailable {
			t.Errorf("/readyz while waiting for the API server: %d, want 503", got)
		}
		l, err := net.Listen("tcp", later)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		go netlab.Forward(l, apiServer.Host)
	}, nil, "auth", "--kubeconfig", path, "--namespace", ns, "--listen", freeAddr(t), "--health-probe-bind-address", health)
}

// runUntilReady runs the agent with args until /readyz on health answers
// 200, calls whileRunning when it is not nil, then cancels the agent's
// context and checks that it exits with code 0.
func runUntilReady(t *testing.T, health string, whileRunning func(*testing.T), args ...string) {
	t.Helper()
	runStartingUntilReady(t, health, nil, whileRunning, args...)
}

// runStartingUntilReady is runUntilReady that calls starting, when it is
// not nil, once the agent runs and before it waits for /readyz.
func runStartingUntilReady(t *testing.T, health string, starting, whileRunning func(*testing.T), args ...string) {
	t.Helper()
	var out, errOut syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- Run(ctx, &out, &errOut, args) }()
	defer func() {
		if t.Failed() {
			t.Logf("stderr of offload-agent %s:\n%s", args[0], errOut.String())
		}
	}()
	if starting != nil {
		starting(t)
	}

	hc := &http.Client{Timeout: 5 * time.Second}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		select {
		case code := <-done:
			return false, fmt.Errorf("offload-agent exited early with code %d", code)
		default:
		}
		resp, err := hc.Get("http://" + health + "/readyz")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("waiting for /readyz: %v", err)
	}
	if whileRunning != nil {
		whileRunning(t)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit code %d after cancellation, want 0", code)
		}
	case <-time.After(time.Minute):
		t.Fatal("offload-agent did not exit within a minute of cancellation")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := netlab.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p)
}

// syncBuffer is a bytes.Buffer that the logger may write to from several
// goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
