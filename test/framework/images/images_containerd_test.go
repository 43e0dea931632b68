package images

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
)

// TestImagesImportIntoContainerd imports the archives into a private
// containerd, the way a real test node gets its images.
func TestImagesImportIntoContainerd(t *testing.T) {
	for _, bin := range []string{"ctr", "containerd"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed (apt-get install --no-install-recommends containerd)", bin)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	archives, err := TestImages(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// containerd and runc create /run/containerd whatever their
	// configuration says; the host state bookkeeping of real nodes removes
	// it again if it was not there before.
	if err := machine.AcquireHostState(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := machine.ReleaseHostState(); err != nil {
			t.Error(err)
		}
	})
	address := startPrivateContainerd(t)

	paths := slices.Sorted(maps.Values(archives))
	if err := ImportImages(t.Context(), address, paths...); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), "ctr", "--address", address, "-n", "k8s.io", "images", "ls", "-q").CombinedOutput()
	if err != nil {
		t.Fatalf("listing images: %v\n%s", err, out)
	}
	listed := strings.Fields(string(out))
	for ref := range archives {
		if !slices.Contains(listed, ref) {
			t.Errorf("containerd lists %v, want %s among them", listed, ref)
		}
	}
	// The CRI runs containers from snapshots: the import must have unpacked
	// the images into the default snapshotter (UNPACKED is the last column).
	out, err = exec.CommandContext(t.Context(), "ctr", "--address", address, "-n", "k8s.io", "images", "check").CombinedOutput()
	if err != nil {
		t.Fatalf("checking images: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 && archives[f[0]] != "" && f[len(f)-1] != "true" {
			t.Errorf("image %s is not unpacked:\n%s", f[0], out)
		}
	}
	// Importing again (a warm node) must succeed too.
	if err := ImportImages(t.Context(), address, paths...); err != nil {
		t.Errorf("importing the images a second time: %v", err)
	}

	t.Run("the pause image runs and exits 0 on SIGTERM", func(t *testing.T) {
		c := runCtrContainer(t, address, pauseImageRef, fmt.Sprintf("pause-%d", os.Getpid()))
		if err := c.stop(address); err != nil {
			t.Errorf("pause: %v\n%s", err, c.out.String())
		}
	})
	t.Run("the testapp image serves as non-root, logs requests and exits 0 on SIGTERM", func(t *testing.T) {
		port := freeLoopbackPortForImages(t)
		c := runCtrContainer(t, address, testAppImageRef, fmt.Sprintf("testapp-%d", os.Getpid()), "--net-host", "--env", "PORT="+port)
		waitCtrHealthy(t, c, "http://127.0.0.1:"+port+"/healthz")
		if uid := ctrTaskUID(t, address, c.id); uid != "65532" {
			t.Errorf("testapp runs as uid %s, want 65532", uid)
		}
		if err := c.stop(address); err != nil {
			t.Errorf("testapp: %v\n%s", err, c.out.String())
		}
		if !strings.Contains(c.out.String(), "GET /healthz 200") {
			t.Errorf("testapp did not log the request to stdout:\n%s", c.out.String())
		}
	})
}

// ctrContainer is a `ctr run --rm` in the foreground.
type ctrContainer struct {
	id   string
	out  bytes.Buffer // Read only after done.
	done chan struct{}
	err  error
}

// runCtrContainer starts image as container id, and makes sure it is gone
// when the test ends, before containerd stops. It skips the test when runc
// is missing.
func runCtrContainer(t *testing.T, address, image, id string, args ...string) *ctrContainer {
	t.Helper()
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed: not running the image")
	}
	c := &ctrContainer{id: id, done: make(chan struct{})}
	// An empty --cgroup makes runc create /<id> and remove it on exit, so no
	// /k8s.io cgroup is left behind on the host.
	run := []string{"--address", address, "-n", "k8s.io", "run", "--rm", "--cgroup", ""}
	cmd := exec.Command("ctr", slices.Concat(run, args, []string{image, id})...)
	cmd.Stdout, cmd.Stderr = &c.out, &c.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting container %s: %v", id, err)
	}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		select {
		case <-c.done:
			return
		default:
		}
		ctr := func(args ...string) {
			_ = exec.Command("ctr", append([]string{"--address", address, "-n", "k8s.io"}, args...)...).Run()
		}
		ctr("task", "kill", "--all", "--signal", "SIGKILL", id)
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-c.done
		}
		ctr("task", "delete", "--force", id)
		ctr("containers", "delete", id)
	})
	return c
}

