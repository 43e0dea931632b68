package images

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// RootfsEntry is one entry of a RootfsImage's only layer: a directory, a
// symbolic link, a copy of a file of this machine, or literal content.
type RootfsEntry struct {
	// Path is where the entry goes in the image, relative or absolute:
	// "bin/sh" and "/bin/sh" are the same. Parent directories are added.
	Path string
	// Dir makes the entry a directory.
	Dir bool
	// Link makes the entry a symbolic link to Link.
	Link string
	// Source makes the entry a copy of this regular file of this machine.
	Source string
	// Content makes the entry a regular file with these bytes.
	Content []byte
	// Mode is the mode bits, set-user-ID included; 0755 for directories and copies, 0644
	// for content when zero.
	Mode int64
}

// RootfsImage describes an image whose one layer holds several files, such
// as a shell and its tools, unlike Image's single binary.
type RootfsImage struct {
	// Refs are the references the archive carries, each with a registry
	// host; containerd imports the image under every one of them.
	Refs []string
	// Entries are the layer's content; later entries replace earlier ones
	// at the same path.
	Entries []RootfsEntry
	// Entrypoint and Cmd are the config's; both may be empty.
	Entrypoint, Cmd []string
	// User is the config's user; root when empty.
	User string
	// Env is the config's environment, as KEY=value.
	Env []string
}

// RootfsImageArchive returns the docker-archive of img in dir, building it
// with BuildRootfsImageArchive unless an archive of the same content is
// there already: the archive's name is prefix plus a hash of img and of the
// files it copies.
func RootfsImageArchive(img RootfsImage, dir, prefix string) (string, error) {
	key, err := rootfsCacheKey(img)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating image dir: %w", err)
	}
	archive := filepath.Join(dir, prefix+"-"+key+".tar")
	if _, err := os.Stat(archive); err == nil {
		return archive, nil
	}
	if err := BuildRootfsImageArchive(img, archive); err != nil {
		return "", err
	}
	removeStaleImageArchives(dir, prefix, archive)
	return archive, nil
}

