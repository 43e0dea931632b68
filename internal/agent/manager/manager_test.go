package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
)

func TestControllerManagerServesProbesLeadsAndStopsCleanly(t *testing.T) {
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	ns := envtest.NewNamespace(t, c, "cm")
	createIdentity(t, c, ns)

	o := testOptions(t, ns)
	o.LeaderElection = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, o) }()

	for _, path := range []string{"/healthz", "/readyz"} {
		waitForStatus(t, done, "http://"+o.HealthProbeBindAddress+path, http.StatusOK)
	}
	lease := waitForLease(t, c, ns, func(l *coordinationv1.Lease) bool {
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
	})
	t.Logf("leader: %s", *lease.Spec.HolderIdentity)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v after cancellation, want nil", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of cancellation")
	}
	// A stopped leader hands the Lease over at once.
	waitForLease(t, c, ns, func(l *coordinationv1.Lease) bool {
		return l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == ""
	})
	if _, err := http.Get("http://" + o.HealthProbeBindAddress + "/healthz"); err == nil {
		t.Error("the health server still answers after Run returned")
	}
}

func TestControllerManagerFailsWithoutTheClusterIdentity(t *testing.T) {
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	ns := envtest.NewNamespace(t, c, "cm")

	o := testOptions(t, ns)
	o.LeaderElection = false
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := Run(ctx, cfg, o)
	if err == nil || !strings.Contains(err.Error(), offloadv1alpha1.IdentityConfigMap) {
		t.Fatalf("Run returned %v, want an error naming the identity ConfigMap", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run only returned when the test's deadline passed")
	}
}

func TestOptionsValidate(t *testing.T) {
	valid := func(mut func(*Options)) Options {
		o := NewOptions()
		o.Namespace = "offload-system"
		mut(&o)
		return o
	}
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"defaults with a namespace are valid", valid(func(*Options) {}), ""},
		{"a namespace is required", valid(func(o *Options) { o.Namespace = "" }), "POD_NAMESPACE"},
		{"the health probes cannot be turned off", valid(func(o *Options) { o.HealthProbeBindAddress = "0" }), "--health-probe-bind-address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want one mentioning %s", err, tt.wantErr)
			}
		})
	}
}

func TestDefaultsMatchTheChart(t *testing.T) {
	o := NewOptions()
	if o.HealthProbeBindAddress != ":8081" || o.MetricsBindAddress != "0" || !o.LeaderElection {
		t.Errorf("defaults %+v, want health on :8081, metrics off and leader election on", o)
	}
	if offloadv1alpha1.ControllerManager != "offload-controller-manager" {
		t.Errorf("offloadv1alpha1.ControllerManager = %s, want offload-controller-manager", offloadv1alpha1.ControllerManager)
	}
}

// testOptions returns Options for namespace with the health probes on a free
// loopback port and short shutdown.
func testOptions(t *testing.T, namespace string) Options {
	t.Helper()
	port, err := netlab.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.Namespace = namespace
	o.ClusterName = "test"
	o.HealthProbeBindAddress = fmt.Sprintf("127.0.0.1:%d", port)
	o.GracefulShutdownTimeout = 10 * time.Second
	o.Logger = ktesting.NewLogger(t, ktesting.NewConfig())
	return o
}

func createIdentity(t *testing.T, c client.Client, namespace string) {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.IdentityConfigMap, Namespace: namespace},
		Data:       map[string]string{"clusterID": "0b7f2c9e-1a2b-4c3d-8e9f-0123456789ab", "clusterName": "test"},
	}
	if err := c.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}

// waitForStatus polls url until it answers want, failing early when the
// manager's Run returns.
func waitForStatus(t *testing.T, done <-chan error, url string, want int) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	last := "no answer"
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("run returned early: %v", err)
		default:
		}
		resp, err := hc.Get(url)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		_ = resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == want, nil
	})
	if err != nil {
		t.Fatalf("GET %s: want %d, last %s: %v", url, want, last, err)
	}
}

// waitForLease polls the leader election Lease until cond holds.
func waitForLease(t *testing.T, c client.Client, namespace string, cond func(*coordinationv1.Lease) bool) *coordinationv1.Lease {
	t.Helper()
	var lease coordinationv1.Lease
	key := types.NamespacedName{Namespace: namespace, Name: offloadv1alpha1.ControllerManager}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, &lease); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return cond(&lease), nil
	})
	if err != nil {
		t.Fatalf("waiting for Lease %s: %v", key, err)
	}
	return &lease
}

func TestALeaderThatLosesItsLeaseReturnsErrLeaderElectionLost(t *testing.T) {
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	ns := envtest.NewNamespace(t, c, "cm")
	createIdentity(t, c, ns)

	o := testOptions(t, ns)
	o.LeaderElection = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, o) }()
	lease := waitForLease(t, c, ns, func(l *coordinationv1.Lease) bool {
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
	})
	// Another holder takes the Lease, as when this replica could not renew
	// it in time: the renewals fail until the renew deadline.
	lease.Spec.HolderIdentity = new("someone-else")
	lease.Spec.LeaseDurationSeconds = new(int32(300))
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if err := c.Update(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrLeaderElectionLost) {
			t.Fatalf("Run returned %v, want ErrLeaderElectionLost", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of losing its Lease")
	}
}

func TestOnlyAnAPIServerThatDoesNotAnswerIsWaitedFor(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a refused connection", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"a connection cut mid-answer", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), true},
		{"a server timeout", apierrors.NewServerTimeout(gr, "get", 1), true},
		{"an API server not ready", apierrors.NewServiceUnavailable("starting"), true},
		{"a missing identity", fmt.Errorf("reading the cluster identity: %w", apierrors.NewNotFound(gr, "offload-cluster-identity")), false},
		{"a refusal", apierrors.NewForbidden(gr, "offload-cluster-identity", errors.New("no")), false},
		{"an identity without a cluster ID", errors.New("the cluster identity ConfigMap has no clusterID"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unavailable(tt.err); got != tt.want {
				t.Errorf("unavailable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
