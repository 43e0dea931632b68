// Command gendocs writes the kubectl offload CLI reference as Markdown, one
// file per command, into the directory given as its argument.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra/doc"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-offload/kubectl-offload/internal/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendocs DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	old, _ := filepath.Glob(filepath.Join(dir, "kubectl_offload*.md"))
	for _, f := range old {
		_ = os.Remove(f)
	}
	root := cli.NewRootCmd(genericiooptions.NewTestIOStreamsDiscard())
	root.DisableAutoGenTag = true
	// The default for --cache-dir is the home directory of whoever runs this.
	if f := root.PersistentFlags().Lookup("cache-dir"); f != nil {
		f.DefValue = "$HOME/.kube/cache"
	}
	link := func(name string) string { return strings.ToLower(name) }
	if err := doc.GenMarkdownTreeCustom(root, dir, func(string) string { return "" }, link); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
