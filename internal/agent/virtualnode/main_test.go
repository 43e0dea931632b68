package virtualnode

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubectl-offload/kubectl-offload/internal/install"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := framework.StopAPIServer(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the test API server:", err)
	}
	os.Exit(code)
}

// apiServer returns the config of a real kube-apiserver (envtest).
func apiServer(t *testing.T) *rest.Config { return framework.APIServer(t) }

// newNamespace creates a namespace with a random name for one test.
func newNamespace(t *testing.T, c client.Client) string { return framework.NewNamespace(t, c, "vn") }

func newClient(t *testing.T, cfg *rest.Config) client.Client { return framework.NewClient(t, cfg) }

var crdsOnce sync.Once

// installCRDs creates the chart's CRDs once per test process and waits
// until they are served.
func installCRDs(t *testing.T, c client.Client) {
	t.Helper()
	crdsOnce.Do(func() {
		crds, err := install.CRDs()
		if err != nil {
			t.Fatal(err)
		}
		for _, crd := range crds {
			if err := c.Create(context.Background(), crd); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
		err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			for _, crd := range crds {
				var got apiextensionsv1.CustomResourceDefinition
				if err := c.Get(ctx, client.ObjectKey{Name: crd.Name}, &got); err != nil {
					return false, nil
				}
				established := false
				for _, cond := range got.Status.Conditions {
					established = established || cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue
				}
				if !established {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("waiting for the CRDs: %v", err)
		}
	})
}
