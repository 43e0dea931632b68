package machine

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestACPUSetConfinesAProcessAndItsChildrenAndGoesWithoutTrace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("CPU sets need root")
	}
	root, _, err := cpusetRoot()
	if err != nil {
		t.Skip(err)
	}
	name := "offload-test-cpuset-" + strconv.Itoa(os.Getpid())
	dir, err := MakeCPUSet(name, "0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := RemoveCPUSet(name); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(filepath.Join(root, name)); !os.IsNotExist(err) {
			t.Errorf("cgroup %s is left: %v", name, err)
		}
	})
	// A shell that starts a child after it was moved: the child is born confined.
	sh := exec.Command("sh", "-c", "read line; sleep 30 & echo $!; wait")
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sh.Process.Kill(); _ = sh.Wait() })
	if err := MoveToCPUSet(dir, sh.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if got, err := ProcessCPUs(sh.Process.Pid); err != nil || got != "0" {
		t.Errorf("the moved process may run on CPUs %q (%v), want 0", got, err)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32)
	n, err := stdout.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(string(buf[:n-1]))
	if err != nil {
		t.Fatalf("child pid %q: %v", buf[:n], err)
	}
	defer func() { _ = exec.Command("kill", strconv.Itoa(child)).Run() }()
	if got, err := ProcessCPUs(child); err != nil || got != "0" {
		t.Errorf("the child may run on CPUs %q (%v), want 0", got, err)
	}
}

func TestCPUListsParseAsTheKernelWritesThem(t *testing.T) {
	for in, want := range map[string]string{"0": "[0]", "0-1": "[0 1]", "0-2,4": "[0 1 2 4]", " 3 ,5-6\n": "[3 5 6]"} {
		got, err := parseCPUList(in)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("parseCPUList(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "1-x"} {
		if got, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) = %v; want an error", bad, got)
		}
	}
}
