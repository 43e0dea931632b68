// Package machine is what the local clusters share on this host, and must
// leave as they found it: commands, processes, cgroups and cpusets (to
// give each cluster its own cores), the host state the first real node
// records and the last one restores (sysctls, host paths), and figures of
// a process's CPU and memory.
package machine

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// mountsUnder returns the mount points at or below dir, deepest first.
// The kernel lists mount points by their real path: dir is resolved
// first, so a directory reached through a symbolic link (a tool cache
// linked into a checkout) still finds its mounts.
func mountsUnder(dir string) []string {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, strings.TrimSuffix(dir, "/")+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// UnmountUnder lazily unmounts everything at or below dir.
func UnmountUnder(dir string) {
	for _, mp := range mountsUnder(dir) {
		_ = syscall.Unmount(mp, syscall.MNT_DETACH)
	}
}

// cgroupControllers lists the cgroup v1 hierarchies mounted under /sys/fs/cgroup.
func cgroupControllers() []string {
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return out
}

// CreateCgroupRoot creates cgroup /name in every hierarchy, with cpuset
// copied from the parent so tasks can join it.
func CreateCgroupRoot(name string) error {
	for _, h := range cgroupControllers() {
		dir := filepath.Join(h, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return fmt.Errorf("setting %s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// KillCgroupProcesses kills every process in cgroup /name or below, in any
// hierarchy, and waits up to grace for the cgroups to be empty. A container
// that runc was still creating when its node's containerd stopped is left
// behind as "runc init" with no parent, matching no node path, and keeps
// the node's cgroups busy.
func KillCgroupProcesses(name string, grace time.Duration) error {
	if strings.Trim(filepath.Clean("/"+name), "/") == "" || strings.Contains(name, "..") {
		return fmt.Errorf("refusing to kill the processes of cgroup %q: not a cgroup below the root", name)
	}
	var pids []int
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, grace, true, func(context.Context) (bool, error) {
		pids = cgroupProcesses(name)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return len(pids) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("processes %v are still in cgroup /%s after %s", pids, name, grace)
	}
	return nil
}

// cgroupProcesses returns the processes in cgroup /name or below, in any
// hierarchy.
func cgroupProcesses(name string) []int {
	seen := map[int]bool{}
	var out []int
	for _, h := range cgroupControllers() {
		_ = filepath.WalkDir(filepath.Join(h, name), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

// RemoveCgroupRoot removes cgroup /name and everything below it, deepest
// first. It fails when processes are still in it.
func RemoveCgroupRoot(name string) error {
	var errs []string
	for _, h := range cgroupControllers() {
		root := filepath.Join(h, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("removing cgroups: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Run runs a command and returns its combined output in the error.
func Run(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ProcessesMatching returns the PIDs whose command line contains substr;
// none for an empty substr, which every command line contains: a caller
// that lost what it looks for must not stop every process of the machine.
func ProcessesMatching(substr string) []int {
	if substr == "" {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), substr) && processAlive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// StopProcesses sends SIGTERM, waits up to grace, then SIGKILLs what is left
// and waits for it to exit.
func StopProcesses(pids []int, grace time.Duration) error {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	m := map[string]int{}
	for _, pid := range pids {
		m[fmt.Sprint(pid)] = pid
	}
	if err := WaitExited(context.Background(), m, grace); err == nil {
		return nil
	}
	return WaitExited(context.Background(), m, 10*time.Second)
}

// WaitExited waits until every process has exited, and kills the ones that
// are still there after timeout.
func WaitExited(ctx context.Context, pids map[string]int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		alive := map[string]int{}
		for name, pid := range pids {
			if processAlive(pid) {
				alive[name] = pid
			}
		}
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			for _, pid := range alive {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			return fmt.Errorf("processes still running after %s, killed: %v", timeout, alive)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processAlive reports whether pid is a running process (not a zombie).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// WaitFor polls ok until it is true, ctx ends or timeout passes.
func WaitFor(ctx context.Context, timeout time.Duration, ok func() bool) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return ok(), nil
	})
}
