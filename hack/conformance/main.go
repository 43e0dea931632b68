// Command conformance is the Go half of `make conformance` (hack/conformance.sh):
// it builds the test images the upstream e2e suite's pod tests run, and runs
// the suite's selected [Conformance] tests against a consumer cluster whose
// every e2e namespace it offloads with strategy Remote, so that each test pod
// runs on the virtual node, and for real on the provider's real node. It
// prints passed, failed and skipped, each failure, and each exclusion with
// its reason.
//
//	conformance images -busybox FILE -bash FILE -agnhost FILE -nonewprivs FILE -e2e FILE -dir DIR
//	conformance run -kubeconfig FILE -offload BIN -e2e BIN -results DIR [-shards N] [-focus REGEXP]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: conformance images|run [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	switch args[0] {
	case "images":
		var src imageSources
		fs.StringVar(&src.Busybox, "busybox", "", "Debian's static busybox binary.")
		fs.StringVar(&src.Bash, "bash", "", "Debian's static bash binary.")
		fs.StringVar(&src.Agnhost, "agnhost", "", "The static agnhost binary.")
		fs.StringVar(&src.Nonewprivs, "nonewprivs", "", "The static nonewprivs binary (nnp).")
		e2eTest := fs.String("e2e", "", "The e2e.test binary whose images to build (e2e.test --list-images names them).")
		dir := fs.String("dir", "", "Directory of the image archives.")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if src.Busybox == "" || src.Bash == "" || src.Agnhost == "" || src.Nonewprivs == "" || *e2eTest == "" || *dir == "" {
			return errors.New("images needs -busybox, -bash, -agnhost, -nonewprivs, -e2e and -dir")
		}
		refs, err := readSuiteRefs(ctx, *e2eTest)
		if err != nil {
			return err
		}
		archives, err := buildImages(ctx, src, refs, *dir)
		if err != nil {
			return err
		}
		fmt.Println(strings.Join(archives, ","))
		return nil
	case "run":
		var o runOptions
		fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Kubeconfig of the consumer cluster.")
		fs.StringVar(&o.offload, "offload", "", "The kubectl-offload binary.")
		fs.StringVar(&o.e2e, "e2e", "", "The e2e.test binary of k8s.io/kubernetes/test/e2e.")
		fs.StringVar(&o.results, "results", "", "Directory of the reports and logs.")
		fs.IntVar(&o.shards, "shards", 4, "How many e2e.test processes, one test each, run at once.")
		fs.StringVar(&o.focus, "focus", "", "Run only the selected tests this regular expression matches (for debugging one test).")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if o.kubeconfig == "" || o.offload == "" || o.e2e == "" || o.results == "" {
			return errors.New("run needs -kubeconfig, -offload, -e2e and -results")
		}
		return o.run(ctx)
	}
	return fmt.Errorf("unknown action %q: use images or run", args[0])
}
