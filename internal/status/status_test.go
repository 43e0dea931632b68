package status

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/status/statustest"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// run executes `kubectl offload status args...` against f.
func run(t *testing.T, f factory.Factory, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := NewCmdStatus(f, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	err = statustest.Execute(cmd, &out, &errOut, args...)
	return out.String(), errOut.String(), err
}

// scenarios are the installations the golden files show.
var scenarios = []struct {
	name    string
	golden  string
	cluster func(t *testing.T) *fixture
	// wantErr is the one-line error; empty means exit code 0.
	wantErr string
}{
	{
		name:    "a healthy install passes every check",
		golden:  "healthy",
		cluster: healthy,
	},
	{
		name:   "unset CIDRs and a pending load balancer are warnings, not failures",
		golden: "warnings",
		cluster: func(t *testing.T) *fixture {
			f := healthy(t)
			f.values["network"] = map[string]any{"podCIDR": "10.244.0.0/16"}
			f.values["apiServer"] = map[string]any{}
			f.authService.Spec.Type = corev1.ServiceTypeLoadBalancer
			return f
		},
	},
	{
		name:   "a deployment scaled to 0 and an unavailable one fail the control plane",
		golden: "control-plane-down",
		cluster: func(t *testing.T) *fixture {
			f := healthy(t)
			auth := f.deployments[offloadv1alpha1.Auth]
			auth.Spec.Replicas = ptr.To(int32(0))
			auth.Status = appsv1.DeploymentStatus{ObservedGeneration: 1}
			f.deployments[offloadv1alpha1.ControllerManager].Status.AvailableReplicas = 0
			f.deployments[offloadv1alpha1.ControllerManager].Status.ReadyReplicas = 0
			return f
		},
		wantErr: "2 checks failed: control plane",
	},
	{
		name:   "a missing CRD fails the CRDs",
		golden: "crd-missing",
		cluster: func(t *testing.T) *fixture {
			f := healthy(t)
			delete(f.crds, "remotenamespaces.offload.io")
			return f
		},
		wantErr: "1 check failed: crds",
	},
	{
		name:    "a cluster without kubectl-offload says to install it",
		golden:  "not-installed",
		cluster: func(*testing.T) *fixture { return bare() },
		wantErr: "17 checks failed: namespace, control plane, crds, local cluster identity, network, endpoints, peers, offloaded namespaces",
	},
}

func TestStatusTable(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			out, errOut, err := run(t, sc.cluster(t).factory(t))
			statustest.AssertResult(t, err, sc.wantErr)
			if errOut != "" {
				t.Errorf("stderr = %q, want nothing: only cli.Run prints the error", errOut)
			}
			if strings.Contains(out, "\x1b") {
				t.Errorf("output to a non-terminal has ANSI escape codes: %q", out)
			}
			framework.Golden(t, sc.golden+".txt", out)
		})
	}
}

