package images

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

func TestImagesAreBuiltFromStaticBinaries(t *testing.T) {
	archives, err := TestImages(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		ref        string
		binary     string
		entrypoint []string
		user       string
	}{
		{ref: pauseImageRef, binary: "pause", entrypoint: []string{"/pause"}},
		{ref: agentImageRef, binary: "offload-agent", entrypoint: []string{"/offload-agent"}, user: "65532:65532"},
		{ref: testAppImageRef, binary: "testapp", entrypoint: []string{"/testapp"}, user: "65532:65532"},
		{ref: CoreDNSImageRef, binary: "coredns", entrypoint: []string{"/coredns"}, user: "65532:65532"},
	}
	if len(archives) != len(tests) {
		t.Errorf("TestImages built %v, want %d images", archives, len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.binary, func(t *testing.T) {
			path, ok := archives[tt.ref]
			if !ok {
				t.Fatalf("TestImages did not build %s: %v", tt.ref, archives)
			}
			tag, err := name.NewTag(tt.ref)
			if err != nil {
				t.Fatal(err)
			}
			img, err := tarball.ImageFromPath(path, &tag)
			if err != nil {
				t.Fatalf("the archive of %s does not load: %v", tt.ref, err)
			}
			cfg, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			c := cfg.Config
			if !slices.Equal(c.Entrypoint, tt.entrypoint) || c.User != tt.user || cfg.OS != "linux" || cfg.Architecture == "" {
				t.Errorf("config = entrypoint %q user %q platform %s/%s, want entrypoint %q user %q on linux",
					c.Entrypoint, c.User, cfg.OS, cfg.Architecture, tt.entrypoint, tt.user)
			}
			layers, err := img.Layers()
			if err != nil || len(layers) != 1 {
				t.Fatalf("image has layers %v (%v), want one", layers, err)
			}
			files := imageLayerFiles(t, layers[0])
			if h := files["tmp/"].hdr; h == nil || h.Typeflag != tar.TypeDir || h.Mode != 0o1777 {
				t.Errorf("layer has /tmp as %+v, want an empty dir with mode 1777", h)
			}
			bin := files[tt.binary]
			if bin.hdr == nil || bin.hdr.Mode != 0o755 || bin.hdr.Uid != 0 {
				t.Fatalf("layer has /%s as %+v, want an executable owned by root; files %v", tt.binary, bin.hdr, slices.Collect(maps.Keys(files)))
			}
			if len(files) != 2 {
				t.Errorf("layer holds %v, want only /tmp and /%s", slices.Collect(maps.Keys(files)), tt.binary)
			}
			assertStaticELF(t, bin.data)
			archiveSize, _ := imageFileSize(path)
			t.Logf("%s: archive %s, binary %.1f MiB, archive %.1f MiB", tt.ref, filepath.Base(path), imageMiB(int64(len(bin.data))), imageMiB(archiveSize))
		})
	}

	again, err := TestImages(t.Context())
	if err != nil || fmt.Sprint(again) != fmt.Sprint(archives) {
		t.Errorf("a second TestImages = %v, %v; want the same archives", again, err)
	}
}

func TestBuildImageArchiveIsReproducible(t *testing.T) {
	archives, err := TestImages(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cache, err := tools.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	img := Image{Ref: pauseImageRef, Binary: filepath.Join(cache, "images", "bin", "pause")}
	again := filepath.Join(t.TempDir(), "pause.tar")
	if err := BuildImageArchive(img, again); err != nil {
		t.Fatal(err)
	}
	a, err := os.ReadFile(archives[pauseImageRef])
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(again)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("building the pause archive again gave different bytes (%d vs %d)", len(a), len(b))
	}
}

func TestBuildImageArchiveRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		img  Image
	}{
		{name: "an invalid reference", img: Image{Ref: "Not A Ref", Binary: bin}},
		{name: "a missing binary", img: Image{Ref: "registry.local/x:y", Binary: filepath.Join(dir, "missing")}},
		{name: "a directory as binary", img: Image{Ref: "registry.local/x:y", Binary: dir}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(dir, "out.tar")
			if err := BuildImageArchive(tt.img, out); err == nil {
				t.Error("BuildImageArchive succeeded, want an error")
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed build left %s behind (%v)", out, err)
			}
		})
	}
}

type imageLayerFile struct {
	hdr  *tar.Header
	data []byte
}

func imageLayerFiles(t *testing.T, layer interface {
	Uncompressed() (io.ReadCloser, error)
}) map[string]imageLayerFile {
	t.Helper()
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]imageLayerFile{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("reading the layer: %v", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s from the layer: %v", hdr.Name, err)
		}
		files[hdr.Name] = imageLayerFile{hdr: hdr, data: data}
	}
}

// assertStaticELF checks that b is a Linux executable that needs no dynamic
// loader or shared library: it runs in an image with nothing else.
func assertStaticELF(t *testing.T, b []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the binary is not ELF: %v", err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary needs a dynamic loader: build it with CGO_ENABLED=0")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
}

func imageFileSize(path string) (int64, error) {
	info, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return info.Size(), nil
}

func imageMiB(n int64) float64 { return float64(n) / (1 << 20) }
