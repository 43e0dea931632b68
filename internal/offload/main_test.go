package offload

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// installNS is the install namespace the test factory reports.
const installNS = "offload-system"

// The tests run against a real kube-apiserver, started on first use. Waits
// poll fast when the client cannot watch.
func TestMain(m *testing.M) {
	pollInterval = 10 * time.Millisecond
	os.Exit(envtest.RunWithAPIServer(m))
}

// testFactory is a Factory with only what the commands use.
type testFactory struct {
	factory.Factory
	c client.Client
}

func (f testFactory) Namespace() string              { return installNS }
func (f testFactory) Client() (client.Client, error) { return f.c, nil }

// apiServer returns a watching client of the test API server, with the CRDs installed.
func apiServer(t *testing.T) client.WithWatch {
	t.Helper()
	c, err := client.NewWithWatch(envtest.APIServer(t), client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	envtest.InstallCRDs(t, c)
	return c
}

// run runs the command newCmd returns with args against c, as the user
// would, and returns what it printed.
func run(t *testing.T, c client.Client, newCmd func(factory.Factory, genericiooptions.IOStreams) *cobra.Command, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	cmd := newCmd(testFactory{c: c}, streams)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	for _, sub := range cmd.Commands() {
		sub.SilenceUsage, sub.SilenceErrors = true, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = cmd.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// offload runs kubectl offload namespace args.
func offload(t *testing.T, c client.Client, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return run(t, c, NewCmdNamespace, args...)
}

// unoffload runs kubectl offload unoffload namespace args.
func unoffload(t *testing.T, c client.Client, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return run(t, c, NewCmdUnoffload, append([]string{"namespace"}, args...)...)
}

// newVirtualNode creates a virtual node for peer name with extra labels,
// deleted when the test ends.
func newVirtualNode(t *testing.T, c client.Client, name string, extra map[string]string) {
	t.Helper()
	ls := map[string]string{
		offloadv1alpha1.LabelType:            offloadv1alpha1.TypeVirtualNode,
		offloadv1alpha1.LabelRemoteClusterID: "id-" + name,
		"kubernetes.io/role":                 "agent",
	}
	for k, v := range extra {
		ls[k] = v
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.VirtualNodeName(name), Labels: ls}}
	if err := c.Create(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), node) })
}

// getOffloading returns the NamespaceOffloading of ns, or nil.
func getOffloading(t *testing.T, c client.Client, ns string) *offloadv1alpha1.NamespaceOffloading {
	t.Helper()
	no, err := getNamespaceOffloading(context.Background(), c, ns)
	if err != nil {
		t.Fatal(err)
	}
	return no
}

// assertNotOffloaded fails t when ns has a NamespaceOffloading.
func assertNotOffloaded(t *testing.T, c client.Client, ns string) {
	t.Helper()
	var list offloadv1alpha1.NamespaceOffloadingList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("namespace %s has %d NamespaceOffloadings, want none", ns, len(list.Items))
	}
}

// actAsAgent sets the status of ns's NamespaceOffloading with set, as the
// agent would, as soon as it exists and accept says it is the one to act
// on. The returned channel gets the outcome.
func actAsAgent(c client.Client, ns string, accept func(*offloadv1alpha1.NamespaceOffloading) bool, set func(*offloadv1alpha1.NamespaceOffloading)) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var no offloadv1alpha1.NamespaceOffloading
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: offloadv1alpha1.NamespaceOffloadingName}, &no); err != nil {
				return false, nil
			}
			if !accept(&no) {
				return false, nil
			}
			set(&no)
			if err := c.Status().Update(ctx, &no); err != nil {
				return false, nil // a conflict: read again
			}
			return true, nil
		})
	}()
	return done
}

// anyOffloading accepts any NamespaceOffloading.
func anyOffloading(*offloadv1alpha1.NamespaceOffloading) bool { return true }

// setReady sets the Ready condition as the agent does.
func setReady(no *offloadv1alpha1.NamespaceOffloading, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&no.Status.Conditions, metav1.Condition{
		Type: offloadv1alpha1.ConditionReady, Status: status, Reason: reason, Message: message, ObservedGeneration: no.Generation,
	})
}
