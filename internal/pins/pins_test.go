package pins

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// staging matches the k8s.io modules released together from the Kubernetes
// staging tree; they must all be on one version.
var staging = regexp.MustCompile(`^\s*(k8s\.io/[a-z-]+) (v0\.\d+\.\d+)\b`)

func TestKubernetesModulesArePinnedInLockstep(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		m := staging.FindStringSubmatch(line)
		if m == nil || m[1] == "k8s.io/utils" || m[1] == "k8s.io/kube-openapi" {
			continue
		}
		versions[m[2]] = append(versions[m[2]], m[1])
	}
	if len(versions) != 1 {
		t.Fatalf("k8s.io modules are on several versions, pin them to one: %v", versions)
	}
	for v := range versions {
		if !strings.HasPrefix(v, "v0.37.") {
			t.Errorf("k8s.io modules are on %s, the design pins v0.37.x", v)
		}
	}
}

func TestPinnedDependencyMinorVersions(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for mod, prefix := range map[string]string{
		"sigs.k8s.io/controller-runtime":             "v0.25.",
		"helm.sh/helm/v3":                            "v3.22.",
		"github.com/virtual-kubelet/virtual-kubelet": "v1.14.1",
	} {
		re := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(mod) + ` (\S+)`)
		m := re.FindStringSubmatch(string(b))
		if m == nil || !strings.HasPrefix(m[1], prefix) {
			t.Errorf("%s is %v in go.mod, want %s*", mod, m, prefix)
		}
	}
}
