package app

import (
	"os"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

func TestMain(m *testing.M) { os.Exit(framework.RunWithAPIServer(m)) }

// apiServer returns the config of a real kube-apiserver (envtest).
func apiServer(t *testing.T) *rest.Config { return framework.APIServer(t) }

// newNamespace creates a namespace with a random name for one test.
func newNamespace(t *testing.T, c client.Client) string { return framework.NewNamespace(t, c, "app") }

func newClient(t *testing.T, cfg *rest.Config) client.Client { return framework.NewClient(t, cfg) }
