// Package images builds the OCI image archives the real nodes import
// (the agent, the test application, pause, CoreDNS, ServiceLB,
// metrics-server, local-path-provisioner and its volume helper) from the
// repository and the module proxy, with no registry, and the agent of the
// release before issue 27 from the repository's history.
package images

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

// The references of the standard test images TestImages builds.
const (
	pauseImageRef   = "registry.local/offload/pause:test"
	agentImageRef   = "registry.local/offload/offload-agent:test"
	testAppImageRef = "registry.local/offload/testapp:test"
	CoreDNSImageRef = "registry.local/offload/coredns:test"
	// ServiceLBImageRef is the svclb containers' image of k3s-flavoured
	// clusters (ServiceLBImage).
	ServiceLBImageRef = "registry.local/offload/servicelb:test"
)

// NonRootUser is the "nonroot" user of distroless images.
const NonRootUser = "65532:65532"

// imageFormat is mixed into the cache key of archives: bump it when
// BuildImageArchive changes what it writes.
const imageFormat = "v1"

// imageEpoch is the time stamped on image files and configs, so that the same
// binary always gives the same image digest.
var imageEpoch = time.Unix(0, 0).UTC()

// Image describes an image built from one static Go binary.
type Image struct {
	// Ref is the image reference, with a registry host so that containerd
	// does not prefix docker.io: "registry.local/offload/pause:test".
	Ref string
	// Binary is the path of the binary; the image holds it at /<basename>.
	Binary string
	// Entrypoint is the config's entrypoint; ["/<basename>"] when empty.
	Entrypoint []string
	// User is the config's user, for example "65532:65532"; root when empty.
	User string
	// Env is the config's environment, as KEY=value.
	Env []string
}

// BuildImageArchive writes a docker-archive tarball (loadable by `ctr images
// import`) with one layer holding the binary at /<basename>, plus /tmp as an
// empty dir, and config Entrypoint/User/Env, to path. It writes a temporary
// file next to path and renames it, so readers never see half an archive.
// The archive is reproducible: the same binary and Image give the same bytes.
func BuildImageArchive(img Image, path string) error {
	ref, err := name.ParseReference(img.Ref)
	if err != nil {
		return fmt.Errorf("parsing image reference %q: %w", img.Ref, err)
	}
	info, err := os.Stat(img.Binary)
	if err != nil {
		return fmt.Errorf("reading the binary of image %s: %w", img.Ref, err)
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("binary %s of image %s is not a regular file", img.Binary, img.Ref)
	}
	base := filepath.Base(img.Binary)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return binaryImageLayer(img.Binary, base)
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return fmt.Errorf("creating the layer of image %s: %w", img.Ref, err)
	}
	image, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("adding the layer of image %s: %w", img.Ref, err)
	}
	cfg, err := image.ConfigFile()
	if err != nil {
		return fmt.Errorf("reading the config of image %s: %w", img.Ref, err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = runtime.GOARCH
	cfg.Created = v1.Time{Time: imageEpoch}
	cfg.Config.Entrypoint = img.Entrypoint
	if len(cfg.Config.Entrypoint) == 0 {
		cfg.Config.Entrypoint = []string{"/" + base}
	}
	cfg.Config.User = img.User
	cfg.Config.Env = img.Env
	cfg.Config.WorkingDir = "/"
	for i := range cfg.History {
		cfg.History[i].Created = v1.Time{Time: imageEpoch}
		cfg.History[i].CreatedBy = "kubectl-offload test/framework: " + base
	}
	if image, err = mutate.ConfigFile(image, cfg); err != nil {
		return fmt.Errorf("setting the config of image %s: %w", img.Ref, err)
	}

	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating image archive %s: %w", path, err)
	}
	tmp.Close()
	defer func() { _ = os.Remove(tmp.Name()) }() // No-op after the rename.
	if err := tarball.WriteToFile(tmp.Name(), ref, image); err != nil {
		return fmt.Errorf("writing image archive %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("writing image archive %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing image archive %s: %w", path, err)
	}
	return nil
}

// binaryImageLayer streams an uncompressed layer holding /tmp and the binary at
// /<base>. The layer is read more than once (for its digests, then to write
// it), so each call opens the binary afresh.
func binaryImageLayer(binary, base string) (io.ReadCloser, error) {
	f, err := os.Open(binary)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		defer f.Close()
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: imageEpoch,
		})
		if err == nil {
			err = tw.WriteHeader(&tar.Header{
				Typeflag: tar.TypeReg, Name: base, Mode: 0o755, Size: info.Size(), ModTime: imageEpoch,
			})
		}
		if err == nil {
			_, err = io.Copy(tw, f)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err) // A nil error closes with io.EOF.
	}()
	return pr, nil
}

