// Command volumehelper is the helper pod of the local clusters'
// local-path-provisioner, in place of the busybox shell scripts its
// upstream manifest runs: the provisioner's config names it as its
// setupCommand and teardownCommand, and runs it on the volume's node as
//
//	/volumehelper -p DIR -s SIZE_BYTES -m Filesystem|Block -a create|delete
//
// with DIR's parent mounted from the host. "create" makes DIR with mode
// 0777, so that pods of any user can write to it (the upstream script's
// mkdir -m 0777 -p); "delete" removes DIR and everything in it (rm -rf).
// Build it static (CGO_ENABLED=0); the image holds nothing else.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
}

// run makes or removes the volume directory, as args say.
func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("volumehelper", flag.ContinueOnError)
	dir := fs.String("p", "", "The volume's directory, absolute.")
	// The provisioner also passes the size and the volume mode; a host
	// directory has no size, and only Filesystem volumes are provisioned.
	fs.Int64("s", 0, "The requested size in bytes (ignored).")
	fs.String("m", "", "The volume mode (ignored).")
	action := fs.String("a", "", "create or delete.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !filepath.IsAbs(*dir) || filepath.Clean(*dir) == "/" {
		return fmt.Errorf("-p %q: want the volume's absolute directory, below /", *dir)
	}
	switch *action {
	case "create":
		if err := os.MkdirAll(*dir, 0o777); err != nil {
			return err
		}
		// MkdirAll's mode is subject to the umask.
		if err := os.Chmod(*dir, 0o777); err != nil {
			return err
		}
		fmt.Fprintf(out, "created %s\n", *dir)
	case "delete":
		if err := os.RemoveAll(*dir); err != nil {
			return err
		}
		fmt.Fprintf(out, "deleted %s\n", *dir)
	default:
		return errors.New("-a: want create or delete")
	}
	return nil
}
