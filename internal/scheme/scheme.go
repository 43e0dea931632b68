// Package scheme holds the runtime.Scheme shared by the CLI and the agent:
// the built-in Kubernetes types plus the offload.io API.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// Scheme knows every type kubectl-offload and offload-agent read or write.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
}