// stop sends SIGTERM until the container exits, and returns how it exited.
// It sends it again because a PID 1 ignores signals it has no handler for
// yet.
func (c *ctrContainer) stop(address string) error {
	deadline := time.After(30 * time.Second)
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	for {
		_ = exec.Command("ctr", "--address", address, "-n", "k8s.io", "task", "kill", "--signal", "SIGTERM", c.id).Run()
		select {
		case <-c.done:
			if c.err != nil {
				return fmt.Errorf("exited with %w", c.err)
			}
			return nil
		case <-deadline:
			return errors.New("still running 30s after SIGTERM")
		case <-retry.C:
		}
	}
}

// waitCtrHealthy polls url until it answers 200.
func waitCtrHealthy(t *testing.T, c *ctrContainer, url string) {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: time.Second}
	for {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-c.done:
			t.Fatalf("container %s exited (%v) before answering %s:\n%s", c.id, c.err, url, c.out.String())
		case <-deadline.C:
			t.Fatalf("%s did not answer 200 within 30s", url)
		case <-tick.C:
		}
	}
}

// ctrTaskUID returns the real uid of a container's init process.
func ctrTaskUID(t *testing.T, address, id string) string {
	t.Helper()
	out, err := exec.Command("ctr", "--address", address, "-n", "k8s.io", "task", "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("listing tasks: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == id {
			status, err := os.ReadFile("/proc/" + f[1] + "/status")
			if err != nil {
				t.Fatal(err)
			}
			for l := range strings.Lines(string(status)) {
				if uids, ok := strings.CutPrefix(l, "Uid:"); ok {
					return strings.Fields(uids)[0]
				}
			}
		}
	}
	t.Fatalf("task %s not listed:\n%s", id, out)
	return ""
}

// freeLoopbackPortForImages returns a TCP port free on 127.0.0.1 a moment ago.
func freeLoopbackPortForImages(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// startPrivateContainerd runs a private containerd, with its root and state under
// a test temp dir and its socket under a short /tmp dir, without the CRI
// plugin. It stops containerd when the test ends and fails the test if a
// mount under those dirs is left behind.
func startPrivateContainerd(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	sockDir, err := os.MkdirTemp("/tmp", "ctd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	address := filepath.Join(sockDir, "containerd.sock")
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), address, address+".ttrpc", filepath.Join(dir, "opt"))
	configPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "containerd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()

	cmd := exec.Command("containerd", "--config", configPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting containerd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		stopContainerdProcess(t, cmd.Process, exited)
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("containerd log:\n%s", b)
			}
		}
		if left := unmountLeftovers(dir, sockDir); len(left) > 0 {
			t.Errorf("containerd left mounts behind (now unmounted): %v", left)
		}
	})

	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if conn, err := net.Dial("unix", address); err == nil {
			conn.Close()
			return address
		}
		select {
		case err := <-exited:
			exited <- err // For the cleanup.
			b, _ := os.ReadFile(logPath)
			t.Fatalf("containerd exited before serving: %v\n%s", err, b)
		case <-deadline.C:
			t.Fatalf("containerd did not serve %s within 30s", address)
		case <-tick.C:
		}
	}
}

// stopContainerdProcess sends SIGTERM, and SIGKILL when the process has not exited
// within 20s.
func stopContainerdProcess(t *testing.T, p *os.Process, exited chan error) {
	t.Helper()
	_ = p.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		t.Logf("containerd exited: %v", err)
	case <-time.After(20 * time.Second):
		t.Errorf("containerd did not stop on SIGTERM within 20s: killing it")
		_ = p.Kill()
		t.Logf("containerd exited: %v", <-exited)
	}
}

// unmountLeftovers unmounts every mount point under the dirs, deepest first, and
// returns them.
func unmountLeftovers(dirs ...string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var under []string
	for line := range strings.Lines(string(b)) {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPoint(fields[4])
		for _, d := range dirs {
			if mp == d || strings.HasPrefix(mp, d+"/") {
				under = append(under, mp)
			}
		}
	}
	slices.Reverse(under) // Later mounts stack on earlier ones.
	for _, mp := range under {
		_ = syscall.Unmount(mp, syscall.MNT_DETACH)
	}
	return under
}

// unescapeMountPoint undoes the octal escapes (\040 for a space) of
// /proc/self/mountinfo.
func unescapeMountPoint(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
