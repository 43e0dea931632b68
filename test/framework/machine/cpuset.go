package machine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CPU sets confine a local cluster and its pods to some of the host's
// CPUs, as if it ran on a machine of its own (ClusterOptions.CPUs). They
// use the cpuset controller of cgroup v1 (this machine's) or v2.

// cpusetRoot returns the root of the cpuset hierarchy and whether it is
// cgroup v2's unified one.
func cpusetRoot() (string, bool, error) {
	if _, err := os.Stat("/sys/fs/cgroup/cpuset/cpuset.cpus"); err == nil {
		return "/sys/fs/cgroup/cpuset", false, nil
	}
	b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	if err == nil && strings.Contains(" "+strings.TrimSpace(string(b))+" ", " cpuset ") {
		return "/sys/fs/cgroup", true, nil
	}
	return "", false, errors.New("no cpuset cgroup controller on this host: CPU sets need cgroup v1's cpuset or cgroup v2 with cpuset")
}

// HostCPUs returns the CPUs of the host, as "0-1".
func HostCPUs() (string, error) {
	root, _, err := cpusetRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, "cpuset.cpus.effective"))
	if err != nil {
		b, err = os.ReadFile(filepath.Join(root, "cpuset.effective_cpus"))
	}
	if err != nil {
		return "", fmt.Errorf("reading the host's CPUs: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// MakeCPUSet creates (or updates) cgroup name, a path below the cpuset
// root such as "offload-consumer", confined to cpus ("0", "1-3"), with the
// memory nodes of the root.
func MakeCPUSet(name, cpus string) (string, error) {
	root, v2, err := cpusetRoot()
	if err != nil {
		return "", err
	}
	if v2 {
		// Children get the controller only when their parent hands it down.
		if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+cpuset"), 0o644); err != nil {
			return "", fmt.Errorf("enabling cpuset for the host's cgroups: %w", err)
		}
	}
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating cgroup %s: %w", dir, err)
	}
	mems, err := os.ReadFile(filepath.Join(root, map[bool]string{false: "cpuset.mems", true: "cpuset.mems.effective"}[v2]))
	if err != nil {
		return "", fmt.Errorf("reading the host's memory nodes: %w", err)
	}
	for file, value := range map[string]string{"cpuset.cpus": cpus, "cpuset.mems": strings.TrimSpace(string(mems))} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
			return "", fmt.Errorf("setting %s of cgroup %s to %q: %w", file, dir, value, err)
		}
	}
	return dir, nil
}

// MoveToCPUSet moves the processes pids, with all their threads, into the
// cgroup dir made by makeCPUSet; their children to come are born there.
func MoveToCPUSet(dir string, pids ...int) error {
	var errs []error
	for _, pid := range pids {
		err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		if err != nil && processAlive(pid) {
			errs = append(errs, fmt.Errorf("moving process %d into %s: %w", pid, dir, err))
		}
	}
	return errors.Join(errs...)
}

// RemoveCPUSet moves what is left in cgroup name back to the root and
// removes it, waiting up to 10 s for processes that are still exiting.
func RemoveCPUSet(name string) error {
	root, _, err := cpusetRoot()
	if err != nil {
		return nil // Nothing was made.
	}
	dir := filepath.Join(root, name)
	var last error
	gone := func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if os.IsNotExist(err) {
			return true
		}
		for _, f := range strings.Fields(string(b)) {
			_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(f), 0o644)
		}
		last = os.Remove(dir)
		return last == nil || os.IsNotExist(last)
	}
	if err := WaitFor(context.Background(), 10*time.Second, gone); err != nil {
		return fmt.Errorf("removing cgroup %s: %w", dir, errors.Join(last, err))
	}
	return nil
}

// ProcessCPUs returns the CPUs process pid may run on, as the kernel's
// Cpus_allowed_list says: "0", "0-1".
func ProcessCPUs(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("process %d: no Cpus_allowed_list", pid)
}

// parseCPUList parses a kernel CPU list, "0-2,4", into its CPUs.
func parseCPUList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("CPU list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("CPU list %q is empty", s)
	}
	return out, nil
}

// OtherCPUs returns the host's CPUs that are not in cpus, as a list the
// kubelet reads ("1,3"), or "" when cpus are all of them.
func OtherCPUs(cpus string) (string, error) {
	host, err := HostCPUs()
	if err != nil {
		return "", err
	}
	all, err := parseCPUList(host)
	if err != nil {
		return "", err
	}
	mine, err := parseCPUList(cpus)
	if err != nil {
		return "", err
	}
	var rest []string
	for _, c := range all {
		if !slices.Contains(mine, c) {
			rest = append(rest, strconv.Itoa(c))
		}
	}
	return strings.Join(rest, ","), nil
}

// SplitHostCPUs splits the host's CPUs in two halves, as two machines:
// "0" and "1" on a two-CPU host. The second half gets the odd CPU out.
func SplitHostCPUs() (first, second string, err error) {
	host, err := HostCPUs()
	if err != nil {
		return "", "", err
	}
	all, err := parseCPUList(host)
	if err != nil {
		return "", "", err
	}
	if len(all) < 2 {
		return "", "", fmt.Errorf("the host has %d CPU: two machines need two", len(all))
	}
	list := func(cpus []int) string {
		s := make([]string, len(cpus))
		for i, c := range cpus {
			s[i] = strconv.Itoa(c)
		}
		return strings.Join(s, ",")
	}
	return list(all[:len(all)/2]), list(all[len(all)/2:]), nil
}