// BuildRootfsImageArchive writes a docker-archive tarball of img, loadable
// by `ctr images import`, to path, through a temporary file that it renames.
// The archive is reproducible: the same files and RootfsImage give the same
// bytes.
func BuildRootfsImageArchive(img RootfsImage, path string) error {
	if len(img.Refs) == 0 {
		return fmt.Errorf("image archive %s: no reference", path)
	}
	tags := map[name.Reference]v1.Image{}
	var refs []name.Reference
	for _, r := range img.Refs {
		ref, err := name.ParseReference(r)
		if err != nil {
			return fmt.Errorf("parsing image reference %q: %w", r, err)
		}
		refs = append(refs, ref)
	}
	entries, err := rootfsEntries(img.Entries)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Refs[0], err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return rootfsLayer(entries), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return fmt.Errorf("creating the layer of image %s: %w", img.Refs[0], err)
	}
	image, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("adding the layer of image %s: %w", img.Refs[0], err)
	}
	cfg, err := image.ConfigFile()
	if err != nil {
		return fmt.Errorf("reading the config of image %s: %w", img.Refs[0], err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = runtime.GOARCH
	cfg.Created = v1.Time{Time: imageEpoch}
	cfg.Config.Entrypoint = img.Entrypoint
	cfg.Config.Cmd = img.Cmd
	cfg.Config.User = img.User
	cfg.Config.Env = img.Env
	cfg.Config.WorkingDir = "/"
	for i := range cfg.History {
		cfg.History[i].Created = v1.Time{Time: imageEpoch}
		cfg.History[i].CreatedBy = "kubectl-offload test/framework: rootfs"
	}
	// One image value per reference: the archive's manifest then has an
	// entry per reference, which go-containerregistry sorts, where one
	// entry's tags would come in map order and the bytes would vary. The
	// layer, the same digest, is written once.
	for _, ref := range refs {
		if tags[ref], err = mutate.ConfigFile(image, cfg); err != nil {
			return fmt.Errorf("setting the config of image %s: %w", img.Refs[0], err)
		}
	}

	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating image archive %s: %w", path, err)
	}
	tmp.Close()
	defer func() { _ = os.Remove(tmp.Name()) }() // No-op after the rename.
	if err := tarball.MultiRefWriteToFile(tmp.Name(), tags); err != nil {
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

// rootfsEntries cleans the entries' paths, keeps the last entry of each
// path, adds missing parent directories, checks that each entry is one
// kind, and sorts them by path, so that parents come first.
func rootfsEntries(in []RootfsEntry) ([]RootfsEntry, error) {
	byPath := map[string]RootfsEntry{}
	for _, e := range in {
		p := strings.TrimPrefix(filepath.ToSlash(filepath.Clean("/"+e.Path)), "/")
		if p == "" {
			return nil, fmt.Errorf("entry %q: not a path below /", e.Path)
		}
		kinds := 0
		for _, set := range []bool{e.Dir, e.Link != "", e.Source != "", e.Content != nil} {
			if set {
				kinds++
			}
		}
		if kinds > 1 {
			return nil, fmt.Errorf("entry %s: set only one of Dir, Link, Source and Content", p)
		}
		if kinds == 0 {
			e.Content = []byte{}
		}
		if e.Source != "" {
			info, err := os.Stat(e.Source)
			if err != nil {
				return nil, fmt.Errorf("entry %s: %w", p, err)
			}
			if !info.Mode().IsRegular() {
				return nil, fmt.Errorf("entry %s: %s is not a regular file", p, e.Source)
			}
		}
		e.Path = p
		byPath[p] = e
		for dir := filepath.Dir(p); dir != "."; dir = filepath.Dir(dir) {
			if _, ok := byPath[dir]; !ok {
				byPath[dir] = RootfsEntry{Path: dir, Dir: true}
			}
		}
	}
	out := make([]RootfsEntry, 0, len(byPath))
	for _, e := range byPath {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b RootfsEntry) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// rootfsLayer streams the uncompressed layer of entries. It is read more
// than once (for its digests, then to write it), so each call opens the
// sources afresh.
func rootfsLayer(entries []RootfsEntry) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		var err error
		for _, e := range entries {
			if err = writeRootfsEntry(tw, e); err != nil {
				break
			}
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err) // A nil error closes with io.EOF.
	}()
	return pr
}

func writeRootfsEntry(tw *tar.Writer, e RootfsEntry) error {
	h := &tar.Header{Name: e.Path, Mode: e.Mode, ModTime: imageEpoch}
	switch {
	case e.Dir:
		h.Typeflag, h.Name = tar.TypeDir, e.Path+"/"
		if h.Mode == 0 {
			h.Mode = 0o755
		}
		return tw.WriteHeader(h)
	case e.Link != "":
		h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.Link, 0o777
		return tw.WriteHeader(h)
	case e.Source != "":
		f, err := os.Open(e.Source)
		if err != nil {
			return err
		}
		defer f.Close()
		info, err := f.Stat()
		if err != nil {
			return err
		}
		h.Typeflag, h.Size = tar.TypeReg, info.Size()
		if h.Mode == 0 {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	default:
		h.Typeflag, h.Size = tar.TypeReg, int64(len(e.Content))
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(e.Content)
		return err
	}
}

// rootfsCacheKey hashes what goes into the archive of img: its description
// and the content of every file it copies.
func rootfsCacheKey(img RootfsImage) (string, error) {
	h := sha256.New()
	spec, err := json.Marshal(struct {
		Format string
		RootfsImage
	}{imageFormat, img})
	if err != nil {
		return "", err
	}
	h.Write(spec)
	for _, e := range img.Entries {
		if e.Source == "" {
			continue
		}
		f, err := os.Open(e.Source)
		if err != nil {
			return "", fmt.Errorf("hashing the files of image %v: %w", img.Refs, err)
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("hashing the files of image %v: %w", img.Refs, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
