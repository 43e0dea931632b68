package machine

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A process left in a node's cgroups after its containerd stopped (runc
// init of a container being created) is killed, so the cgroups can go; a
// name that is not below the root kills nothing.
func TestTheProcessesLeftInANodesCgroupsAreKilled(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cgroups need root")
	}
	for _, bad := range []string{"", "/", "..", "a/../.."} {
		if err := KillCgroupProcesses(bad, time.Second); err == nil {
			t.Errorf("KillCgroupProcesses(%q) did not refuse", bad)
		}
	}
	name := fmt.Sprintf("offload-test-kill-%d", os.Getpid())
	t.Cleanup(func() { _ = RemoveCgroupRoot(name) })
	for _, dir := range []string{name, name + "/pod", name + "/pod/container"} {
		if err := CreateCgroupRoot(dir); err != nil {
			t.Fatal(err)
		}
	}
	sleep := exec.Command("sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleep.Wait() }()
	t.Cleanup(func() { _ = sleep.Process.Kill() })
	joined := 0
	for _, h := range cgroupControllers() {
		if os.WriteFile(filepath.Join(h, name, "pod", "container", "cgroup.procs"), []byte(fmt.Sprint(sleep.Process.Pid)), 0o644) == nil {
			joined++
		}
	}
	if joined == 0 || len(cgroupProcesses(name)) != 1 {
		t.Fatalf("the process joined %d hierarchies; cgroup %s holds %v", joined, name, cgroupProcesses(name))
	}

	if err := KillCgroupProcesses(name, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err == nil {
			t.Error("the process in the cgroup exited by itself, not killed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the process in the cgroup is still running")
	}
	if err := RemoveCgroupRoot(name); err != nil {
		t.Errorf("the emptied cgroup cannot be removed: %v", err)
	}
}
