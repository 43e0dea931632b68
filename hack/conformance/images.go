package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kubectl-offload/kubectl-offload/test/framework/images"
)

// suiteRefs are the references of the images the pods of the selected
// tests run, as the pinned e2e.test names them (e2e.test --list-images,
// from k8s.io/kubernetes/test/utils/image/manifest.go, with the suite's
// default registries): read from the binary, so that a new Kubernetes
// version brings its own tags. The real nodes import the images under
// these names, and the tests' pods use pull policy IfNotPresent, so no
// registry is ever asked.
type suiteRefs struct {
	// Busybox, Agnhost and Nonewprivs hold every tag the suite names (the
	// suite's "previous" agnhost, AgnhostPrev, included): one image
	// serves them all.
	Busybox, Agnhost, Nonewprivs []string
	// Pause is the suite's pause image.
	Pause []string
}

// e2eRegistry and pauseRepository are where the suite's images come from.
const (
	e2eRegistry     = "registry.k8s.io/e2e-test-images/"
	pauseRepository = "registry.k8s.io/pause:"
)

// readSuiteRefs runs e2eTest --list-images and picks the references of
// the images buildImages makes.
func readSuiteRefs(ctx context.Context, e2eTest string) (suiteRefs, error) {
	out, err := exec.CommandContext(ctx, e2eTest, "--list-images").Output()
	if err != nil {
		return suiteRefs{}, fmt.Errorf("listing the images of %s: %w", e2eTest, err)
	}
	return parseSuiteRefs(string(out))
}

// parseSuiteRefs picks, from the output of e2e.test --list-images, the
// references of the images buildImages makes; it fails when one is missing.
func parseSuiteRefs(list string) (suiteRefs, error) {
	var r suiteRefs
	for _, ref := range strings.Fields(list) {
		switch {
		case strings.HasPrefix(ref, e2eRegistry+"busybox:"):
			r.Busybox = append(r.Busybox, ref)
		case strings.HasPrefix(ref, e2eRegistry+"agnhost:"):
			r.Agnhost = append(r.Agnhost, ref)
		case strings.HasPrefix(ref, e2eRegistry+"nonewprivs:"):
			r.Nonewprivs = append(r.Nonewprivs, ref)
		case strings.HasPrefix(ref, pauseRepository):
			r.Pause = append(r.Pause, ref)
		}
	}
	for name, refs := range map[string][]string{"busybox": r.Busybox, "agnhost": r.Agnhost, "nonewprivs": r.Nonewprivs, "pause": r.Pause} {
		if len(refs) == 0 {
			return suiteRefs{}, fmt.Errorf("e2e.test --list-images names no %s image", name)
		}
	}
	return r, nil
}

// curlShim is the agnhost image's curl, which busybox lacks and the
// upstream image has: the suite's hooks and probes run `curl URL` (with
// flags such as -s or -g) for a GET, which busybox's wget does. Any other
// use fails, saying so.
const curlShim = `#!/bin/sh
url=
for a in "$@"; do
  case "$a" in
    -X|-d|--data*|-H|-F|-T|-o|--output) echo "this image's curl only GETs a URL to stdout (busybox wget): $a is not supported" >&2; exit 2 ;;
    -*) ;;
    *) url=$a ;;
  esac
done
exec wget -q -O - "$url"
`

// imagePath is the images' PATH, as in the upstream busybox image: the
// runtime sets none of its own.
const imagePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// passwd and group are the images' /etc/passwd and /etc/group.
const (
	passwd = "root:x:0:0:root:/root:/bin/sh\ndaemon:x:1:1:daemon:/usr/sbin:/bin/false\nnobody:x:65534:65534:nobody:/home:/bin/false\n"
	group  = "root:x:0:\ndaemon:x:1:\nnogroup:x:65534:\n"
)

// imageSources are the files the images are made of.
type imageSources struct {
	// Busybox is Debian's busybox-static binary, the image's tools.
	Busybox string
	// Bash is Debian's bash-static binary, the image's /bin/sh: unlike
	// busybox's ash, it keeps environment variables whose names are not
	// shell identifiers (data-1), which the ConfigMap and Secret tests
	// read back with env.
	Bash string
	// Agnhost is k8s.io/kubernetes/test/images/agnhost, built statically.
	Agnhost string
	// Nonewprivs is k8s.io/kubernetes/test/images/nonewprivs, built
	// statically: it prints its effective user ID.
	Nonewprivs string
}