// BuildGoBinary builds a Go main package of this repo statically
// (CGO_ENABLED=0, -trimpath, extra ldflags optional) into dir and returns the
// path. pkg is relative to the repository root, as "./cmd/offload-agent";
// the binary is named after its last element. It builds for linux on this
// machine's architecture, without VCS stamping (-buildvcs=false), so the
// binary depends only on the sources and needs no git. The go command skips
// the link when the binary in dir is already up to date.
func BuildGoBinary(ctx context.Context, pkg, dir string, ldflags string) (string, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating binary dir: %w", err)
	}
	out, err := filepath.Abs(filepath.Join(dir, path.Base(pkg)))
	if err != nil {
		return "", err
	}
	if err := goBuild(ctx, root, pkg, out, ldflags); err != nil {
		return "", err
	}
	return out, nil
}

// goBuild builds main package pkg of the module in dir into out: static,
// for linux on this machine's architecture, without VCS stamping, with
// ldflags unless empty, and with env added to the go command's
// environment.
func goBuild(ctx context.Context, dir, pkg, out, ldflags string, env ...string) error {
	args := []string{"build", "-trimpath", "-buildvcs=false", "-o", out}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// testImageSpecs are the images TestImages builds, by the package of their
// binary, or the pinned tool (hack/tools.sh) that is their binary.
var testImageSpecs = []struct {
	pkg, tool string
	img       Image
}{
	{pkg: "./test/images/pause", img: Image{Ref: pauseImageRef}},
	{pkg: "./cmd/offload-agent", img: Image{Ref: agentImageRef, User: NonRootUser, Entrypoint: []string{"/offload-agent"}}},
	{pkg: "./test/images/testapp", img: Image{Ref: testAppImageRef, User: NonRootUser}},
	{tool: "coredns", img: Image{Ref: CoreDNSImageRef, User: NonRootUser}},
}

var (
	testImagesOnce sync.Once
	testImages     map[string]string
	testImagesErr  error
)

// TestImages builds (once per process, cached by content in
// <CacheDir()>/images/) the standard test images and returns their archive
// paths, by reference:
//
//	registry.local/offload/pause:test          from ./test/images/pause
//	registry.local/offload/offload-agent:test  from ./cmd/offload-agent, user 65532:65532
//	registry.local/offload/testapp:test        from ./test/images/testapp, user 65532:65532
//	registry.local/offload/coredns:test        from CoreDNS (hack/tools.sh), user 65532:65532
//
// The binaries are rebuilt by the go command (a no-op when warm); an archive
// is rewritten only when its binary or Image changed, and the stale
// archives of that image are removed.
func TestImages(ctx context.Context) (map[string]string, error) {
	testImagesOnce.Do(func() {
		testImages, testImagesErr = buildTestImages(ctx)
	})
	return maps.Clone(testImages), testImagesErr
}

func buildTestImages(ctx context.Context) (map[string]string, error) {
	archives := map[string]string{}
	for _, s := range testImageSpecs {
		archive, err := BuildImage(ctx, s.pkg, s.tool, s.img)
		if err != nil {
			return nil, err
		}
		archives[s.img.Ref] = archive
	}
	return archives, nil
}

// BuildImage builds the image img of the binary of package pkg or of the
// pinned tool, cached by content in <CacheDir()>/images/, and returns the
// path of its archive.
func BuildImage(ctx context.Context, pkg, tool string, img Image) (string, error) {
	cache, err := tools.CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "images")
	bin, err := specBinary(ctx, pkg, tool, filepath.Join(dir, "bin"))
	if err != nil {
		return "", err
	}
	img.Binary = bin
	key, err := imageCacheKey(img)
	if err != nil {
		return "", err
	}
	base := filepath.Base(bin)
	archive := filepath.Join(dir, base+"-"+key+".tar")
	if _, err := os.Stat(archive); err != nil {
		if err := BuildImageArchive(img, archive); err != nil {
			return "", err
		}
		removeStaleImageArchives(dir, base, archive)
	}
	return archive, nil
}

