package charts

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// lintValues are the values `kubectl offload install` always sets.
var lintValues = map[string]any{"clusterName": "lint"}

func TestHelmLintIsClean(t *testing.T) {
	linter := lint.All("offload", lintValues, "offload-system", false)
	for _, m := range linter.Messages {
		// INFO messages (such as "icon is recommended") are advice, not findings.
		if m.Severity > support.InfoSev {
			t.Errorf("helm lint: %s", m)
		}
	}
}

// loadEmbedded loads the embedded chart as Helm does.
func loadEmbedded(t *testing.T) *chart.Chart {
	t.Helper()
	files, err := loadFiles(Offload())
	if err != nil {
		t.Fatal(err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEmbeddedChartLoads(t *testing.T) {
	c := loadEmbedded(t)
	if c.Name() != "offload" || len(c.CRDObjects()) != 9 || c.Schema == nil {
		t.Errorf("embedded chart %q has %d CRDs, schema %t; want offload, 9 CRDs and a schema", c.Name(), len(c.CRDObjects()), c.Schema != nil)
	}
}

func render(t testing.TB, vals map[string]any) map[string]map[string]any {
	t.Helper()
	return renderFor(t, vals)
}

// renderFor renders the chart with vals for a cluster that also serves
// apiVersions (such as "monitoring.coreos.com/v1/ServiceMonitor").
func renderFor(t testing.TB, vals map[string]any, apiVersions ...string) map[string]map[string]any {
	t.Helper()
	files, err := loadFiles(Offload())
	if err != nil {
		t.Fatal(err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.APIVersions = append(caps.APIVersions, apiVersions...)
	values, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: "offload", Namespace: "offload-system", IsInstall: true}, caps)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(c, values)
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]map[string]any{}
	for name, doc := range out {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, part := range strings.Split(doc, "\n---") {
			var o map[string]any
			if err := yaml.Unmarshal([]byte(part), &o); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if o == nil || o["kind"] == nil {
				continue
			}
			md := o["metadata"].(map[string]any)
			objs[o["kind"].(string)+"/"+md["name"].(string)] = o
		}
	}
	return objs
}

func TestEveryWorkloadIsHardened(t *testing.T) {
	objs := render(t, lintValues)
	for _, name := range []string{"Deployment/offload-controller-manager", "Deployment/offload-auth"} {
		d, ok := objs[name]
		if !ok {
			t.Fatalf("%s not rendered", name)
		}
		spec := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		if spec["serviceAccountName"] != strings.TrimPrefix(name, "Deployment/") {
			t.Errorf("%s runs as %v, want its own ServiceAccount", name, spec["serviceAccountName"])
		}
		for _, c := range spec["containers"].([]any) {
			c := c.(map[string]any)
			sc := c["securityContext"].(map[string]any)
			if sc["runAsNonRoot"] != true || sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false {
				t.Errorf("%s: securityContext %v is not hardened", name, sc)
			}
			if drop := sc["capabilities"].(map[string]any)["drop"].([]any); len(drop) != 1 || drop[0] != "ALL" {
				t.Errorf("%s: drops capabilities %v, want ALL", name, drop)
			}
			for _, k := range []string{"livenessProbe", "readinessProbe", "resources"} {
				if c[k] == nil {
					t.Errorf("%s: no %s", name, k)
				}
			}
		}
	}
}

func TestAuthServiceTypeAndClusterIDAreValues(t *testing.T) {
	id := "0b7f2c9e-1a2b-4c3d-8e9f-0123456789ab"
	objs := render(t, map[string]any{
		"clusterName": "lint",
		"identity":    map[string]any{"clusterID": id},
		"auth":        map[string]any{"service": map[string]any{"type": "LoadBalancer"}},
	})
	if got := objs["Service/offload-auth"]["spec"].(map[string]any)["type"]; got != "LoadBalancer" {
		t.Errorf("auth Service type = %v, want LoadBalancer", got)
	}
	if got := objs["ConfigMap/offload-cluster-identity"]["data"].(map[string]any)["clusterID"]; got != id {
		t.Errorf("clusterID = %v, want %s", got, id)
	}
}

func TestNoClusterRoleGrantsSecrets(t *testing.T) {
	objects := render(t, lintValues)
	// Roles for tenant, twin and offloaded namespaces may grant Secrets
	// there: they must never be bound cluster-wide.
	namespaceOnly := map[string]bool{"offload-tenant": true, "offload-remote-workloads": true, "offload-reflection": true}
	boundClusterWide := map[string]bool{}
	for name, o := range objects {
		if o["kind"] != "ClusterRoleBinding" {
			continue
		}
		role, _ := o["roleRef"].(map[string]any)["name"].(string)
		boundClusterWide[role] = true
		if namespaceOnly[role] {
			t.Errorf("%s binds %s, a role for tenant, twin or offloaded namespaces only, cluster-wide", name, role)
		}
	}
	for name, o := range objects {
		if o["kind"] != "ClusterRole" {
			continue
		}
		meta, _ := o["metadata"].(map[string]any)
		if role, _ := meta["name"].(string); namespaceOnly[role] && !boundClusterWide[role] {
			continue
		}
		for _, r := range o["rules"].([]any) {
			rule := r.(map[string]any)
			resources, _ := rule["resources"].([]any) // none in a rule of nonResourceURLs
			for _, res := range resources {
				// Creating and deleting named Secrets reads none: the auth
				// service makes and the tenant controller retires credential
				// Secrets in tenant namespaces, and ValidatingAdmissionPolicies
				// (offload-auth-scope, offload-tenant-revocation) confine them there.
				if res == "*" || res == "secrets" && !onlyVerbs(rule, "create", "delete") {
					t.Errorf("%s grants %s cluster-wide with verbs %v", name, res, rule["verbs"])
				}
			}
		}
	}
}

// onlyVerbs says whether rule grants no verb but those allowed.
func onlyVerbs(rule map[string]any, allowed ...string) bool {
	for _, v := range rule["verbs"].([]any) {
		if !slices.Contains(allowed, v.(string)) {
			return false
		}
	}
	return true
}

// The chart refuses exactly the Kubernetes versions the peering policy
// refuses: its kubeVersion says internal/peering's supported range.
func TestTheChartsKubeVersionIsThePeeringPolicysRange(t *testing.T) {
	constraint := loadEmbedded(t).Metadata.KubeVersion
	for minor := peering.OldestKubernetesMinor - 2; minor <= peering.NewestKubernetesMinor+2; minor++ {
		for _, v := range []string{fmt.Sprintf("v1.%d.0", minor), fmt.Sprintf("v1.%d.7+k3s1", minor)} {
			chart := chartutil.IsCompatibleRange(constraint, v)
			policy := peering.CheckKubernetes("the cluster", v) == nil
			if chart != policy {
				t.Errorf("Kubernetes %s: the chart's kubeVersion %q accepts it: %t; the peering policy (%s): %t", v, constraint, chart, peering.SupportedKubernetes(), policy)
			}
		}
	}
}

func TestVirtualNodesTaintIsAnAgentFlag(t *testing.T) {
	args := func(vals map[string]any) []any {
		t.Helper()
		deployment := render(t, vals)["Deployment/offload-controller-manager"]
		spec := deployment["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		return spec["containers"].([]any)[0].(map[string]any)["args"].([]any)
	}
	untainted := "--virtual-node-taint=false"
	if got := args(map[string]any{"clusterName": "lint"}); slices.Contains(got, any(untainted)) {
		t.Errorf("by default the controller-manager's args %v have %s; want the agent's default, tainted", got, untainted)
	}
	if got := args(map[string]any{"clusterName": "lint", "virtualNodes": map[string]any{"taint": false}}); !slices.Contains(got, any(untainted)) {
		t.Errorf("with virtualNodes.taint=false the controller-manager's args are %v; want %s among them", got, untainted)
	}
}

// TestMetricsAreServedToRBACAndScrapedWhereAnOperatorRuns: by default the
// controller-manager serves /metrics, its Service and the reader role
// exist, and a ServiceMonitor only where the cluster has the CRD;
// metrics.enabled=false leaves all of it out.
func TestMetricsAreServedToRBACAndScrapedWhereAnOperatorRuns(t *testing.T) {
	const flag, serviceMonitor = "--metrics-bind-address=:8443", "ServiceMonitor/offload-controller-manager"
	args := func(objs map[string]map[string]any) []any {
		spec := objs["Deployment/offload-controller-manager"]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		return spec["containers"].([]any)[0].(map[string]any)["args"].([]any)
	}
	objs := render(t, map[string]any{"clusterName": "lint"})
	if !slices.Contains(args(objs), any(flag)) {
		t.Errorf("the controller-manager's args %v lack %s", args(objs), flag)
	}
	for _, want := range []string{"Service/offload-controller-manager-metrics", "ClusterRole/offload-metrics-reader"} {
		if objs[want] == nil {
			t.Errorf("no %s", want)
		}
	}
	if role := objs["ClusterRole/offload-metrics-reader"]; role != nil {
		if rules := fmt.Sprint(role["rules"]); rules != "[map[nonResourceURLs:[/metrics] verbs:[get]]]" {
			t.Errorf("offload-metrics-reader grants %s, want get on /metrics only", rules)
		}
	}
	if objs[serviceMonitor] != nil {
		t.Errorf("a %s without the CRD in the cluster", serviceMonitor)
	}
	withOperator := renderFor(t, map[string]any{"clusterName": "lint"}, "monitoring.coreos.com/v1/ServiceMonitor")
	sm := withOperator[serviceMonitor]
	if sm == nil {
		t.Fatalf("no %s where the cluster has the CRD", serviceMonitor)
	}
	selector := sm["spec"].(map[string]any)["selector"].(map[string]any)["matchLabels"].(map[string]any)
	service := withOperator["Service/offload-controller-manager-metrics"]["metadata"].(map[string]any)["labels"].(map[string]any)
	for k, v := range selector {
		if service[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%v, which the metrics Service (labels %v) lacks", k, v, service)
		}
	}
	if other := withOperator["Service/offload-webhook"]; other != nil {
		labels := other["metadata"].(map[string]any)["labels"].(map[string]any)
		if labels["offload.io/metrics"] != nil {
			t.Errorf("the ServiceMonitor selects Service offload-webhook too")
		}
	}
	off := renderFor(t, map[string]any{"clusterName": "lint", "metrics": map[string]any{"enabled": false}}, "monitoring.coreos.com/v1/ServiceMonitor")
	if slices.Contains(args(off), any(flag)) {
		t.Errorf("with metrics.enabled=false the args %v still have %s", args(off), flag)
	}
	for _, gone := range []string{"Service/offload-controller-manager-metrics", "ClusterRole/offload-metrics-reader", serviceMonitor} {
		if off[gone] != nil {
			t.Errorf("with metrics.enabled=false the chart still has %s", gone)
		}
	}
}
