package images

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestRootfsImageArchiveHoldsEveryEntryUnderEveryReference(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "tool")
	if err := os.WriteFile(tool, []byte("a tool"), 0o755); err != nil {
		t.Fatal(err)
	}
	img := RootfsImage{
		Refs: []string{"registry.example/tools:1", "registry.example/tools:old"},
		Entries: []RootfsEntry{
			{Path: "/bin/tool", Source: tool},
			{Path: "usr/bin/alias", Link: "/bin/tool"},
			{Path: "etc/passwd", Content: []byte("root:x:0:0::/root:/bin/sh\n")},
			{Path: "tmp", Dir: true, Mode: 0o1777},
		},
		Entrypoint: []string{"/bin/tool"},
		Env:        []string{"PATH=/bin"},
	}
	archive, err := RootfsImageArchive(img, filepath.Join(dir, "images"), "tools")
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range img.Refs {
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		image, err := tarball.ImageFromPath(archive, &tag)
		if err != nil {
			t.Fatalf("the archive has no image %s: %v", ref, err)
		}
		cfg, err := image.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cfg.Config.Entrypoint, img.Entrypoint) || !slices.Equal(cfg.Config.Env, img.Env) {
			t.Errorf("%s: entrypoint %q env %q, want %q and %q", ref, cfg.Config.Entrypoint, cfg.Config.Env, img.Entrypoint, img.Env)
		}
		layers, err := image.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s has layers %v (%v), want one", ref, layers, err)
		}
		files := imageLayerFiles(t, layers[0])
		for _, want := range []struct {
			path     string
			typeflag byte
			mode     int64
			data     string
			link     string
		}{
			{path: "bin/", typeflag: tar.TypeDir, mode: 0o755},
			{path: "bin/tool", typeflag: tar.TypeReg, mode: 0o755, data: "a tool"},
			{path: "usr/", typeflag: tar.TypeDir, mode: 0o755},
			{path: "usr/bin/", typeflag: tar.TypeDir, mode: 0o755},
			{path: "usr/bin/alias", typeflag: tar.TypeSymlink, mode: 0o777, link: "/bin/tool"},
			{path: "etc/passwd", typeflag: tar.TypeReg, mode: 0o644, data: "root:x:0:0::/root:/bin/sh\n"},
			{path: "tmp/", typeflag: tar.TypeDir, mode: 0o1777},
		} {
			f, ok := files[want.path]
			if !ok {
				t.Errorf("%s: the layer lacks %s", ref, want.path)
				continue
			}
			if f.hdr.Typeflag != want.typeflag || f.hdr.Mode != want.mode || string(f.data) != want.data || f.hdr.Linkname != want.link {
				t.Errorf("%s: %s is type %c mode %o data %q link %q, want type %c mode %o data %q link %q", ref, want.path,
					f.hdr.Typeflag, f.hdr.Mode, f.data, f.hdr.Linkname, want.typeflag, want.mode, want.data, want.link)
			}
		}
	}

	again, err := RootfsImageArchive(img, filepath.Join(dir, "images"), "tools")
	if err != nil || again != archive {
		t.Errorf("a second RootfsImageArchive = %s, %v; want the cached %s", again, err, archive)
	}
	rebuilt := filepath.Join(dir, "rebuilt.tar")
	if err := BuildRootfsImageArchive(img, rebuilt); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(archive)
	b, _ := os.ReadFile(rebuilt)
	if !bytes.Equal(a, b) {
		t.Error("building the same image again gave different bytes")
	}
}

func TestRootfsImageArchiveRejectsBadEntries(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		img  RootfsImage
	}{
		{"no reference", RootfsImage{Entries: []RootfsEntry{{Path: "a", Content: []byte("a")}}}},
		{"two kinds in one entry", RootfsImage{Refs: []string{"registry.example/a:1"}, Entries: []RootfsEntry{{Path: "a", Dir: true, Link: "b"}}}},
		{"the root as a path", RootfsImage{Refs: []string{"registry.example/a:1"}, Entries: []RootfsEntry{{Path: "/", Dir: true}}}},
		{"a missing source", RootfsImage{Refs: []string{"registry.example/a:1"}, Entries: []RootfsEntry{{Path: "a", Source: filepath.Join(dir, "missing")}}}},
		{"a directory as a source", RootfsImage{Refs: []string{"registry.example/a:1"}, Entries: []RootfsEntry{{Path: "a", Source: dir}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := BuildRootfsImageArchive(tt.img, filepath.Join(dir, "out.tar")); err == nil {
				t.Error("BuildRootfsImageArchive succeeded, want an error")
			}
		})
	}
}