// specBinary is the binary of an image: built from package pkg into dir,
// or the pinned tool.
func specBinary(ctx context.Context, pkg, tool, dir string) (string, error) {
	if tool == "" {
		return BuildGoBinary(ctx, pkg, dir, "-s -w")
	}
	if err := tools.EnsureTools(ctx); err != nil {
		return "", err
	}
	bin, err := tools.BinDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(bin, tool), nil
}

// imageCacheKey hashes what goes into an archive: the binary and the Image.
func imageCacheKey(img Image) (string, error) {
	h := sha256.New()
	spec, err := json.Marshal(struct {
		Format string
		Image
	}{imageFormat, Image{Ref: img.Ref, Entrypoint: img.Entrypoint, User: img.User, Env: img.Env, Binary: filepath.Base(img.Binary)}})
	if err != nil {
		return "", err
	}
	h.Write(spec)
	f, err := os.Open(img.Binary)
	if err != nil {
		return "", fmt.Errorf("hashing the binary of image %s: %w", img.Ref, err)
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing the binary of image %s: %w", img.Ref, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// removeStaleImageArchives removes the archives of image base other than keep
// that are older than a minute, so a concurrent process that just wrote one
// keeps it. Failing to remove one only costs disk space.
func removeStaleImageArchives(dir, base, keep string) {
	old, _ := filepath.Glob(filepath.Join(dir, base+"-*.tar"))
	for _, f := range old {
		if f == keep || strings.Contains(strings.TrimPrefix(filepath.Base(f), base+"-"), "-") {
			continue // Another image whose name starts with base.
		}
		if info, err := os.Stat(f); err == nil && time.Since(info.ModTime()) > time.Minute {
			_ = os.Remove(f)
		}
	}
}

// ImportImages imports archives into the containerd at address (namespace
// k8s.io, the one the kubelet's CRI uses) with `ctr --address <address> -n
// k8s.io images import --all-platforms <archive>`. ctr unpacks them into its
// default snapshotter, overlayfs, or $CONTAINERD_SNAPSHOTTER.
func ImportImages(ctx context.Context, address string, archives ...string) error {
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		return fmt.Errorf("ctr not found: install containerd (apt-get install --no-install-recommends containerd): %w", err)
	}
	for _, a := range archives {
		cmd := exec.CommandContext(ctx, ctr, "--address", address, "-n", "k8s.io", "images", "import", "--all-platforms", a)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("importing image archive %s into containerd at %s: %w\n%s", a, address, err, out)
		}
	}
	return nil
}

// ServiceLBImage builds (cached like TestImages' images) the servicelb
// image of k3s-flavoured clusters, from ./test/images/servicelb, whose
// containers run "servicelb forward" as root, as k3s's klipper-lb does,
// and returns its archive and the binary, which also runs the ServiceLB
// controller on the host.
func ServiceLBImage(ctx context.Context) (archive, binary string, err error) {
	archive, err = BuildImage(ctx, "./test/images/servicelb", "", Image{Ref: ServiceLBImageRef, Entrypoint: []string{"/servicelb", "forward"}})
	if err != nil {
		return "", "", err
	}
	cache, err := tools.CacheDir()
	if err != nil {
		return "", "", err
	}
	return archive, filepath.Join(cache, "images", "bin", "servicelb"), nil
}
