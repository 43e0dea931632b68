package waitfor_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubectl-offload/kubectl-offload/internal/cli/waitfor"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestMain(m *testing.M) { os.Exit(envtest.RunWithAPIServer(m)) }

// listOnly hides the Watch of a client, as a client that cannot watch.
type listOnly struct{ client.Client }

// clients are the two paths of Object: watching, and listing every interval.
// The watching client lists again only after an hour, so its tests pass only
// if the watch delivers the changes.
func clients(t *testing.T) map[string]client.Client {
	// As the CLI's factory makes it.
	c, err := client.NewWithWatch(envtest.APIServer(t), client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]client.Client{"watch": c, "list": listOnly{c}}
}

func waitConfigMap(ctx context.Context, c client.Client, key types.NamespacedName, cond func(*corev1.ConfigMap) (bool, error)) error {
	interval := time.Hour
	if _, ok := c.(listOnly); ok {
		interval = 50 * time.Millisecond
	}
	return waitfor.Object(ctx, c, &corev1.ConfigMapList{}, key, interval, cond)
}

func TestObjectFollowsTheObjectUntilTheConditionHolds(t *testing.T) {
	for name, c := range clients(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			ns := envtest.NewNamespace(t, c, "waitfor")
			key := types.NamespacedName{Namespace: ns, Name: "target"}
			// Another object of the kind in the namespace, changing too.
			other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns}, Data: map[string]string{"step": "done"}}
			if err := c.Create(ctx, other); err != nil {
				t.Fatal(err)
			}

			seen := make(chan string, 100)
			done := make(chan error, 1)
			go func() {
				done <- waitConfigMap(ctx, c, key, func(cm *corev1.ConfigMap) (bool, error) {
					if cm == nil {
						seen <- "absent"
						return false, nil
					}
					seen <- cm.Data["step"]
					return cm.Data["step"] == "done", nil
				})
			}()
			waitSeen(t, seen, "absent")
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns}, Data: map[string]string{"step": "created"}}
			if err := c.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
			waitSeen(t, seen, "created")
			select {
			case err := <-done:
				t.Fatalf("the wait ended before the condition held: %v", err)
			default:
			}
			cm.Data["step"] = "done"
			if err := c.Update(ctx, cm); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("Object = %v, want nil once the condition holds", err)
			}
		})
	}
}

// waitSeen waits until the condition saw want.
func waitSeen(t *testing.T, seen <-chan string, want string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case got := <-seen:
			if got == want {
				return
			}
		case <-deadline:
			t.Fatalf("the condition never saw %q", want)
		}
	}
}

func TestObjectReportsADeletionAsNil(t *testing.T) {
	for name, c := range clients(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			ns := envtest.NewNamespace(t, c, "waitfor")
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "target", Namespace: ns}}
			if err := c.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
			present := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				once := false
				done <- waitConfigMap(ctx, c, client.ObjectKeyFromObject(cm), func(got *corev1.ConfigMap) (bool, error) {
					if got != nil && !once {
						once = true
						close(present)
					}
					return got == nil, nil
				})
			}()
			<-present
			if err := c.Delete(ctx, cm); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("Object = %v, want nil once the object is gone", err)
			}
		})
	}
}

func TestObjectEndsOnTheConditionsErrorAndOnTheDeadline(t *testing.T) {
	for name, c := range clients(t) {
		t.Run(name, func(t *testing.T) {
			ns := envtest.NewNamespace(t, c, "waitfor")
			key := types.NamespacedName{Namespace: ns, Name: "target"}
			failed := errors.New("the twin namespace failed")
			err := waitConfigMap(t.Context(), c, key, func(*corev1.ConfigMap) (bool, error) { return false, failed })
			if !errors.Is(err, failed) {
				t.Errorf("Object = %v, want the condition's error", err)
			}

			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			err = waitConfigMap(ctx, c, key, func(*corev1.ConfigMap) (bool, error) { return false, nil })
			if err == nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Errorf("Object = %v with ctx %v, want an error at the deadline", err, ctx.Err())
			}
			if waited := time.Since(start); waited > 5*time.Second {
				t.Errorf("Object returned %s after its deadline", waited)
			}
		})
	}
}