func TestStatusJSONIsAStableContract(t *testing.T) {
	out, _, err := run(t, healthy(t).factory(t), "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	framework.Golden(t, "healthy.json", out)

	var r struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Namespace  string `json:"namespace"`
		Healthy    *bool  `json:"healthy"`
		Sections   []struct {
			Name   string `json:"name"`
			Title  string `json:"title"`
			Status string `json:"status"`
			Fields []struct {
				Name, Label, Value string
			} `json:"fields"`
			Table *struct {
				Columns []string   `json:"columns"`
				Rows    [][]string `json:"rows"`
			} `json:"table"`
			Checks []struct {
				Name, Status, Message string
			} `json:"checks"`
		} `json:"sections"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, out)
	}
	if r.APIVersion != "offload.io/v1alpha1" || r.Kind != "StatusReport" || r.Namespace != statustest.Namespace {
		t.Errorf("apiVersion, kind, namespace = %q, %q, %q; want offload.io/v1alpha1, StatusReport, %s", r.APIVersion, r.Kind, r.Namespace, statustest.Namespace)
	}
	if r.Healthy == nil || !*r.Healthy {
		t.Errorf("healthy = %v, want true", r.Healthy)
	}
	var sectionNames []string
	fields := map[string]string{}
	checks := map[string]string{}
	for _, s := range r.Sections {
		sectionNames = append(sectionNames, s.Name)
		if s.Status != "ok" || s.Title == "" || len(s.Checks) == 0 {
			t.Errorf("section %s: status %q, title %q, %d checks; want ok, a title and checks", s.Name, s.Status, s.Title, len(s.Checks))
		}
		for _, f := range s.Fields {
			fields[s.Name+"."+f.Name] = f.Value
		}
		for _, c := range s.Checks {
			checks[s.Name+"/"+c.Name] = c.Status
			if c.Message == "" {
				t.Errorf("check %s/%s has no message", s.Name, c.Name)
			}
		}
		if s.Name == "controlPlane" {
			if s.Table == nil || strings.Join(s.Table.Columns, ",") != "DEPLOYMENT,DESIRED,READY,AVAILABLE" || len(s.Table.Rows) != 2 {
				t.Errorf("controlPlane table = %+v, want DEPLOYMENT,DESIRED,READY,AVAILABLE and 2 rows", s.Table)
			}
		}
	}
	if got := strings.Join(sectionNames, ","); got != "namespace,controlPlane,crds,localCluster,network,endpoints,peers,tunnels,virtualNodes,offloadedNamespaces" {
		t.Errorf("sections = %s", got)
	}
	wantFields := map[string]string{
		"localCluster.clusterID":    testClusterID,
		"localCluster.clusterName":  "alpha",
		"localCluster.chartVersion": "1.2.3",
		"localCluster.agentVersion": statustest.Version,
		"network.podCIDR":           "10.244.0.0/16",
		"network.serviceCIDR":       "10.96.0.0/12",
		"network.remapPools":        "10.64.0.0/12",
		"endpoints.authURL":         "https://172.18.0.2:31443",
		"endpoints.apiServerURL":    "https://172.18.0.2:6443",
	}
	for k, want := range wantFields {
		if fields[k] != want {
			t.Errorf("field %s = %q, want %q", k, fields[k], want)
		}
	}
	for _, k := range []string{"namespace/namespace", "namespace/release", "controlPlane/deployment/offload-auth",
		"crds/crd/remotenamespaces.offload.io", "localCluster/identity", "endpoints/authURL"} {
		if checks[k] != "ok" {
			t.Errorf("check %s = %q, want ok", k, checks[k])
		}
	}
}

func TestStatusYAMLCarriesTheSameDataAsJSON(t *testing.T) {
	f := healthy(t).factory(t)
	jsonOut, _, err := run(t, f, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	yamlOut, _, err := run(t, f, "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	fromYAML, err := yaml.YAMLToJSON([]byte(yamlOut))
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal([]byte(jsonOut), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(fromYAML, &b); err != nil {
		t.Fatal(err)
	}
	if !equalJSON(a, b) {
		t.Errorf("-o yaml differs from -o json:\n%s\n%s", yamlOut, jsonOut)
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func TestFailedChecksStillPrintTheReportAsJSON(t *testing.T) {
	out, _, err := run(t, bare().factory(t), "-o", "json")
	statustest.AssertResult(t, err, scenarios[len(scenarios)-1].wantErr)
	var r Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, out)
	}
	if r.Healthy || len(r.Sections) == 0 || r.Sections[0].Name != "namespace" || r.Sections[0].Status != StatusFailed {
		t.Errorf("report = %+v, want unhealthy with a failed namespace section", r)
	}
	if msg := r.Sections[0].Checks[0].Message; !strings.Contains(msg, "kubectl offload install") {
		t.Errorf("namespace check says %q; want it to say to run kubectl offload install", msg)
	}
}

func TestBadFlagsAreRejectedBeforeTheClusterIsAsked(t *testing.T) {
	for _, args := range [][]string{{"-o", "xml"}, {"--timeout", "0s"}, {"extra"}} {
		_, _, err := run(t, statustest.Factory{}, args...)
		if err == nil {
			t.Errorf("status %v succeeded, want an error", args)
		}
	}
}
