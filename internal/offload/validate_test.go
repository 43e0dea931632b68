package offload

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
)

// errContacted is what offlineClient returns for every call.
var errContacted = errors.New("the cluster was contacted")

// offlineClient fails every call, to show that a check needs no cluster.
func offlineClient() client.Client {
	fail := func() error { return errContacted }
	return fake.NewClientBuilder().WithScheme(scheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return fail()
		},
		List:   func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error { return fail() },
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error { return fail() },
		Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error { return fail() },
		Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error { return fail() },
	}).Build()
}

func TestBadArgumentsAreRefusedWithoutContactingTheCluster(t *testing.T) {
	tests := []struct {
		name      string
		unoffload bool
		args      []string
		want      string
		wantErr   error
	}{
		{name: "no namespace", args: nil, want: "exactly one namespace"},
		{name: "two namespaces", args: []string{"a", "b"}, want: "exactly one namespace"},
		{name: "a namespace name that is not a DNS label", args: []string{"Demo"}, want: `invalid namespace "Demo"`},
		{name: "a Kubernetes system namespace", args: []string{"kube-system"}, wantErr: ErrNamespaceRefused},
		{name: "the install namespace", args: []string{installNS}, wantErr: ErrNamespaceRefused},
		{name: "an unknown mapping strategy", args: []string{"demo", "--namespace-mapping-strategy", "SameName"}, want: "use one of DefaultName|EnforceSameName"},
		{name: "an unknown pod strategy", args: []string{"demo", "--pod-offloading-strategy", "Everywhere"}, want: "use one of LocalAndRemote|Remote|Local"},
		{name: "a selector that does not parse", args: []string{"demo", "--selector", "region in eu"}, want: "invalid --selector"},
		{name: "a timeout of zero", args: []string{"demo", "--timeout", "0s"}, want: "--timeout"},
		{name: "-o without --dry-run", args: []string{"demo", "-o", "json"}, want: "only valid with --dry-run"},
		{name: "unoffload without a namespace", unoffload: true, args: nil, want: "exactly one namespace"},
		{name: "unoffload of a namespace name that is not a DNS label", unoffload: true, args: []string{"demo_1"}, want: "invalid namespace"},
		{name: "unoffload with a timeout of zero", unoffload: true, args: []string{"demo", "--timeout", "0s"}, want: "--timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := offlineClient()
			var err error
			if tt.unoffload {
				_, _, err = unoffload(t, c, tt.args...)
			} else {
				_, _, err = offload(t, c, tt.args...)
			}
			switch {
			case err == nil || errors.Is(err, errContacted):
				t.Fatalf("error %v, want the arguments refused before the cluster is contacted", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("error %v, want %v", err, tt.wantErr)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Errorf("error %q, want one that says %q", err, tt.want)
			}
		})
	}
}

// withoutCRD returns a client of a cluster where kubectl-offload is not
// installed: the NamespaceOffloading kind is unknown to it.
func withoutCRD(objs ...client.Object) client.Client {
	noMatch := func(obj any) error {
		switch obj.(type) {
		case *offloadv1alpha1.NamespaceOffloading, *offloadv1alpha1.NamespaceOffloadingList:
			return &meta.NoKindMatchError{GroupKind: offloadv1alpha1.GroupVersion.WithKind("NamespaceOffloading").GroupKind(), SearchedVersions: []string{"v1alpha1"}}
		}
		return nil
	}
	return fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := noMatch(obj); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := noMatch(obj); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
}

func virtualNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.VirtualNodeName(name),
		Labels: map[string]string{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode, offloadv1alpha1.LabelRemoteClusterID: "id-" + name}}}
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func TestAClusterWithoutKubectlOffloadIsToldToInstallIt(t *testing.T) {
	c := withoutCRD(namespace("demo", nil), virtualNode("provider"))
	for _, args := range [][]string{{"demo"}, {"demo", "--dry-run"}} {
		if _, _, err := offload(t, c, args...); !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "kubectl offload install") {
			t.Errorf("offload %v: error %v, want ErrNotInstalled telling to install", args, err)
		}
	}
	if _, _, err := unoffload(t, c, "demo"); !errors.Is(err, ErrNotOffloaded) {
		t.Errorf("unoffload: error %v, want ErrNotOffloaded", err)
	}
	if _, _, err := unoffload(t, c, "demo", "--ignore-not-found"); err != nil {
		t.Errorf("unoffload --ignore-not-found: error %v, want none", err)
	}
}

func TestATwinNamespaceIsNotOffloadedOnwards(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		namespace("demo-consumer-1a2b3c", map[string]string{offloadv1alpha1.LabelOriginNamespace: "demo"}), virtualNode("provider")).Build()
	if _, _, err := offload(t, c, "demo-consumer-1a2b3c", "--wait=false"); !errors.Is(err, ErrNamespaceRefused) {
		t.Fatalf("error %v, want ErrNamespaceRefused", err)
	}
	assertNotOffloaded(t, c, "demo-consumer-1a2b3c")
}

// noWatch hides the Watch of a client, as some clients have none.
type noWatch struct{ client.Client }

func TestWaitReadsTheNamespaceOffloadingWhenTheClientCannotWatch(t *testing.T) {
	ready := &offloadv1alpha1.NamespaceOffloading{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.NamespaceOffloadingName, Namespace: "demo", Generation: 1},
		Spec:       offloadv1alpha1.NamespaceOffloadingSpec{NamespaceMappingStrategy: offloadv1alpha1.DefaultName, PodOffloadingStrategy: offloadv1alpha1.LocalAndRemote},
		Status: offloadv1alpha1.NamespaceOffloadingStatus{
			RemoteNamespaces: []offloadv1alpha1.RemoteNamespaceStatus{{ClusterID: "id-provider", ClusterName: "provider", RemoteNamespace: "demo-consumer-1a2b3c", Phase: offloadv1alpha1.RemoteNamespaceReady}},
			Conditions:       []metav1.Condition{{Type: offloadv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", ObservedGeneration: 1}},
		},
	}
	c := noWatch{fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(namespace("demo", nil), virtualNode("provider"), ready).
		WithStatusSubresource(&offloadv1alpha1.NamespaceOffloading{}).Build()}
	stdout, stderr, err := offload(t, c, "demo", "--timeout", "5s")
	if err != nil {
		t.Fatal(err)
	}
	if stdout != "namespaceoffloading.offload.io/offloading unchanged\n" || !strings.Contains(stderr, "✓ provider: twin namespace demo-consumer-1a2b3c Ready") {
		t.Errorf("stdout %q, stderr %q: want unchanged and the twin namespace Ready", stdout, stderr)
	}
}
