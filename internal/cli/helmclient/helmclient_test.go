package helmclient_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"

	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
)

const namespace = "offload-system"

// memoryClient is a Client whose releases are kept in memory, and whose
// objects are only printed.
func memoryClient() helmclient.Client {
	mem := driver.NewMemory()
	mem.SetNamespace(namespace)
	return helmclient.New(&action.Configuration{
		Releases:     storage.Init(mem),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: chartutil.DefaultCapabilities,
		Log:          func(string, ...any) {},
	}, namespace)
}

func testChart(version string) *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "offload", Version: version},
		Values:   map[string]any{"replicas": 1, "image": map[string]any{"tag": "v1"}},
		Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  tag: {{ .Values.image.tag }}\n")}},
	}
}

func TestTheReleaseLifecycleInTheProjectsTypes(t *testing.T) {
	h := memoryClient()
	ctx := t.Context()
	if rel, err := h.Release("offload"); rel != nil || err != nil {
		t.Fatalf("Release before install = %v, %v; want nil, nil", rel, err)
	}

	dry, err := h.Install(ctx, "offload", testChart("0.1.0"), map[string]any{"image": map[string]any{"tag": "v2"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := "tag: v2"; !strings.Contains(dry.Manifest, want) {
		t.Errorf("dry-run manifest %q, want %q", dry.Manifest, want)
	}
	if rel, _ := h.Release("offload"); rel != nil {
		t.Fatal("a dry-run install stored a release")
	}

	if _, err := h.Install(ctx, "offload", testChart("0.1.0"), map[string]any{"image": map[string]any{"tag": "v2"}}, false); err != nil {
		t.Fatal(err)
	}
	rel, err := h.Release("offload")
	if err != nil {
		t.Fatal(err)
	}
	if rel.Name != "offload" || rel.Revision != 1 || rel.Status != helmclient.StatusDeployed || rel.Pending() || rel.ChartVersion != "0.1.0" {
		t.Errorf("release %+v, want offload revision 1 deployed with chart 0.1.0", rel)
	}
	// Values are the defaults merged with the user's, as helm get values --all.
	if img, _ := rel.Values["image"].(map[string]any); img["tag"] != "v2" || rel.Values["replicas"] == nil {
		t.Errorf("values %v, want the defaults with image.tag v2", rel.Values)
	}
	if _, ok := rel.Config["replicas"]; ok {
		t.Errorf("config %v, want only the user-supplied values", rel.Config)
	}

	up, err := h.Upgrade(ctx, "offload", testChart("0.2.0"), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if up.Revision != 2 || up.ChartVersion != "0.2.0" {
		t.Errorf("upgrade %+v, want revision 2 with chart 0.2.0", up)
	}

	if err := h.Uninstall("offload", time.Second); err != nil {
		t.Fatal(err)
	}
	if rel, err := h.Release("offload"); rel != nil || err != nil {
		t.Errorf("Release after uninstall = %v, %v; want nil, nil", rel, err)
	}
	if err := h.Uninstall("offload", time.Second); err != nil {
		t.Errorf("a second uninstall = %v, want nil", err)
	}
}

func TestReleaseValuesNestPlainMaps(t *testing.T) {
	// Values built with Helm's own type, as chartutil's functions return.
	vals := map[string]any{"image": chartutil.Values{"tag": "v2"}, "extra": []any{chartutil.Values{"name": "a"}}}
	rel, err := memoryClient().Install(t.Context(), "offload", testChart("0.1.0"), vals, true)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]map[string]any{"config": rel.Config, "values": rel.Values} {
		img, ok := got["image"].(map[string]any)
		if !ok || img["tag"] != "v2" {
			t.Errorf("%s image = %#v, want a map[string]any with tag v2", name, got["image"])
		}
		extra, _ := got["extra"].([]any)
		if len(extra) != 1 {
			t.Fatalf("%s extra = %#v, want one item", name, got["extra"])
		}
		if _, ok := extra[0].(map[string]any); !ok {
			t.Errorf("%s extra[0] = %#v, want a map[string]any", name, extra[0])
		}
	}
	if _, ok := vals["image"].(chartutil.Values); !ok {
		t.Error("the caller's values were changed")
	}
}
