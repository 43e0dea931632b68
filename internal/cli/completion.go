package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

const completionLong = `Print a shell completion script for kubectl offload.

As a kubectl plugin, kubectl completes "kubectl offload …" through the
kubectl_complete-offload helper shipped next to the binary: put both on PATH.
Used standalone, load the script printed here for the kubectl-offload binary.`

const completionExample = `  # Bash, for the current shell
  source <(kubectl offload completion bash)

  # Zsh, permanently
  kubectl offload completion zsh > "${fpath[1]}/_kubectl-offload"

  # Fish
  kubectl offload completion fish | source`

func newCmdCompletion(root *cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:                   "completion bash|zsh|fish|powershell",
		Short:                 "Print a shell completion script",
		Long:                  completionLong,
		Example:               completionExample,
		DisableFlagsInUseLine: true,
		ValidArgs:             []string{"bash", "zsh", "fish", "powershell"},
		Args:                  cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(out, true)
			case "zsh":
				return root.GenZshCompletion(out)
			case "fish":
				return root.GenFishCompletion(out, true)
			case "powershell":
				return root.GenPowerShellCompletionWithDesc(out)
			}
			return fmt.Errorf("unsupported shell %q", args[0])
		},
	}
	return cmd
}
