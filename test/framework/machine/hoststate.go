package machine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hostSysctls are the host-wide settings a real node changes: the kubelet
// tunes the kernel, and routing between node namespaces needs forwarding.
var hostSysctls = []string{
	"kernel.panic",
	"kernel.panic_on_oops",
	"kernel.keys.root_maxkeys",
	"kernel.keys.root_maxbytes",
	"vm.overcommit_memory",
	"vm.panic_on_oom",
	"net.ipv4.ip_forward",
}

// hostPathsTouched are host directories that the kubelet, CNI and containerd
// write into whatever their configuration says.
var hostPathsTouched = []string{"/var/log/containers", "/var/lib/cni", "/run/containerd", "/run/netns"}

// hostStateFile records the host as it was before the first real node
// started. It is shared by every process running real nodes, and the last
// node to stop restores the host from it.
const hostStateFile = "/run/offload-test-host-state.json"

type savedHostState struct {
	Sysctls map[string]string `json:"sysctls"`
	// Created lists host paths that did not exist before.
	Created []string `json:"created"`
}

func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

// WithHostLock runs fn holding an exclusive lock shared across processes.
func WithHostLock(fn func() error) error {
	f, err := os.OpenFile(hostStateFile+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }()
	return fn()
}

// AcquireHostState records the host state if no real node runs yet, and
// enables forwarding between node namespaces.
func AcquireHostState() error {
	return WithHostLock(func() error {
		if _, err := os.Stat(hostStateFile); os.IsNotExist(err) {
			s := savedHostState{Sysctls: HostSysctls()}
			for _, p := range hostPathsTouched {
				if _, err := os.Stat(p); os.IsNotExist(err) {
					s.Created = append(s.Created, p)
				}
			}
			b, err := json.Marshal(s)
			if err != nil {
				return err
			}
			if err := os.WriteFile(hostStateFile, b, 0o600); err != nil {
				return err
			}
		}
		return os.WriteFile(sysctlPath("net.ipv4.ip_forward"), []byte("1"), 0o644)
	})
}

// ReleaseHostState restores the host when no real node is left (no
// offload-N network namespace exists any more).
func ReleaseHostState() error {
	return WithHostLock(func() error {
		entries, _ := os.ReadDir("/run/netns")
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "offload-") && !NamespaceAbandoned(e.Name(), AbandonedAfter) {
				return nil // another node still runs
			}
		}
		b, err := os.ReadFile(hostStateFile)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		var s savedHostState
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		var errs []error
		for name, v := range s.Sysctls {
			if err := os.WriteFile(sysctlPath(name), []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restoring %s=%s: %w", name, v, err))
			}
		}
		// Pod network namespaces that CNI left behind (normally the
		// kubelet's pod teardown removes them), now that no node can use one.
		for _, mp := range mountsUnder("/run/netns") {
			if strings.HasPrefix(filepath.Base(mp), "cni-") {
				_ = syscall.Unmount(mp, syscall.MNT_DETACH)
				_ = os.Remove(mp)
			}
		}
		for _, p := range s.Created {
			UnmountUnder(p)
			errs = append(errs, os.RemoveAll(p))
		}
		errs = append(errs, os.Remove(hostStateFile), os.Remove(hostStateFile+".lock"))
		return errors.Join(errs...)
	})
}

// HostSysctls returns the current values of the host settings a real node
// changes, for tests that check teardown restores them.
func HostSysctls() map[string]string {
	out := map[string]string{}
	for _, s := range hostSysctls {
		if b, err := os.ReadFile(sysctlPath(s)); err == nil {
			out[s] = strings.TrimSpace(string(b))
		}
	}
	return out
}

// AbandonedAfter is how long a node's network namespace may hold no process
// before it counts as left by a run that was killed. A node that is starting
// has none until its containerd starts, seconds after the namespace.
const AbandonedAfter = 3 * time.Minute

// NamespaceAbandoned reports whether the network namespace name (of ip
// netns, under /run/netns) was left by a run that was killed: it is older
// than age and no process is in it. A test run killed between creating a
// node and removing it leaves such a namespace; counting it as a running
// node would keep every later run from cleaning up after itself.
func NamespaceAbandoned(name string, age time.Duration) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/run/netns", name), &st); err != nil {
		return false
	}
	if time.Since(time.Unix(st.Mtim.Sec, st.Mtim.Nsec)) < age {
		return false
	}
	want := fmt.Sprintf("net:[%d]", st.Ino)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if link, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "net")); err == nil && link == want {
			return false
		}
	}
	return true
}
