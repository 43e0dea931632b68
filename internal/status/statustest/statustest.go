// Package statustest holds what the tests of `kubectl offload status` and
// `kubectl offload doctor` share: a real API server with the chart's CRDs,
// the peers the agent would have recorded on it, a Factory with its
// clients, and Helm's in-memory release storage. It imports neither
// command, so each package's own tests can use it.
package statustest

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/exit"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// The install namespace (the CLI's default) and the plugin's version in
// the tests.
const (
	Namespace = factory.DefaultNamespace
	Version   = "v1.2.3"
)

// MemoryHelm returns a Helm configuration whose releases are kept in
// memory, without any.
func MemoryHelm() *action.Configuration {
	mem := driver.NewMemory()
	mem.SetNamespace(Namespace)
	return &action.Configuration{
		Releases:     storage.Init(mem),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: chartutil.DefaultCapabilities,
		Log:          func(string, ...any) {},
	}
}

// Factory gives commands the clients it holds. Methods it does not
// override panic through the nil embedded Factory, which neither status
// nor doctor calls.
type Factory struct {
	factory.Factory
	Kube kubernetes.Interface
	// Ctrl is the controller-runtime client.
	Ctrl client.Client
	Helm *action.Configuration
}

func (f Factory) Namespace() string                                { return Namespace }
func (f Factory) KubeClient() (kubernetes.Interface, error)        { return f.Kube, nil }
func (f Factory) Client() (client.Client, error)                   { return f.Ctrl, nil }
func (f Factory) HelmConfig(string) (*action.Configuration, error) { return f.Helm, nil }

// Execute runs cmd like the root command does, with injected streams.
func Execute(cmd *cobra.Command, out, errOut *bytes.Buffer, args ...string) error {
	// A nil slice would make cobra read os.Args, which holds the test flags.
	cmd.SetArgs(append([]string{}, args...))
	cmd.SetIn(strings.NewReader(""))
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	return cmd.ExecuteContext(context.Background())
}

// AssertResult checks the exit code and the one-line error a command
// returned: exit code 1 and wantErr, or success when wantErr is empty.
func AssertResult(t *testing.T, err error, wantErr string) {
	t.Helper()
	wantCode := 0
	if wantErr != "" {
		wantCode = 1
	}
	if code := exit.Code(err); code != wantCode {
		t.Errorf("exit code = %d (%v), want %d", code, err, wantCode)
	}
	if err != nil && err.Error() != wantErr {
		t.Errorf("error = %q, want %q", err, wantErr)
	}
}

// APIServer holds clients for a real kube-apiserver that serves the
// chart's CRDs. ForeignClusters, Tenants and Nodes are cluster-scoped, so
// every test removes the ones it creates before it ends.
type APIServer struct {
	Kube   kubernetes.Interface
	Client client.Client
}

// NewAPIServer returns clients for the test binary's API server, with the
// chart's CRDs installed.
func NewAPIServer(t *testing.T) APIServer {
	t.Helper()
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, c)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return APIServer{Kube: kube, Client: c}
}

// Factory returns a Factory with the API server's clients and no release.
func (a APIServer) Factory() factory.Factory {
	return Factory{Kube: a.Kube, Ctrl: a.Client, Helm: MemoryHelm()}
}

// Peer is a peer as the agent would have recorded it.
type Peer struct {
	FC *offloadv1alpha1.ForeignCluster
	// Node is the virtual node, with its status; nil when there is none.
	Node *corev1.Node
	// Tenant is the provider's record of the peer as a consumer, with its status.
	Tenant *offloadv1alpha1.Tenant
	// Unpeering deletes the ForeignCluster, which a finalizer keeps.
	Unpeering bool
}

