package cli

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-offload/kubectl-offload/internal/buildinfo"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// run executes the CLI like main does, with a fixed build identity.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	v, c, d := buildinfo.Version, buildinfo.Commit, buildinfo.BuildDate
	buildinfo.Version, buildinfo.Commit, buildinfo.BuildDate = "v1.2.3", "0123abc", "2026-01-02T03:04:05Z"
	t.Cleanup(func() { buildinfo.Version, buildinfo.Commit, buildinfo.BuildDate = v, c, d })

	var out, errOut bytes.Buffer
	code = Run(context.Background(), genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, args)
	// The Go toolchain and platform vary between machines; the golden files say "GO" and "PLATFORM".
	normalise := func(s string) string {
		s = strings.ReplaceAll(s, runtime.Version(), "GO")
		return strings.ReplaceAll(s, runtime.GOOS+"/"+runtime.GOARCH, "PLATFORM")
	}
	return normalise(out.String()), normalise(errOut.String()), code
}

func TestVersion(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		golden string
	}{
		{"client version as JSON is a stable scripting contract", []string{"version", "--client", "-o", "json"}, "version-client.json"},
		{"client version as YAML", []string{"version", "--client", "-o", "yaml"}, "version-client.yaml"},
		{"client version as a table", []string{"version", "--client"}, "version-client.txt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := run(t, tt.args...)
			if code != 0 {
				t.Fatalf("exit code %d, stderr: %s", code, errOut)
			}
			if errOut != "" {
				t.Errorf("--client wrote to stderr: %q", errOut)
			}
			framework.Golden(t, tt.golden, out)
		})
	}
}

func TestErrorsArePrintedOnceWithExitCode1(t *testing.T) {
	out, errOut, code := run(t, "version", "-o", "xml")
	if code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	if out != "" {
		t.Errorf("stdout = %q, want nothing", out)
	}
	if strings.Count(errOut, "Error:") != 1 || !strings.Contains(errOut, `unknown output format "xml"`) {
		t.Errorf("stderr = %q, want one Error line naming the bad format", errOut)
	}
}

func TestUnreachableClusterStillPrintsTheClientVersion(t *testing.T) {
	out, errOut, code := run(t, "version", "-o", "json", "--server", "https://127.0.0.1:1", "--server-timeout", "2s")
	if code != 0 {
		t.Fatalf("exit code %d, stderr: %s", code, errOut)
	}
	if !strings.Contains(out, `"version": "v1.2.3"`) || strings.Contains(out, `"server"`) {
		t.Errorf("stdout = %s, want the client version and no server section", out)
	}
	if !strings.Contains(errOut, "cluster not reachable") {
		t.Errorf("stderr = %q, want a warning that the cluster is not reachable", errOut)
	}
}

func TestRootHelpReadsLikeAKubectlPlugin(t *testing.T) {
	out, _, code := run(t, "--help")
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	for _, want := range []string{"kubectl offload [command]", "kubectl offload install", "--kubeconfig", "--context"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
}

func TestCompletionScripts(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		out, errOut, code := run(t, "completion", shell)
		if code != 0 || len(out) < 100 {
			t.Errorf("completion %s: exit %d, %d bytes, stderr %q", shell, code, len(out), errOut)
		}
	}
	if _, errOut, code := run(t, "completion", "tcsh"); code == 0 || !strings.Contains(errOut, "tcsh") {
		t.Errorf("completion tcsh: exit %d, stderr %q; want a failure naming the shell", code, errOut)
	}
}
