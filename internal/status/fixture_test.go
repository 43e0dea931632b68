package status

import (
	"context"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/charts"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/internal/status/statustest"
)

const testClusterID = "0b7f2c9e-1a2b-4c3d-8e9f-0123456789ab"

// fixture is a cluster as the fakes hold it. healthy returns an installed,
// healthy one; tests break it field by field.
type fixture struct {
	namespace   *corev1.Namespace
	deployments map[string]*appsv1.Deployment
	identity    *corev1.ConfigMap
	authService *corev1.Service
	nodes       []*corev1.Node
	crds        map[string]*apiextensionsv1.CustomResourceDefinition
	// values are the user-supplied release values; the release exists when installed is true.
	values        map[string]any
	installed     bool
	releaseStatus release.Status
	// olderChartWithout are CRD files (crds/NAME.yaml) the installed
	// release's chart did not have yet.
	olderChartWithout []string
	// kube is set by factory, for tests that add reactors.
	kube *k8sfake.Clientset
}

func node(name, ip string, labels map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
	}
}

// bare is a cluster without kubectl-offload.
func bare() *fixture {
	return &fixture{nodes: []*corev1.Node{
		node("alpha-control-plane", "172.18.0.2", nil),
		node("alpha-worker", "172.18.0.3", nil),
	}}
}

// healthy is a cluster where kubectl-offload is installed and healthy.
func healthy(t *testing.T) *fixture {
	t.Helper()
	f := bare()
	f.namespace = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: statustest.Namespace}}
	f.deployments = map[string]*appsv1.Deployment{}
	for _, name := range controlPlaneDeployments {
		f.deployments[name] = &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: statustest.Namespace, Generation: 1,
				Labels: map[string]string{offloadv1alpha1.VersionLabel: statustest.Version}},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1))},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1,
				ReadyReplicas: 1, AvailableReplicas: 1},
		}
	}
	f.identity = &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.IdentityConfigMap, Namespace: statustest.Namespace},
		Data:       map[string]string{"clusterID": testClusterID, "clusterName": "alpha"},
	}
	f.authService = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.Auth, Namespace: statustest.Namespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, NodePort: 31443}}},
	}
	crdNames, err := chartCRDs()
	if err != nil {
		t.Fatal(err)
	}
	f.crds = map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, c := range crdNames {
		f.crds[c.name] = &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Status: apiextensionsv1.CustomResourceDefinitionStatus{Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{
				{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue},
				{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue},
			}},
		}
	}
	f.installed, f.releaseStatus = true, release.StatusDeployed
	f.values = map[string]any{
		"clusterName": "alpha",
		"provider":    "kind",
		"identity":    map[string]any{"clusterID": testClusterID},
		"network":     map[string]any{"podCIDR": "10.244.0.0/16", "serviceCIDR": "10.96.0.0/12"},
		"apiServer":   map[string]any{"url": "https://172.18.0.2:6443"},
	}
	return f
}

// listServedKinds fails to list offload.io kinds whose CRD the fixture
// lacks, as the REST mapper of a real client does.
func (f *fixture) listServedKinds(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
	gvk, err := apiutil.GVKForObject(list, c.Scheme())
	if err != nil {
		return err
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	gvr, _ := meta.UnsafeGuessKindToResource(gvk)
	if gvk.Group == offloadv1alpha1.GroupVersion.Group && f.crds[gvr.Resource+"."+gvk.Group] == nil {
		return &meta.NoKindMatchError{GroupKind: gvk.GroupKind(), SearchedVersions: []string{gvk.Version}}
	}
	return c.List(ctx, list, opts...)
}

// factory returns a Factory whose clients hold the fixture: a client-go
// fake, a controller-runtime fake and Helm's in-memory release storage.
func (f *fixture) factory(t *testing.T) factory.Factory {
	t.Helper()
	var objs []runtime.Object
	if f.namespace != nil {
		objs = append(objs, f.namespace)
	}
	for _, name := range controlPlaneDeployments {
		if d := f.deployments[name]; d != nil {
			objs = append(objs, d)
		}
	}
	if f.identity != nil {
		objs = append(objs, f.identity)
	}
	if f.authService != nil {
		objs = append(objs, f.authService)
	}
	for _, n := range f.nodes {
		objs = append(objs, n)
	}
	f.kube = k8sfake.NewClientset(objs...)

	var crds []client.Object
	for _, crd := range f.crds {
		crds = append(crds, crd)
	}
	c := crfake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(crds...).
		WithInterceptorFuncs(interceptor.Funcs{List: f.listServedKinds}).Build()

	helm := statustest.MemoryHelm()
	if f.installed {
		ch, err := charts.Load(statustest.Version)
		if err != nil {
			t.Fatal(err)
		}
		// A release of an earlier chart, without some of this one's CRDs.
		ch.Files = slices.DeleteFunc(ch.Files, func(f2 *chart.File) bool { return slices.Contains(f.olderChartWithout, f2.Name) })
		rel := &release.Release{Name: offloadv1alpha1.ReleaseName, Namespace: statustest.Namespace, Version: 3,
			Info: &release.Info{Status: f.releaseStatus}, Chart: ch, Config: f.values}
		if err := helm.Releases.Create(rel); err != nil {
			t.Fatal(err)
		}
	}
	return statustest.Factory{Kube: f.kube, Ctrl: c, Helm: helm}
}
