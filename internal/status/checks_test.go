package status

import (
	"context"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/internal/status/statustest"
)

// collect runs the default checkers against the fixture.
func collect(t *testing.T, f *fixture) Report {
	t.Helper()
	fac := f.factory(t).(statustest.Factory)
	return Collect(context.Background(), NewEnv(fac.Kube, fac.Ctrl, helmclient.New(fac.Helm, statustest.Namespace), statustest.Namespace), DefaultCheckers())
}

// checkStatus returns the status of the check called name in section, or "".
func checkStatus(r Report, section, name string) Status {
	for _, s := range r.Sections {
		for _, c := range s.Checks {
			if s.Name == section && c.Name == name {
				return c.Status
			}
		}
	}
	return ""
}

func TestChecks(t *testing.T) {
	crd := "tenants.offload.io"
	tests := []struct {
		name           string
		breakIt        func(f *fixture)
		section, check string
		want           Status
	}{
		{"a failed release fails", func(f *fixture) { f.releaseStatus = release.StatusFailed },
			"namespace", "release", StatusFailed},
		{"a release being upgraded is a warning", func(f *fixture) { f.releaseStatus = release.StatusPendingUpgrade },
			"namespace", "release", StatusWarning},
		{"a namespace being deleted fails", func(f *fixture) {
			f.namespace.DeletionTimestamp = &metav1.Time{Time: time.Unix(0, 0)}
			f.namespace.Finalizers = []string{"kubernetes"}
		}, "namespace", "namespace", StatusFailed},
		{"a deployment rolling out is a warning", func(f *fixture) { f.deployments[offloadv1alpha1.Auth].Generation = 2 },
			"controlPlane", "deployment/" + offloadv1alpha1.Auth, StatusWarning},
		{"a missing deployment fails", func(f *fixture) { delete(f.deployments, offloadv1alpha1.ControllerManager) },
			"controlPlane", "deployment/" + offloadv1alpha1.ControllerManager, StatusFailed},
		{"a CRD the installed release predates is a warning: upgrade installs it", func(f *fixture) {
			delete(f.crds, "virtualnodes.offload.io")
			f.olderChartWithout = []string{"crds/offload.io_virtualnodes.yaml"}
		}, "crds", "crd/virtualnodes.offload.io", StatusWarning},
		{"a CRD the installed release has fails when it is missing", func(f *fixture) { delete(f.crds, "virtualnodes.offload.io") },
			"crds", "crd/virtualnodes.offload.io", StatusFailed},
		{"a CRD that is not established fails", func(f *fixture) {
			f.crds[crd].Status.Conditions[1].Status = apiextensionsv1.ConditionFalse
		}, "crds", "crd/" + crd, StatusFailed},
		{"an identity without a cluster name fails", func(f *fixture) { delete(f.identity.Data, "clusterName") },
			"localCluster", "identity", StatusFailed},
		{"a missing identity fails", func(f *fixture) { f.identity = nil },
			"localCluster", "identity", StatusFailed},
		{"a pod CIDR that is not a CIDR is a warning", func(f *fixture) {
			f.values["network"] = map[string]any{"podCIDR": "10.244.0.0", "serviceCIDR": "10.96.0.0/12"}
		}, "network", "podCIDR", StatusWarning},
		{"an auth Service reachable only in the cluster is a warning", func(f *fixture) {
			f.authService.Spec.Type = corev1.ServiceTypeClusterIP
		}, "endpoints", "authURL", StatusWarning},
		{"a missing auth Service fails", func(f *fixture) { f.authService = nil },
			"endpoints", "authURL", StatusFailed},
		{"nodes without an InternalIP for the auth node port are a warning", func(f *fixture) {
			for _, n := range f.nodes {
				n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "localhost"}}
			}
		}, "endpoints", "authURL", StatusWarning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := healthy(t)
			if got := checkStatus(collect(t, f), tt.section, tt.check); got != StatusOK {
				t.Fatalf("healthy install: %s/%s = %q, want ok", tt.section, tt.check, got)
			}
			tt.breakIt(f)
			r := collect(t, f)
			if got := checkStatus(r, tt.section, tt.check); got != tt.want {
				t.Errorf("%s/%s = %q, want %q", tt.section, tt.check, got, tt.want)
			}
			if r.Healthy != (tt.want != StatusFailed) {
				t.Errorf("healthy = %t with a %s check", r.Healthy, tt.want)
			}
		})
	}
}

func TestTheCRDsComeFromTheEmbeddedChart(t *testing.T) {
	crds, err := chartCRDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != 9 || crds[3].name != "peeringcredentials.offload.io" || crds[8].name != "virtualnodes.offload.io" {
		t.Errorf("chart CRDs = %v, want the 9 offload.io CRDs", crds)
	}
}
