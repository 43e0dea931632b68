package framework

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Eventually polls cond every 100 ms until it holds, and fails the test
// with what when timeout passes first.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) bool) {
	t.Helper()
	if _, err := Poll(t.Context(), 100*time.Millisecond, timeout, func(ctx context.Context) (bool, string) { return cond(ctx), "" }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Poll calls cond every interval until it holds, and returns how long that
// took. When timeout passes first, the error carries what cond said last,
// such as the state it was still waiting on.
func Poll(ctx context.Context, interval, timeout time.Duration, cond func(ctx context.Context) (bool, string)) (time.Duration, error) {
	start := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why := cond(ctx)
		last = why
		return ok, nil
	})
	if err != nil && last != "" {
		return time.Since(start), fmt.Errorf("%w (%s)", err, last)
	}
	return time.Since(start), err
}
