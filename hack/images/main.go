// Command images builds the test images (pause, offload-agent, testapp) as
// docker-archive tarballs, for `ctr -n k8s.io images import` on a node
// without a registry:
//
//	go run ./hack/images OUTDIR
//
// It writes OUTDIR/<name>.tar for each image and prints "ref path" lines.
// The archives come from the content-addressed cache of test/framework
// (.cache/images), so a second run only copies them.
package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/kubectl-offload/kubectl-offload/test/framework/images"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "Usage: go run ./hack/images OUTDIR")
		return 2
	}
	if err := writeImages(ctx, args[0], stdout); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	return 0
}

func writeImages(ctx context.Context, outDir string, stdout io.Writer) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("creating output dir: %w", err)
	}
	archives, err := images.TestImages(ctx)
	if err != nil {
		return fmt.Errorf("building the test images: %w", err)
	}
	for _, ref := range slices.Sorted(maps.Keys(archives)) {
		base, _, _ := strings.Cut(path.Base(ref), ":")
		dst := filepath.Join(outDir, base+".tar")
		if err := copyFile(archives[ref], dst); err != nil {
			return fmt.Errorf("writing the archive of %s: %w", ref, err)
		}
		fmt.Fprintf(stdout, "%s %s\n", ref, dst)
	}
	return nil
}

// copyFile copies src to dst through a temporary file, so dst is never half
// written.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // No-op after the rename.
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
