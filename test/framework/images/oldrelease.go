package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

// OldAgentImageTag is the tag OldRelease gives the agent image of an
// earlier release, in the repository of the agent under test, whose tag is
// "test": a chart installed with --set image.tag=old runs the old agent.
const OldAgentImageTag = "old"

// Release is kubectl-offload built from an earlier commit of this
// repository: its plugin, which embeds its chart, and its agent image.
type Release struct {
	// Commit is the full hash of the commit it was built from.
	Commit string
	// CLI is the path of its kubectl-offload.
	CLI string
	// Agent is the path of its offload-agent.
	Agent string
	// Image is the reference of its agent image,
	// registry.local/offload/offload-agent:old.
	Image string
	// ImageArchive is the path of that image as a docker archive, to import
	// into real nodes (ClusterOptions.Images).
	ImageArchive string
}

// releaseIn is the Release built into dir from commit.
func releaseIn(dir, commit, image string) *Release {
	return &Release{
		Commit:       commit,
		CLI:          filepath.Join(dir, "kubectl-offload"),
		Agent:        filepath.Join(dir, "offload-agent"),
		Image:        image,
		ImageArchive: filepath.Join(dir, "offload-agent-"+OldAgentImageTag+".tar"),
	}
}

// complete reports whether every file of r exists.
func (r *Release) complete() bool {
	for _, f := range []string{r.CLI, r.Agent, r.ImageArchive} {
		if info, err := os.Stat(f); err != nil || !info.Mode().IsRegular() {
			return false
		}
	}
	return true
}

var oldReleases sync.Map // full commit hash -> *oldReleaseBuild

type oldReleaseBuild struct {
	once sync.Once
	err  error
}

// OldRelease returns kubectl-offload as built from commit (a hash or any
// name git resolves), for upgrade tests. The first call on a machine
// checks the commit out into a temporary git worktree, builds its
// ./cmd/kubectl-offload and ./cmd/offload-agent there (with that commit's
// own go.mod), writes the agent image under OldAgentImageTag, removes the
// worktree, and caches the result in <CacheDir()>/releases/<full hash>;
// later calls return the cache. A shallow clone lacks old commits: the
// error then says to fetch the full history.
func OldRelease(ctx context.Context, commit string) (*Release, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return nil, err
	}
	full, err := resolveCommit(ctx, root, commit)
	if err != nil {
		return nil, err
	}
	image, err := oldAgentImageRef()
	if err != nil {
		return nil, err
	}
	cache, err := tools.CacheDir()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cache, "releases", full)
	r := releaseIn(dir, full, image)
	if r.complete() {
		return r, nil
	}
	v, _ := oldReleases.LoadOrStore(full, &oldReleaseBuild{})
	b := v.(*oldReleaseBuild)
	b.once.Do(func() { b.err = buildRelease(ctx, root, full, dir, image) })
	if b.err != nil {
		return nil, b.err
	}
	return r, nil
}

// git runs git in the repository at root.
func git(ctx context.Context, root string, args ...string) (string, error) {
	return machine.Run(ctx, "git", append([]string{"-C", root}, args...)...)
}

// resolveCommit returns the full hash of commit in the repository at root,
// or an error that says how to get it when the clone lacks it.
func resolveCommit(ctx context.Context, root, commit string) (string, error) {
	out, err := git(ctx, root, "rev-parse", "--verify", "--quiet", commit+"^{commit}")
	if err == nil {
		return strings.TrimSpace(out), nil
	}
	if _, lookErr := exec.LookPath("git"); lookErr != nil {
		return "", fmt.Errorf("building the release at commit %s needs git: %w", commit, lookErr)
	}
	clone := "this clone"
	if shallow, err := git(ctx, root, "rev-parse", "--is-shallow-repository"); err == nil && strings.TrimSpace(shallow) == "true" {
		clone = "this shallow clone"
	}
	return "", fmt.Errorf("commit %s is not in %s of %s: fetch the full history with git fetch --unshallow (in CI, clone with fetch-depth: 0)", commit, clone, root)
}

// buildRelease builds the release at commit into dir: in a staging
// directory next to it, renamed into place once complete, so that a
// concurrent or interrupted build never leaves half a release.
func buildRelease(ctx context.Context, root, commit, dir, image string) (err error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("creating the release cache: %w", err)
	}
	staging, err := os.MkdirTemp(filepath.Dir(dir), ".build-"+commit[:12]+"-")
	if err != nil {
		return fmt.Errorf("creating the release cache: %w", err)
	}
	defer func() { _ = os.RemoveAll(staging) }() // A no-op after the rename.
	// The worktree is outside the repository, so that no go command run
	// in it sees a second module.
	tmp, err := os.MkdirTemp("", "offload-release-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	src := filepath.Join(tmp, "src")
	if _, err := git(ctx, root, "worktree", "add", "--detach", src, commit); err != nil {
		return fmt.Errorf("checking out commit %s into a worktree: %w", commit, err)
	}
	defer func() { err = errors.Join(err, removeWorktree(root, src)) }()

	r := releaseIn(staging, commit, image)
	for pkg, out := range map[string]string{"./cmd/kubectl-offload": r.CLI, "./cmd/offload-agent": r.Agent} {
		// GOWORK=off keeps a go.work around the checkout out of it.
		if err := goBuild(ctx, src, pkg, out, "-s -w", "GOWORK=off"); err != nil {
			return fmt.Errorf("building the release at commit %s: %w", commit, err)
		}
	}
	img, err := oldAgentImage(image, r.Agent)
	if err != nil {
		return err
	}
	if err := BuildImageArchive(img, r.ImageArchive); err != nil {
		return err
	}
	if err := os.Rename(staging, dir); err != nil {
		if releaseIn(dir, commit, image).complete() {
			return nil // Another process built it first.
		}
		return fmt.Errorf("caching the release at commit %s: %w", commit, err)
	}
	return nil
}

// removeWorktree removes the worktree at src and prunes what git keeps of
// it, also when the build failed or was cancelled.
func removeWorktree(root, src string) error {
	ctx := context.Background()
	_, errRemove := git(ctx, root, "worktree", "remove", "--force", src)
	_, errPrune := git(ctx, root, "worktree", "prune")
	if err := errors.Join(errRemove, errPrune); err != nil {
		return fmt.Errorf("removing the worktree %s: %w", src, err)
	}
	return nil
}

// oldAgentImageRef is the reference of an old release's agent image: the
// agent under test's repository, tagged OldAgentImageTag.
func oldAgentImageRef() (string, error) {
	tag, err := name.NewTag(agentImageRef)
	if err != nil {
		return "", fmt.Errorf("parsing the agent image reference %s: %w", agentImageRef, err)
	}
	return tag.Context().Tag(OldAgentImageTag).String(), nil
}

// oldAgentImage is the image of an old release's agent binary under ref:
// the agent image under test in every other respect (user, entrypoint).
func oldAgentImage(ref, binary string) (Image, error) {
	for _, s := range testImageSpecs {
		if s.img.Ref == agentImageRef {
			img := s.img
			img.Ref, img.Binary = ref, binary
			img.Entrypoint, img.Env = slices.Clone(img.Entrypoint), slices.Clone(img.Env)
			return img, nil
		}
	}
	return Image{}, fmt.Errorf("no test image %s to base the old agent's image on", agentImageRef)
}
