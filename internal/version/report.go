package version

import (
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-offload/kubectl-offload/internal/buildinfo"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
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
	fields := output.Columns{Gap: 1, Rows: [][]string{
		{"Client Version:", r.Client.Version},
		{"Commit:", r.Client.Commit},
		{"Build Date:", r.Client.BuildDate},
		{"Go:", r.Client.GoVersion + " " + r.Client.Platform},
	}}
	if s := r.Server; s != nil {
		fields.Rows = append(fields.Rows,
			[]string{"Kubernetes Version:", s.Kubernetes},
			[]string{"Chart Version:", orNotInstalled(s.Chart)},
			[]string{"Agent Version:", orNotInstalled(s.Agent)})
	}
	return fields.Write(w)
}

func orNotInstalled(s string) string {
	if s == "" {
		return "not installed"
	}
	return s
}
