package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/kubectl-offload/kubectl-offload/"

// cliPackages are the packages of the plugin that the agent must not import.
var cliPackages = []string{"internal/cli", "internal/peer", "internal/status", "internal/doctor", "internal/install", "internal/offload", "internal/version"}

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

// The agent's packages by side, which the tree shows: a package under
// internal/agent/consumer never imports one under internal/agent/provider,
// nor the reverse. What both use is in internal/agent/fabric (each side's
// network), in the shared packages at internal/agent's root, or in a leaf.
var sharedAgentPackages = []string{"app", "manager", "summary", "ssa", "pki", "children", "metrics", "slim"}

func TestAConsumersPackageNeverImportsAProvidersNorTheReverse(t *testing.T) {
	side := func(pkg string) string {
		for _, s := range []string{"consumer", "provider", "fabric"} {
			if within(pkg, "internal/agent/"+s) {
				return s
			}
		}
		for _, p := range sharedAgentPackages {
			if within(pkg, "internal/agent/"+p) {
				return "shared"
			}
		}
		if within(pkg, "internal/agent") {
			return "unplaced"
		}
		return ""
	}
	for _, line := range goList(t, "-f", `{{.ImportPath}}={{join .Imports ","}}`, "./internal/agent/...") {
		pkg, imports, _ := strings.Cut(line, "=")
		from := side(pkg)
		if from == "unplaced" && !strings.HasSuffix(pkg, "/internal/agent") {
			t.Errorf("agent package %s is on no side: place it under internal/agent/consumer, provider or fabric, or list it as shared", pkg)
		}
		for _, imp := range strings.Split(imports, ",") {
			if to := side(imp); (from == "consumer" && to == "provider") || (from == "provider" && to == "consumer") {
				t.Errorf("%s package %s imports %s package %s", from, pkg, to, imp)
			}
		}
	}
}
