package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

func TestVersionReportsTheClusterItTalksTo(t *testing.T) {
	c := localcluster.StartClusters(t, localcluster.ClusterOptions{Name: "solo"})[0]
	out, errOut, err := offload(t, c, "version", "-o", "json")
	if err != nil {
		t.Fatalf("version: %v\n%s", err, errOut)
	}
	var report struct {
		Kind   string `json:"kind"`
		Client struct {
			Version string `json:"version"`
		} `json:"client"`
		Server *struct {
			Kubernetes string `json:"kubernetesVersion"`
			Installed  bool   `json:"installed"`
			Chart      string `json:"chartVersion"`
		} `json:"server"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("version -o json is not JSON: %v\n%s", err, out)
	}
	versions, err := tools.Versions()
	if err != nil {
		t.Fatal(err)
	}
	if report.Kind != "VersionReport" || report.Client.Version == "" {
		t.Errorf("unexpected report: %s", out)
	}
	if report.Server == nil {
		t.Fatalf("no server section although the cluster is reachable: %s (stderr %s)", out, errOut)
	}
	if report.Server.Kubernetes != versions["KUBE_VERSION"] {
		t.Errorf("kubernetesVersion = %q, want %q", report.Server.Kubernetes, versions["KUBE_VERSION"])
	}
	if report.Server.Installed || report.Server.Chart != "" {
		t.Errorf("a fresh cluster reports an installed chart: %s", out)
	}
}

func TestKubectlFindsThePluginAndItsCompletion(t *testing.T) {
	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(bin, "kubectl")
	env := append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))

	t.Run("kubectl runs the plugin", func(t *testing.T) {
		cmd := exec.Command(kubectl, "offload", "--help")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl offload --help: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "kubectl offload [command]") {
			t.Errorf("kubectl offload --help does not read like a plugin:\n%s", out)
		}
	})

	// kubectl completes plugin arguments through kubectl_complete-offload.
	t.Run("kubectl completes the plugin's arguments", func(t *testing.T) {
		cmd := exec.Command(kubectl, "__complete", "offload", "ver")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl __complete offload ver: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "version") {
			t.Errorf("kubectl does not complete 'kubectl offload ver' to version:\n%s", out)
		}
	})
}
