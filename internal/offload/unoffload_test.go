package offload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestUnoffloadDeletesTheNamespaceOffloadingAndWaitsForTheAgentsCleanup(t *testing.T) {
	c := apiServer(t)
	ns := envtest.NewNamespace(t, c, "unoffload")
	twin := ns + "-consumer-1a2b3c"
	no := &offloadv1alpha1.NamespaceOffloading{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.NamespaceOffloadingName, Namespace: ns, Finalizers: []string{testFinalizer}}}
	if err := c.Create(context.Background(), no); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeFinalizer(t, c, ns) })
	if err := <-actAsAgent(c, ns, anyOffloading, func(no *offloadv1alpha1.NamespaceOffloading) {
		no.Status.RemoteNamespaces = []offloadv1alpha1.RemoteNamespaceStatus{
			{ClusterID: "id-provider", ClusterName: "provider", RemoteNamespace: twin, Phase: offloadv1alpha1.RemoteNamespaceReady},
		}
		setReady(no, metav1.ConditionTrue, "Ready", "")
	}); err != nil {
		t.Fatal(err)
	}

	// The agent: once the NamespaceOffloading is being deleted, it removes
	// the twin namespace from the status, then its finalizer.
	agent := actAsAgent(c, ns, func(no *offloadv1alpha1.NamespaceOffloading) bool { return no.DeletionTimestamp != nil },
		func(no *offloadv1alpha1.NamespaceOffloading) { no.Status.RemoteNamespaces = nil })
	done := make(chan error, 1)
	go func() {
		if err := <-agent; err != nil {
			done <- err
			return
		}
		no, err := getNamespaceOffloading(context.Background(), c, ns)
		if err != nil || no == nil {
			done <- fmt.Errorf("reading the NamespaceOffloading being deleted: %v", err)
			return
		}
		no.Finalizers = nil
		done <- c.Update(context.Background(), no)
	}()

	stdout, stderr, err := unoffload(t, c, ns, "--timeout", "30s")
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if stdout != "namespaceoffloading.offload.io/offloading deleted\n" {
		t.Errorf("stdout %q, want the deletion", stdout)
	}
	for _, want := range []string{"✓ provider: twin namespace " + twin + " removed", "✓ Namespace " + ns + " is no longer offloaded"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q, want %q", stderr, want)
		}
	}
	assertNotOffloaded(t, c, ns)
}

func TestUnoffloadGivesUpAfterTheTimeoutWhileTheAgentCleansUp(t *testing.T) {
	c := apiServer(t)
	ns := envtest.NewNamespace(t, c, "stuck")
	no := &offloadv1alpha1.NamespaceOffloading{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.NamespaceOffloadingName, Namespace: ns, Finalizers: []string{testFinalizer}}}
	if err := c.Create(context.Background(), no); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeFinalizer(t, c, ns) })
	_, _, err := unoffload(t, c, ns, "--timeout", "300ms")
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), testFinalizer) {
		t.Fatalf("error %v, want ErrTimeout naming the finalizer left", err)
	}
	// Running it again keeps waiting on the same deletion.
	if _, _, err := unoffload(t, c, ns, "--wait=false"); err != nil {
		t.Errorf("a second unoffload of a namespace being unoffloaded failed: %v", err)
	}
}

func TestUnoffloadingANamespaceThatIsNotOffloaded(t *testing.T) {
	c := apiServer(t)
	ns := envtest.NewNamespace(t, c, "plain")
	missing := "missing-" + rand.String(6)
	tests := []struct {
		name    string
		args    []string
		wantErr error
	}{
		{name: "a namespace without a NamespaceOffloading is an error", args: []string{ns}, wantErr: ErrNotOffloaded},
		{name: "a namespace that does not exist is an error", args: []string{missing}, wantErr: ErrNamespaceNotFound},
		{name: "--ignore-not-found accepts a namespace without a NamespaceOffloading", args: []string{ns, "--ignore-not-found"}},
		{name: "--ignore-not-found accepts a namespace that does not exist", args: []string{missing, "--ignore-not-found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, _, err := unoffload(t, c, tt.args...)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
		})
	}
}
