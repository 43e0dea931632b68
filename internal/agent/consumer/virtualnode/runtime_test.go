package virtualnode

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

func TestAFailingRunIsRestartedWithADoublingDelay(t *testing.T) {
	r := &Reconciler{PollInterval: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var delays []time.Duration
	runs := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.restarting(ctx, "stopped", func(ctx context.Context) error {
			runs++
			if runs > 4 {
				<-ctx.Done()
				return nil
			}
			if runs == 3 {
				return nil // a run that returns nil is a failure too
			}
			return errors.New("provider unreachable")
		}, func(err error, delay time.Duration) {
			delays = append(delays, delay)
			if runs == 3 && err.Error() != "stopped" {
				t.Errorf("a run that returned nil was reported as %q, want %q", err, "stopped")
			}
			if runs == 4 {
				cancel()
			}
		})
	}()
	<-done
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond}
	if len(delays) != len(want) {
		t.Fatalf("delays %v, want %v", delays, want)
	}
	for i := range want {
		if delays[i] != want[i] {
			t.Errorf("delays %v, want %v", delays, want)
			break
		}
	}
}

func TestAFailingStepRestartsAloneAndStopWaitsForEveryStep(t *testing.T) {
	r := &Reconciler{PollInterval: time.Millisecond}
	rt := &peerRuntime{key: "k", peer: &peer{fc: &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "provider"}}}}
	var steady, failing atomic.Int32
	var steadyStopped atomic.Bool
	r.start(t.Context(), rt, []step{
		{name: "steady", run: func(ctx context.Context) error {
			steady.Add(1)
			<-ctx.Done()
			steadyStopped.Store(true)
			return nil
		}},
		{name: "failing", run: func(context.Context) error {
			failing.Add(1)
			return errors.New("provider unreachable")
		}},
	})
	framework.Eventually(t, 10*time.Second, "the failing step is restarted", func(context.Context) bool { return failing.Load() >= 3 })
	if got := steady.Load(); got != 1 {
		t.Errorf("the steady step ran %d times while the other failed, want once", got)
	}
	if r.running("provider") != "k" {
		t.Errorf("running(provider) = %q, want the runtime's key", r.running("provider"))
	}
	r.stop("provider")
	if !steadyStopped.Load() {
		t.Error("stop returned before the steady step stopped")
	}
	if r.running("provider") != "" {
		t.Error("the runtime is still recorded after stop")
	}
}
