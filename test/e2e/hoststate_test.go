package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// hostSnapshot is the host state a real node may change.
type hostSnapshot struct {
	sysctls    map[string]string
	mounts     []string
	interfaces []string
	processes  []string
	netns      []string
	// absent are host directories a real node writes to that did not exist.
	absent []string
}

// nodeHostDirs are the host directories a real node's kubelet, CNI and
// containerd write to, whatever their configuration says.
var nodeHostDirs = []string{"/var/log/containers", "/var/lib/cni", "/run/containerd", "/run/netns"}

func snapshotHost(t *testing.T) hostSnapshot {
	t.Helper()
	s := hostSnapshot{sysctls: framework.HostSysctls()}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			s.mounts = append(s.mounts, fields[4])
		}
	}
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			s.interfaces = append(s.interfaces, strings.TrimSuffix(strings.Split(f[1], "@")[0], ":"))
		}
	}
	for _, name := range []string{"kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "pause", "testapp", "offload-agent", "kine", "servicelb"} {
		if out, err := exec.Command("pgrep", "-x", name).Output(); err == nil {
			for _, pid := range strings.Fields(string(out)) {
				s.processes = append(s.processes, name+"/"+pid)
			}
		}
	}
	for _, d := range nodeHostDirs {
		if _, err := os.Stat(d); os.IsNotExist(err) {
			s.absent = append(s.absent, d)
		}
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		s.netns = append(s.netns, e.Name())
	}
	for _, l := range [][]string{s.mounts, s.interfaces, s.processes, s.netns} {
		sort.Strings(l)
	}
	return s
}

// expectHostRestored fails the test when the host differs from before.
func expectHostRestored(t *testing.T, before hostSnapshot) {
	t.Helper()
	after := snapshotHost(t)
	for k, v := range before.sysctls {
		if after.sysctls[k] != v {
			t.Errorf("sysctl %s = %s after teardown, was %s", k, after.sysctls[k], v)
		}
	}
	diff := func(what string, a, b []string) {
		seen := map[string]bool{}
		for _, x := range a {
			seen[x] = true
		}
		for _, x := range b {
			if !seen[x] {
				t.Errorf("%s %s is left after teardown", what, x)
			}
		}
	}
	diff("mount", before.mounts, after.mounts)
	diff("interface", before.interfaces, after.interfaces)
	diff("process", before.processes, after.processes)
	diff("network namespace", before.netns, after.netns)
	for _, d := range before.absent {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s did not exist before and is left after teardown", d)
		}
	}
	for _, p := range []string{"/var/log/containers", "/var/lib/cni"} {
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			if strings.Contains(e.Name(), "offload") {
				t.Errorf("%s is left after teardown", filepath.Join(p, e.Name()))
			}
		}
	}
}
