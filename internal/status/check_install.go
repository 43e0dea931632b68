package status

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/charts"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
)

// controlPlaneDeployments are the Deployments of the chart.
var controlPlaneDeployments = []string{offloadv1alpha1.ControllerManager, offloadv1alpha1.Auth}

// namespaceChecker checks that the install namespace exists and holds a
// deployed release.
type namespaceChecker struct{}

func (namespaceChecker) Name() string { return "namespace" }

func (namespaceChecker) Check(ctx context.Context, env *Env) Section {
	s := Section{Title: "Namespace"}
	ns, err := env.Kube.CoreV1().Namespaces().Get(ctx, env.Namespace, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s.Checks = append(s.Checks, Fail("namespace", "namespace %s not found: run kubectl offload install", env.Namespace))
	case err != nil:
		s.Checks = append(s.Checks, Fail("namespace", "reading namespace %s: %v", env.Namespace, err))
	case ns.DeletionTimestamp != nil:
		s.Checks = append(s.Checks, Fail("namespace", "namespace %s is being deleted: wait until it is gone, then run kubectl offload install", env.Namespace))
	default:
		s.Checks = append(s.Checks, OK("namespace", "namespace %s exists", env.Namespace))
	}
	return withRelease(s, env)
}

// withRelease adds the check of the release's Helm status to s.
func withRelease(s Section, env *Env) Section {
	rel, c := ReleaseOrCheck(env)
	if c != nil {
		s.Checks = append(s.Checks, *c)
		return s
	}
	what := fmt.Sprintf("release %s revision %d (chart %s)", rel.Name, rel.Revision, rel.ChartVersion)
	switch {
	case rel.Status == helmclient.StatusDeployed:
		s.Checks = append(s.Checks, OK("release", "%s is deployed", what))
	case rel.Pending():
		s.Checks = append(s.Checks, Warn("release", "%s is %s: an install or upgrade is in progress", what, rel.Status))
	default:
		s.Checks = append(s.Checks, Fail("release", "%s is %s: run kubectl offload upgrade", what, rel.Status))
	}
	return s
}

// controlPlaneChecker checks that every Deployment of the chart is available.
type controlPlaneChecker struct{}

func (controlPlaneChecker) Name() string { return "controlPlane" }

func (controlPlaneChecker) Check(ctx context.Context, env *Env) Section {
	s := Section{Title: "Control plane"}
	if _, c := ReleaseOrCheck(env); c != nil {
		s.Checks = append(s.Checks, *c)
		return s
	}
	s.Table = &Table{Columns: []string{"DEPLOYMENT", "DESIRED", "READY", "AVAILABLE"}}
	for _, name := range controlPlaneDeployments {
		row, check := deploymentHealth(ctx, env, name)
		s.Table.Rows = append(s.Table.Rows, row)
		s.Checks = append(s.Checks, check)
	}
	return s
}

// deploymentHealth returns the table row and the check of one Deployment.
func deploymentHealth(ctx context.Context, env *Env, name string) ([]string, Check) {
	check := "deployment/" + name
	dep, err := env.Deployment(ctx, name)
	if err != nil {
		return []string{name, "-", "-", "-"}, Fail(check, "%v", err)
	}
	if dep == nil {
		return []string{name, "-", "-", "-"}, Fail(check, "deployment %s not found: run kubectl offload upgrade to restore it", name)
	}
	desired := int32(1)
	if dep.Spec.Replicas != nil {
		desired = *dep.Spec.Replicas
	}
	st := dep.Status
	row := []string{name, itoa(desired), itoa(st.ReadyReplicas), itoa(st.AvailableReplicas)}
	switch {
	case desired == 0:
		return row, Fail(check, "deployment %s is scaled to 0 replicas: run kubectl scale -n %s deployment %s --replicas=1", name, env.Namespace, name)
	case st.AvailableReplicas < desired:
		return row, Fail(check, "deployment %s has %d of %d replicas available: see kubectl describe -n %s deployment %s", name, st.AvailableReplicas, desired, env.Namespace, name)
	case st.UpdatedReplicas < desired || st.ObservedGeneration < dep.Generation:
		return row, Warn(check, "deployment %s is rolling out: %d of %d replicas updated", name, st.UpdatedReplicas, desired)
	}
	return row, OK(check, "deployment %s is available: %d of %d replicas", name, st.AvailableReplicas, desired)
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// crdChecker checks that every CRD of the chart exists and is established.
type crdChecker struct{}

func (crdChecker) Name() string { return "crds" }

func (crdChecker) Check(ctx context.Context, env *Env) Section {
	s := Section{Title: "CRDs"}
	crds, err := chartCRDs()
	if err != nil {
		s.Checks = append(s.Checks, Fail("crds", "%v", err))
		return s
	}
	remedy := crdRemedy(env)
	rel, _ := env.Release()
	for _, c := range crds {
		name := c.name
		check := "crd/" + name
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := env.Client.Get(ctx, client.ObjectKey{Name: name}, crd)
		switch {
		case apierrors.IsNotFound(err) && predates(rel, c.file):
			// A release this CLI is newer than: it runs without the CRD.
			s.Checks = append(s.Checks, Warn(check, "CRD %s not found: the installed release (chart %s) predates it; kubectl offload upgrade installs it", name, rel.ChartVersion))
		case apierrors.IsNotFound(err):
			s.Checks = append(s.Checks, Fail(check, "CRD %s not found: %s", name, remedy))
		case err != nil:
			s.Checks = append(s.Checks, Fail(check, "reading CRD %s: %v", name, err))
		case crd.DeletionTimestamp != nil:
			s.Checks = append(s.Checks, Fail(check, "CRD %s is being deleted: wait until it is gone, then %s", name, remedy))
		case !established(crd):
			s.Checks = append(s.Checks, Fail(check, "CRD %s is not established yet: see kubectl describe crd %s", name, name))
		default:
			s.Checks = append(s.Checks, OK(check, "CRD %s is established", name))
		}
	}
	return s
}

// crdRemedy says how to restore a missing CRD: install when kubectl-offload
// is not installed, and otherwise upgrade, which reapplies the CRDs.
func crdRemedy(env *Env) string {
	if rel, err := env.Release(); err == nil && rel == nil {
		return "run kubectl offload install"
	}
	return "run kubectl offload upgrade to reapply the CRDs"
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// predates reports whether rel, an installed release, was made from a
// chart without the CRD file file: one this CLI is newer than.
func predates(rel *helmclient.Release, file string) bool {
	return rel != nil && len(rel.CRDFiles) > 0 && !slices.Contains(rel.CRDFiles, file)
}

// chartCRD is a CRD of the embedded chart: its name and its file in the chart.
type chartCRD struct{ name, file string }

// chartCRDs returns the CRDs of the embedded chart, sorted by file name.
var chartCRDs = sync.OnceValues(func() ([]chartCRD, error) {
	fsys := charts.Offload()
	paths, err := fs.Glob(fsys, "crds/*.yaml")
	if err != nil {
		return nil, fmt.Errorf("listing the CRDs of the embedded chart: %w", err)
	}
	var out []chartCRD
	for _, p := range paths {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("reading %s of the embedded chart: %w", p, err)
		}
		var crd metav1.PartialObjectMetadata
		if err := yaml.Unmarshal(b, &crd); err != nil {
			return nil, fmt.Errorf("parsing %s of the embedded chart: %w", p, err)
		}
		if crd.Name == "" {
			return nil, fmt.Errorf("%s of the embedded chart has no name", p)
		}
		out = append(out, chartCRD{name: crd.Name, file: p})
	}
	return out, nil
})
