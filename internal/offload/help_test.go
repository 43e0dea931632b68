package offload

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func TestHelpShowsKubectlOffloadExamples(t *testing.T) {
	for _, args := range [][]string{{"namespace", "--help"}, {"unoffload", "namespace", "--help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			root := &cobra.Command{Use: "kubectl-offload", Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl offload"}}
			root.AddCommand(NewCmdNamespace(testFactory{}, genericiooptions.NewTestIOStreamsDiscard()), NewCmdUnoffload(testFactory{}, genericiooptions.NewTestIOStreamsDiscard()))
			var out strings.Builder
			root.SetOut(&out)
			root.SetArgs(args)
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			usage := "kubectl offload " + strings.Join(args[:len(args)-1], " ") + " NS"
			for _, want := range []string{usage, "Examples:", "  kubectl offload " + args[0], "--wait", "--timeout"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("--help lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}