// buildImages writes the archives of the busybox, agnhost, nonewprivs and
// pause images into dir (kept when their content has not changed) and returns
// their paths.
func buildImages(ctx context.Context, src imageSources, refs suiteRefs, dir string) ([]string, error) {
	base, err := busyboxRootfs(ctx, src)
	if err != nil {
		return nil, err
	}
	busybox, err := images.RootfsImageArchive(images.RootfsImage{
		Refs: refs.Busybox, Entries: base, Cmd: []string{"sh"}, Env: []string{imagePath},
	}, dir, "e2e-busybox")
	if err != nil {
		return nil, err
	}
	// agnhost's tests also run shell commands in its containers, as in the
	// upstream image, which has a shell and the usual tools. As there, the
	// image runs "/agnhost pause" by default, has /agnhost-2 and /uploads,
	// and defines a user and a group (test/images/agnhost/Dockerfile).
	agnhost, err := images.RootfsImageArchive(images.RootfsImage{
		Refs: refs.Agnhost,
		Entries: append(slices.Clip(base),
			images.RootfsEntry{Path: "agnhost", Source: src.Agnhost},
			images.RootfsEntry{Path: "agnhost-2", Link: "agnhost"},
			images.RootfsEntry{Path: "uploads", Dir: true},
			images.RootfsEntry{Path: "usr/bin/curl", Content: []byte(curlShim), Mode: 0o755},
			images.RootfsEntry{Path: "etc/passwd", Content: []byte(passwd + "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")},
			images.RootfsEntry{Path: "etc/group", Content: []byte(group + "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n")},
		),
		Entrypoint: []string{"/agnhost"},
		Cmd:        []string{"pause"},
		Env:        []string{imagePath},
	}, dir, "e2e-agnhost")
	if err != nil {
		return nil, err
	}
	// As upstream: nnp is set-user-ID root, so that it runs as root unless
	// the container forbids privilege escalation.
	nnp, err := images.RootfsImageArchive(images.RootfsImage{
		Refs:    refs.Nonewprivs,
		Entries: append(slices.Clip(base), images.RootfsEntry{Path: "usr/local/bin/nnp", Source: src.Nonewprivs, Mode: 0o4755}),
		Cmd:     []string{"nnp"},
		Env:     []string{imagePath},
	}, dir, "e2e-nonewprivs")
	if err != nil {
		return nil, err
	}
	pauseBin, err := images.BuildGoBinary(ctx, "./test/images/pause", filepath.Join(dir, "bin"), "-s -w")
	if err != nil {
		return nil, err
	}
	pause, err := images.RootfsImageArchive(images.RootfsImage{
		Refs: refs.Pause, Entries: []images.RootfsEntry{{Path: "pause", Source: pauseBin}}, Entrypoint: []string{"/pause"},
	}, dir, "e2e-pause")
	if err != nil {
		return nil, err
	}
	return []string{busybox, agnhost, nnp, pause}, nil
}

// busyboxRootfs lays out a busybox image: every applet as a link to
// /bin/busybox, in /bin and where busybox installs it; bash as /bin/sh and
// /bin/bash; and the directories and /etc files of the upstream image.
func busyboxRootfs(ctx context.Context, src imageSources) ([]images.RootfsEntry, error) {
	out, err := exec.CommandContext(ctx, src.Busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("listing the applets of %s: %w", src.Busybox, err)
	}
	entries := []images.RootfsEntry{
		{Path: "bin/busybox", Source: src.Busybox},
		{Path: "tmp", Dir: true, Mode: 0o1777},
		{Path: "root", Dir: true, Mode: 0o700},
		{Path: "home", Dir: true},
		{Path: "var/spool/mail", Dir: true},
		{Path: "var/www", Dir: true},
		{Path: "etc/passwd", Content: []byte(passwd)},
		{Path: "etc/group", Content: []byte(group)},
		{Path: "etc/nsswitch.conf", Content: []byte("hosts: files dns\n")},
	}
	for _, applet := range strings.Fields(string(out)) {
		switch filepath.Base(applet) {
		case "busybox", "sh", "bash": // The binary itself, and bash's names.
			continue
		}
		// As in the upstream image every applet is in /bin (the tests run
		// /bin/sysctl), and also where Debian's busybox installs it.
		entries = append(entries,
			images.RootfsEntry{Path: "bin/" + filepath.Base(applet), Link: "/bin/busybox"},
			images.RootfsEntry{Path: applet, Link: "/bin/busybox"})
	}
	return append(entries,
		images.RootfsEntry{Path: "bin/bash", Source: src.Bash},
		images.RootfsEntry{Path: "bin/sh", Link: "bash"},
	), nil
}
