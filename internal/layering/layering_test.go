package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/kubectl-offload/kubectl-offload/"

// cliPackages are the packages of the plugin that the agent must not import.
var cliPackages = []string{"internal/cli", "internal/peer", "internal/status", "internal/install", "internal/offload", "internal/version"}

// goList runs go list with args from the module root and returns its lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}

// within reports whether pkg is dir or below it.
func within(pkg, dir string) bool {
	return pkg == module+dir || strings.HasPrefix(pkg, module+dir+"/")
}

func TestTheAgentBinaryLinksNoCLICode(t *testing.T) {
	forbidden := []string{"helm.sh/", "github.com/pterm/pterm", "k8s.io/cli-runtime/", module + "charts"}
	for _, dep := range goList(t, "-deps", "./cmd/offload-agent") {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("offload-agent links %s", dep)
			}
		}
		for _, dir := range cliPackages {
			if within(dep, dir) {
				t.Errorf("offload-agent links the CLI package %s", dep)
			}
		}
	}
}

func TestTheCLIAndTheAgentDoNotImportEachOther(t *testing.T) {
	for _, line := range goList(t, "-f", `{{.ImportPath}}={{join .Imports ","}},{{join .TestImports ","}},{{join .XTestImports ","}}`, "./...") {
		pkg, imports, _ := strings.Cut(line, "=")
		agent := within(pkg, "internal/agent") || within(pkg, "cmd/offload-agent")
		cli := within(pkg, "cmd/kubectl-offload")
		for _, dir := range cliPackages {
			cli = cli || within(pkg, dir)
		}
		for _, imp := range strings.Split(imports, ",") {
			if agent {
				for _, dir := range cliPackages {
					if within(imp, dir) {
						t.Errorf("agent package %s imports CLI package %s", pkg, imp)
					}
				}
			}
			if cli && within(imp, "internal/agent") {
				t.Errorf("CLI package %s imports agent package %s", pkg, imp)
			}
		}
	}
}

// The agent's packages by side: a consumer's package never imports a
// provider's, nor the reverse. What both use is the shared agent packages
// (app, manager, summary, ssa, pki, the network fabric) or a leaf.
var (
	consumerPackages = []string{"foreigncluster", "virtualnode", "providerclient", "podreflection", "objectreflection", "reflection",
		"namespaceoffloading", "webhook", "daemonset", "kubeletapi"}
	providerPackages = []string{"auth", "tenant", "incoming", "remotenamespace", "resourceoffer"}
)

func TestAConsumersPackageNeverImportsAProvidersNorTheReverse(t *testing.T) {
	side := func(pkg string) string {
		for _, p := range consumerPackages {
			if within(pkg, "internal/agent/"+p) {
				return "consumer"
			}
		}
		for _, p := range providerPackages {
			if within(pkg, "internal/agent/"+p) {
				return "provider"
			}
		}
		return ""
	}
	for _, line := range goList(t, "-f", `{{.ImportPath}}={{join .Imports ","}}`, "./internal/agent/...") {
		pkg, imports, _ := strings.Cut(line, "=")
		from := side(pkg)
		for _, imp := range strings.Split(imports, ",") {
			if to := side(imp); from != "" && to != "" && from != to {
				t.Errorf("%s package %s imports %s package %s", from, pkg, to, imp)
			}
		}
	}
}