// Create stores p with its status, and removes it when the test ends.
func (a APIServer) Create(t *testing.T, p Peer) {
	t.Helper()
	ctx := context.Background()
	fc := p.FC.DeepCopy()
	if p.Unpeering {
		fc.Finalizers = []string{offloadv1alpha1.FinalizerUnpeer}
	}
	if err := a.Client.Create(ctx, fc); err != nil {
		t.Fatalf("creating ForeignCluster %s: %v", fc.Name, err)
	}
	t.Cleanup(func() { a.DeleteForeignCluster(t, fc.Name) })
	fc.Status = p.FC.Status
	if err := a.Client.Status().Update(ctx, fc); err != nil {
		t.Fatalf("setting the status of ForeignCluster %s: %v", fc.Name, err)
	}
	if p.Unpeering {
		if err := a.Client.Delete(ctx, fc); err != nil {
			t.Fatal(err)
		}
	}
	if p.Node != nil {
		node, err := a.Kube.CoreV1().Nodes().Create(ctx, p.Node, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating node %s: %v", p.Node.Name, err)
		}
		t.Cleanup(func() {
			if err := a.Kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}); err != nil {
				t.Error(err)
			}
		})
		node.Status = p.Node.Status
		if _, err := a.Kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("setting the status of node %s: %v", node.Name, err)
		}
	}
	if p.Tenant != nil {
		tenant := p.Tenant.DeepCopy()
		if err := a.Client.Create(ctx, tenant); err != nil {
			t.Fatalf("creating Tenant %s: %v", tenant.Name, err)
		}
		t.Cleanup(func() {
			if err := a.Client.Delete(context.Background(), tenant); err != nil {
				t.Error(err)
			}
		})
		tenant.Status = p.Tenant.Status
		if err := a.Client.Status().Update(ctx, tenant); err != nil {
			t.Fatalf("setting the status of Tenant %s: %v", tenant.Name, err)
		}
	}
}

// DeleteForeignCluster removes ForeignCluster name, finalizers and all. A
// custom resource without finalizers is gone once Delete returns.
func (a APIServer) DeleteForeignCluster(t *testing.T, name string) {
	ctx := context.Background()
	fc := &offloadv1alpha1.ForeignCluster{}
	if err := a.Client.Get(ctx, client.ObjectKey{Name: name}, fc); err != nil {
		if !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		return
	}
	if len(fc.Finalizers) > 0 {
		fc.Finalizers = nil
		if err := a.Client.Update(ctx, fc); err != nil {
			t.Error(err)
			return
		}
	}
	if err := a.Client.Delete(ctx, fc); client.IgnoreNotFound(err) != nil {
		t.Error(err)
	}
}

// Create stores obj, creating its namespace when it is missing; the test
// removes it when it ends. Namespaces are left, since an API server without
// controllers never finishes deleting them.
func Create(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	ctx := context.Background()
	if ns := obj.GetNamespace(); ns != "" {
		err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if err := c.Create(ctx, obj); err != nil {
		if _, isNS := obj.(*corev1.Namespace); isNS && apierrors.IsAlreadyExists(err) {
			return
		}
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
	if _, isNS := obj.(*corev1.Namespace); isNS {
		return
	}
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), obj); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
	})
}

// ForeignCluster returns the ForeignCluster of peer name with cluster ID
// id and status st; an outgoing one has the provider's endpoints.
func ForeignCluster(name, id string, outgoing bool, st offloadv1alpha1.ForeignClusterStatus) *offloadv1alpha1.ForeignCluster {
	fc := &offloadv1alpha1.ForeignCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: offloadv1alpha1.ForeignClusterSpec{
			ClusterID: id, ClusterName: name,
			OutgoingPeering: offloadv1alpha1.OutgoingPeering{Enabled: outgoing},
		},
		Status: st,
	}
	if outgoing {
		fc.Spec.AuthURL = "https://172.18.0.3:31443"
		fc.Spec.CACertHash = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		fc.Status.APIServerURL = "https://172.18.0.3:6443"
	}
	return fc
}

// VirtualNode returns the virtual node of peer with its Ready condition.
func VirtualNode(peer string, ready corev1.ConditionStatus) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.VirtualNodeName(peer), Labels: map[string]string{"offload.io/type": "virtual-node"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{offloadv1alpha1.VirtualNodeTaint()}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "ProviderReachable"}},
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"),
				corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"),
				corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
		},
	}
}
