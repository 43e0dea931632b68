package manager

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

func TestAnAgentWaitsForItsAPIServerAnsweringTheLivenessProbe(t *testing.T) {
	// An API server that is not ready for its first answers.
	var calls atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 3 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"35","gitVersion":"v1.35.4"}`))
	}))
	t.Cleanup(api.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	health := l.Addr().String()
	l.Close()

	done := make(chan error, 1)
	go func() {
		done <- WaitForAPIServer(t.Context(), &rest.Config{Host: api.URL}, health, ktesting.NewLogger(t, ktesting.NewConfig()))
	}()
	framework.Eventually(t, 10*time.Second, "the liveness probe answered while waiting", func(context.Context) bool {
		resp, err := http.Get("http://" + health + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if resp, err := http.Get("http://" + health + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz while waiting: %v %v; want 503", err, resp)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitForAPIServer: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WaitForAPIServer did not return once the API server answered")
	}
	if _, err := http.Get("http://" + health + "/healthz"); err == nil {
		t.Error("the waiting health server still answers: the manager could not bind its address")
	}
}
