package install_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/install"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestMain(m *testing.M) { os.Exit(envtest.RunWithAPIServer(m)) }

// uninstall runs kubectl offload uninstall with args against the test API
// server, with the install namespace ns.
func uninstall(t *testing.T, ns string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, envtest.APIServerKubeconfig(t), 0o600); err != nil {
		t.Fatal(err)
	}
	f := factory.New()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.AddFlags(fs)
	if err := fs.Parse([]string{"--kubeconfig", kubeconfig, "--namespace", ns}); err != nil {
		t.Fatal(err)
	}
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	cmd := install.NewCmdUninstall(f, streams)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func mustCreate(t *testing.T, c client.Client, o client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Get(context.Background(), client.ObjectKeyFromObject(o), o)
		o.SetFinalizers(nil)
		_ = c.Update(context.Background(), o)
		_ = c.Delete(context.Background(), o)
	})
}

func exists(t *testing.T, c client.Client, o client.Object) bool {
	t.Helper()
	return c.Get(context.Background(), client.ObjectKeyFromObject(o), o) == nil
}

func TestUninstallRefusesWhileEitherDirectionOfAPeeringIsInUseAndChangesNothing(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	ns := envtest.NewNamespace(t, c, "install")
	suffix := rand.String(5)
	outgoing := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "provider-" + suffix},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: "11111111-2222-4333-8444-555555555555", ClusterName: "provider-" + suffix}}
	tenant := &offloadv1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "consumer-" + suffix},
		Spec: offloadv1alpha1.TenantSpec{ClusterID: "11111111-2222-4333-8444-666666666666", ClusterName: "consumer-" + suffix, TenantNamespace: "offload-tenant-consumer-" + suffix}}
	mustCreate(t, c, outgoing)
	mustCreate(t, c, tenant)

	_, _, err := uninstall(t, ns)
	if err == nil {
		t.Fatal("uninstall succeeded while peerings exist")
	}
	for _, want := range []string{outgoing.Name, "kubectl offload unpeer NAME", tenant.Name, "kubectl offload unpeer NAME --incoming", "--force"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %q", err, want)
		}
	}
	for _, o := range []client.Object{outgoing, tenant} {
		if !exists(t, c, o) || o.GetDeletionTimestamp() != nil {
			t.Errorf("a refused uninstall touched %s", o.GetName())
		}
	}
}

func TestUninstallWaitsForTheAgentsCleanupAndRemovesNothingWhileItIsPending(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	ns := envtest.NewNamespace(t, c, "install")
	tenantNS := envtest.NewNamespace(t, c, "tenant")
	// What the agent is still deleting: a RemoteNamespace whose twin
	// namespace the provider's controller has not removed yet.
	rn := &offloadv1alpha1.RemoteNamespace{
		ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: tenantNS, Finalizers: []string{offloadv1alpha1.FinalizerRemoteNamespace}},
		Spec:       offloadv1alpha1.RemoteNamespaceSpec{ConsumerClusterID: "11111111-2222-4333-8444-777777777777", SourceNamespace: "work", TargetNamespace: "work-consumer-abcdef"},
	}
	mustCreate(t, c, rn)
	if err := c.Delete(context.Background(), rn); err != nil {
		t.Fatal(err)
	}

	_, stderr, err := uninstall(t, ns, "--timeout", "2s")
	if err == nil || !strings.Contains(err.Error(), "RemoteNamespace "+tenantNS+"/work ("+offloadv1alpha1.FinalizerRemoteNamespace+")") || !strings.Contains(err.Error(), "nothing was uninstalled") {
		t.Fatalf("uninstall while the agent cleans up = %v, want a refusal naming the RemoteNamespace and its finalizer", err)
	}
	if strings.Contains(stderr, "Release offload") {
		t.Errorf("uninstall went on to the release while the agent was still cleaning up:\n%s", stderr)
	}

	// The agent finishes: uninstall goes on.
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(rn), rn); err != nil {
		t.Fatal(err)
	}
	rn.Finalizers = nil
	if err := c.Update(context.Background(), rn); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := uninstall(t, ns, "--timeout", "30s"); err != nil {
		t.Fatalf("uninstall once the agent finished: %v\n%s", err, stderr)
	}
}

func TestUninstallForceEndsEveryPeeringAndWaitsForTheAgent(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	ns := envtest.NewNamespace(t, c, "install")
	fc := &offloadv1alpha1.ForeignCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "gone-" + rand.String(5), Finalizers: []string{offloadv1alpha1.FinalizerUnpeer}},
		Spec:       offloadv1alpha1.ForeignClusterSpec{ClusterID: "11111111-2222-4333-8444-999999999999", ClusterName: "gone"},
	}
	mustCreate(t, c, fc)

	// No agent runs here: the peering is ended, told to skip the provider,
	// and uninstall stops while the agent's finalizer holds it.
	_, _, err := uninstall(t, ns, "--force", "--timeout", "2s")
	if err == nil || !strings.Contains(err.Error(), "ForeignCluster "+fc.Name+" ("+offloadv1alpha1.FinalizerUnpeer+")") {
		t.Fatalf("uninstall --force without the agent = %v, want it to wait for the ForeignCluster's finalizer and name it", err)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(fc), fc); err != nil {
		t.Fatal(err)
	}
	if fc.DeletionTimestamp == nil || fc.Annotations[offloadv1alpha1.AnnotationForceUnpeer] != "true" {
		t.Errorf("ForeignCluster %s: deleting=%v, annotations %v; want it deleted and marked for a forced unpeering", fc.Name, fc.DeletionTimestamp != nil, fc.Annotations)
	}

	// The agent lets it go: uninstall --force goes on.
	fc.Finalizers = nil
	if err := c.Update(context.Background(), fc); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := uninstall(t, ns, "--force", "--timeout", "30s"); err != nil {
		t.Fatalf("uninstall --force once the agent finished: %v\n%s", err, stderr)
	}
}
