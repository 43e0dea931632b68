package pins

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
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
			t.Errorf("k8s.io modules are on %s, want v0.37.x, the newest minor the module proxy serves", v)
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

// The local clusters run the Kubernetes of the libraries' minor, which is
// the newest the version policy supports, and the compatibility matrix
// spans exactly the supported range.
func TestTheLocalClustersRunTheNewestSupportedKubernetes(t *testing.T) {
	b, err := os.ReadFile("../../hack/versions.env")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(k, "#") {
			env[k] = v
		}
	}
	minor := func(v string) int {
		m := regexp.MustCompile(`^v1\.(\d+)\.\d+$`).FindStringSubmatch(v)
		if m == nil {
			t.Fatalf("%q is not a Kubernetes release vX.Y.Z", v)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	// The libraries are on v0.37 (TestKubernetesModulesArePinnedInLockstep).
	const libraries = 37
	if got := minor(env["KUBE_VERSION"]); got != libraries {
		t.Errorf("KUBE_VERSION is %s; want v1.%d.x, the libraries' minor", env["KUBE_VERSION"], libraries)
	}
	if peering.NewestKubernetesMinor != libraries {
		t.Errorf("the newest Kubernetes the policy supports is v1.%d; want the libraries' v1.%d", peering.NewestKubernetesMinor, libraries)
	}
	matrix := strings.Split(env["KUBE_COMPAT_VERSIONS"], ",")
	var minors []int
	for _, v := range matrix {
		minors = append(minors, minor(v))
	}
	want := []int{}
	for m := peering.OldestKubernetesMinor; m <= peering.NewestKubernetesMinor; m++ {
		want = append(want, m)
	}
	if !slices.Equal(minors, want) || matrix[len(matrix)-1] != env["KUBE_VERSION"] {
		t.Errorf("KUBE_COMPAT_VERSIONS is %v; want one release of each supported minor %v, oldest first, ending with KUBE_VERSION", matrix, want)
	}
	if s := minor(env["KUBE_SKEW_VERSION"]); s == minor(env["KUBE_VERSION"]) || !slices.Contains(matrix, env["KUBE_SKEW_VERSION"]) {
		t.Errorf("KUBE_SKEW_VERSION is %s; want another minor than KUBE_VERSION's, from the matrix", env["KUBE_SKEW_VERSION"])
	}
}
