package version

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/kubectl-offload/kubectl-offload/internal/buildinfo"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var reportType = metav1.TypeMeta{APIVersion: "offload.io/v1alpha1", Kind: "VersionReport"}

// Report is what `kubectl offload version` prints. Its JSON form is a
// scripting contract: fields are only ever added.
type Report struct {
	metav1.TypeMeta `json:",inline"`
	// Client is the build of the kubectl-offload binary.
	Client buildinfo.Info `json:"client"`
	// Server is what the current cluster runs; absent when it was not asked or not reachable.
	Server *Server `json:"server,omitempty"`
}

// Server describes the versions installed in a cluster.
type Server struct {
	// Kubernetes is the API server's version.
	Kubernetes string `json:"kubernetesVersion"`
	// Installed says whether the offload chart is installed.
	Installed bool `json:"installed"`
	// Chart is the installed chart's version.
	Chart string `json:"chartVersion,omitempty"`
	// Agent is the version of the running offload-agent.
	Agent string `json:"agentVersion,omitempty"`
}

func (r Report) table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "Client Version:\t%s\n", r.Client.Version)
	fmt.Fprintf(tw, "Commit:\t%s\n", r.Client.Commit)
	fmt.Fprintf(tw, "Build Date:\t%s\n", r.Client.BuildDate)
	fmt.Fprintf(tw, "Go:\t%s %s\n", r.Client.GoVersion, r.Client.Platform)
	if s := r.Server; s != nil {
		fmt.Fprintf(tw, "Kubernetes Version:\t%s\n", s.Kubernetes)
		fmt.Fprintf(tw, "Chart Version:\t%s\n", orNotInstalled(s.Chart))
		fmt.Fprintf(tw, "Agent Version:\t%s\n", orNotInstalled(s.Agent))
	}
	return tw.Flush()
}

func orNotInstalled(s string) string {
	if s == "" {
		return "not installed"
	}
	return s
}
