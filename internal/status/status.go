// Package status checks the health of a kubectl-offload installation and
// renders the result as a table, JSON or YAML (`kubectl offload status`),
// and shows one peer in detail (`kubectl offload status peer NAME`).
// `kubectl offload doctor` (internal/doctor) reuses the report, the Env
// and the rendering (Print) for its active checks.
//
// Each section of the report comes from one Checker. Checkers share an Env,
// which holds the clients and caches what several of them read, such as the
// Helm release. New sections are added by appending a Checker to
// DefaultCheckers.
package status

import (
	"context"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
)

// Checker produces one section of the report.
type Checker interface {
	// Name returns the stable machine name of the section, such as controlPlane.
	Name() string
	// Check inspects the cluster and returns the section. It reports
	// problems as failed checks rather than errors, so that one broken
	// section does not hide the others.
	Check(ctx context.Context, env *Env) Section
}

// DefaultCheckers returns the checkers of `kubectl offload status`, in the
// order their sections are shown.
func DefaultCheckers() []Checker {
	return []Checker{
		namespaceChecker{},
		controlPlaneChecker{},
		crdChecker{},
		identityChecker{},
		networkChecker{},
		endpointsChecker{},
		peersChecker{},
		tunnelsChecker{},
		virtualNodesChecker{},
		offloadedNamespacesChecker{},
	}
}

// Collect runs every checker against env and assembles the report. It fills
// in each section's Name and Status from the checker and its checks.
func Collect(ctx context.Context, env *Env, checkers []Checker) Report {
	sections := make([]func() (string, Section), len(checkers))
	for i, c := range checkers {
		sections[i] = func() (string, Section) { return c.Name(), c.Check(ctx, env) }
	}
	return Assemble(reportType, env.Namespace, sections)
}

// Assemble builds a report of kind from its sections, each a function
// that runs its checks and returns the section's name and the section, in
// order; it fills in each section's Name and Status, and the report's
// Healthy.
func Assemble(kind metav1.TypeMeta, namespace string, sections []func() (string, Section)) Report {
	r := Report{TypeMeta: kind, Namespace: namespace, Sections: []Section{}}
	for _, run := range sections {
		name, s := run()
		s.Name = name
		if s.Checks == nil {
			s.Checks = []Check{}
		}
		s.Status = worst(s.Checks)
		r.Sections = append(r.Sections, s)
	}
	r.Healthy = r.Err() == nil
	return r
}

// Env is what checkers work with: the clients, the install namespace and
// lookups that several checkers share, made once per Env. An Env is used by
// one Collect at a time; make a new one for every round of checks.
type Env struct {
	// Kube is a client-go clientset for the cluster.
	Kube kubernetes.Interface
	// Client is a controller-runtime client that knows offload.io and apiextensions.
	Client client.Client
	// Namespace is the install namespace.
	Namespace string
	// Helm reads the installed Helm release.
	Helm helmclient.Client

	// clock returns the current time, against which ages and expiries are
	// shown; nil means time.Now.
	clock func() time.Time

	release     *helmclient.Release
	releaseErr  error
	releaseRead bool
	deployments map[string]deploymentLookup

	foreignClusters     []offloadv1alpha1.ForeignCluster
	foreignClustersErr  error
	foreignClustersRead bool
}

type deploymentLookup struct {
	dep *appsv1.Deployment
	err error
}

// NewEnv returns an Env for the installation in namespace.
func NewEnv(kube kubernetes.Interface, c client.Client, helm helmclient.Client, namespace string) *Env {
	return &Env{Kube: kube, Client: c, Helm: helm, Namespace: namespace}
}

// now returns the current time of the Env's clock.
func (e *Env) now() time.Time {
	if e.clock == nil {
		return time.Now()
	}
	return e.clock()
}

// Release returns the installed offload release, or nil when it is not
// installed. Helm is asked once per Env.
func (e *Env) Release() (*helmclient.Release, error) {
	if !e.releaseRead {
		e.release, e.releaseErr = e.Helm.Release(offloadv1alpha1.ReleaseName)
		e.releaseRead = true
	}
	return e.release, e.releaseErr
}

// ForeignClusters returns every ForeignCluster, sorted by name; the peers,
// tunnels, virtual nodes and offloaded namespaces sections all read them.
// The API server is asked once per Env. The error is the API's, so that
// callers can tell a missing CRD (missingCRD).
func (e *Env) ForeignClusters(ctx context.Context) ([]offloadv1alpha1.ForeignCluster, error) {
	if !e.foreignClustersRead {
		list := &offloadv1alpha1.ForeignClusterList{}
		err := e.Client.List(ctx, list)
		switch {
		case MissingCRD(err):
			e.foreignClustersErr = err
		case err != nil:
			e.foreignClustersErr = fmt.Errorf("listing ForeignClusters: %w", err)
		default:
			sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
			e.foreignClusters = list.Items
		}
		e.foreignClustersRead = true
	}
	return e.foreignClusters, e.foreignClustersErr
}

// Deployment returns the Deployment called name in the install namespace,
// or nil when it does not exist. The API server is asked once per name.
func (e *Env) Deployment(ctx context.Context, name string) (*appsv1.Deployment, error) {
	if l, ok := e.deployments[name]; ok {
		return l.dep, l.err
	}
	dep, err := e.Kube.AppsV1().Deployments(e.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		dep, err = nil, nil
	case err != nil:
		dep, err = nil, fmt.Errorf("reading deployment %s: %w", name, err)
	}
	if e.deployments == nil {
		e.deployments = map[string]deploymentLookup{}
	}
	e.deployments[name] = deploymentLookup{dep: dep, err: err}
	return dep, err
}

// notInstalled is the check of a section that needs the release when there is none.
func notInstalled(env *Env) Check {
	return Fail("release", "kubectl-offload is not installed in namespace %s: run kubectl offload install", env.Namespace)
}

// ReleaseOrCheck returns the installed release, or the failed check that
// stands in for the section when the release is missing or unreadable.
func ReleaseOrCheck(env *Env) (*helmclient.Release, *Check) {
	rel, err := env.Release()
	if err != nil {
		c := Fail("release", "%v", err)
		return nil, &c
	}
	if rel == nil {
		c := notInstalled(env)
		return nil, &c
	}
	return rel, nil
}
