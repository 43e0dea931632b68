package images

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestTheOldAgentImageIsTheAgentImageUnderTheOldTag(t *testing.T) {
	ref, err := oldAgentImageRef()
	if err != nil {
		t.Fatal(err)
	}
	if ref != "registry.local/offload/offload-agent:old" {
		t.Errorf("the old agent's image reference is %q, want registry.local/offload/offload-agent:old", ref)
	}
	img, err := oldAgentImage(ref, "/bin/offload-agent")
	if err != nil {
		t.Fatal(err)
	}
	if img.Ref != ref || img.Binary != "/bin/offload-agent" || img.User != NonRootUser || !slices.Equal(img.Entrypoint, []string{"/offload-agent"}) {
		t.Errorf("old agent image = %+v; want %s from /bin/offload-agent, user %s, entrypoint /offload-agent, as the agent under test", img, ref, NonRootUser)
	}
}

func TestAReleaseIsCompleteOnlyWithItsPluginAgentAndImage(t *testing.T) {
	dir := t.TempDir()
	r := releaseIn(dir, "0123", "registry.local/offload/offload-agent:old")
	for _, f := range []string{r.CLI, r.Agent} {
		if r.complete() {
			t.Fatalf("a release missing %s is complete", filepath.Base(f))
		}
		if err := os.WriteFile(f, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if r.complete() {
		t.Fatal("a release without its image archive is complete")
	}
	if err := os.WriteFile(r.ImageArchive, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !r.complete() {
		t.Error("a release with its plugin, agent and image archive is not complete")
	}
}

func TestACommitTheCloneLacksSaysToFetchTheFullHistory(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	repo := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q"},
		{"-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q", "--allow-empty", "-m", "first"},
	} {
		if out, err := git(t.Context(), repo, args...); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	full, err := resolveCommit(t.Context(), repo, "HEAD")
	if err != nil || !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(full) {
		t.Errorf("resolving HEAD: %q, %v; want its full hash", full, err)
	}
	const missing = "788970f6bd968859ec364973bfd88ff195758dee"
	if _, err := resolveCommit(t.Context(), repo, missing); err == nil || !strings.Contains(err.Error(), "git fetch --unshallow") || !strings.Contains(err.Error(), missing) {
		t.Errorf("resolving a commit the clone lacks: %v; want an error naming it and saying to run git fetch --unshallow", err)
	}
}
