package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

// runMarker precedes, on a line of its own, each command block of a guide
// that two local clusters can run.
const runMarker = "<!-- run: local -->"

// guideBlocks returns the command blocks of the Markdown page path that
// follow runMarker, in order.
func guideBlocks(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []string
	var block []string
	marked, in := false, false
	s := bufio.NewScanner(f)
	for line := 1; s.Scan(); line++ {
		text := s.Text()
		switch {
		case in && strings.TrimSpace(text) == "```":
			blocks = append(blocks, strings.Join(block, "\n"))
			block, in = nil, false
		case in:
			block = append(block, text)
		case strings.TrimSpace(text) == runMarker:
			marked = true
		case marked && strings.HasPrefix(text, "```"):
			if text != "```sh" {
				t.Fatalf("%s:%d: a marked block is fenced %q, want ```sh", path, line, text)
			}
			marked, in = false, true
		case marked && strings.TrimSpace(text) != "":
			t.Fatalf("%s:%d: %s is followed by %q, not by a command block", path, line, runMarker, text)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if in || marked {
		t.Fatalf("%s: the last marked block does not end", path)
	}
	return blocks
}

// kindKubeconfig writes a kubeconfig holding the clusters under the
// context names kind gives them (kind-NAME), as the guides use them.
func kindKubeconfig(t *testing.T, clusters ...*localcluster.Cluster) string {
	t.Helper()
	merged := clientcmdapi.NewConfig()
	for _, c := range clusters {
		cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		ctx := cfg.Contexts[cfg.CurrentContext]
		if ctx == nil {
			t.Fatalf("kubeconfig %s has no current context", c.Kubeconfig)
		}
		name := "kind-" + c.Name
		merged.Clusters[name] = cfg.Clusters[ctx.Cluster]
		merged.AuthInfos[name] = cfg.AuthInfos[ctx.AuthInfo]
		merged.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
		merged.CurrentContext = name
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*merged, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTheKindQuickstartRuns runs every marked command block of
// docs/quickstart/kind.md, in order, in one shell, against two local
// clusters named as kind names them: the guide cannot rot. The local
// clusters have no registry, so the agent and the workload use the images
// built here, through the variables the guide sets aside for that.
func TestTheKindQuickstartRuns(t *testing.T) {
	blocks := guideBlocks(t, filepath.Join("..", "..", "docs", "quickstart", "kind.md"))
	if len(blocks) < 8 {
		t.Fatalf("docs/quickstart/kind.md has %d marked blocks; a guide from install to clean-up has more", len(blocks))
	}
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	clusters := localcluster.StartClusters(t,
		localcluster.ClusterOptions{Name: "consumer", FakeNodes: 1, TaintFakeNodes: true, RealNode: true, Isolated: true},
		localcluster.ClusterOptions{Name: "provider", FakeNodes: 1, TaintFakeNodes: true, RealNode: true, Isolated: true})
	consumer, provider := clusters[0], clusters[1]

	// kubectl and the plugin on PATH, so that `kubectl offload` works.
	path := t.TempDir()
	toolsDir, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"kubectl": filepath.Join(toolsDir, "kubectl"), "kubectl-offload": filepath.Join(binDir, "kubectl-offload")} {
		if err := os.Symlink(target, filepath.Join(path, name)); err != nil {
			t.Fatal(err)
		}
	}
	installFlags := func(c *localcluster.Cluster) string {
		return strings.Join(append(localcluster.AgentValues(), "--api-server-url", c.PeerAPIServerURL()), " ")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", strings.Join(blocks, "\n"))
	sh.Env = append(os.Environ(),
		"PATH="+path+":"+os.Getenv("PATH"),
		"KUBECONFIG="+kindKubeconfig(t, consumer, provider),
		"IMAGE=registry.local/offload/testapp:test",
		"FETCH=/testapp get",
		"PROVIDER_INSTALL_FLAGS="+installFlags(provider),
		"CONSUMER_INSTALL_FLAGS="+installFlags(consumer),
	)
	start := time.Now()
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("the guide's commands failed after %s: %v\n%s", time.Since(start).Round(time.Second), err, out)
	}
	t.Logf("the guide ran in %s:\n%s", time.Since(start).Round(time.Second), out)
}
