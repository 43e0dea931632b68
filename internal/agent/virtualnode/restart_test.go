package virtualnode

import (
	"context"
	"errors"
	"testing"
	"time"
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
