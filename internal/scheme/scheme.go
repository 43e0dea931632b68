// Package scheme holds the runtime.Scheme shared by the CLI and the agent:
// the built-in Kubernetes types plus the offload.io API.
package scheme

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// Scheme knows every type kubectl-offload and offload-agent read or write.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(Scheme))
	utilruntime.Must(offloadv1alpha1.AddToScheme(Scheme))
}
