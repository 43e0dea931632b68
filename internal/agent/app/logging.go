package app

import (
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubectl-offload/kubectl-offload/internal/buildinfo"
)

// Environment variables the chart sets on every agent container.
const (
	envNamespace   = "POD_NAMESPACE"
	envClusterName = "OFFLOAD_CLUSTER_NAME"
	envPodIP       = "POD_IP"
	envNodeName    = "NODE_NAME"
)

// maxVerbosity is the highest log verbosity the agent uses. client-go logs
// through the same contextual logger, and from level 7 on it logs request
// headers and from 8 on request and response bodies: TokenReviews,
// TokenRequests and Secrets, credentials included. A higher --v is capped.
const maxVerbosity = 6

// logger returns the structured logger of a component, writing klog's text
// format to errOut. It also becomes the logger of klog and controller-runtime,
// so client-go's and controller-runtime's own logs go the same way. The
// process runs one component, so setting these globals here is safe.
func (g *globalOptions) logger(component string) klog.Logger {
	cfg := textlogger.NewConfig(textlogger.Verbosity(min(g.verbosity, maxVerbosity)), textlogger.Output(g.errOut))
	logger := textlogger.NewLogger(cfg).WithName(component)
	klog.SetLoggerWithOptions(logger, klog.ContextualLogger(true))
	ctrllog.SetLogger(logger)
	if g.verbosity > maxVerbosity {
		logger.Info("Capping the log verbosity: higher levels would log request and response bodies, credentials included",
			"requested", g.verbosity, "verbosity", maxVerbosity)
	}
	return logger
}

// restConfig returns the API server config: the pod's ServiceAccount in the
// cluster, or --kubeconfig / $KUBECONFIG out of it.
func (g *globalOptions) restConfig(component string) (*rest.Config, error) {
	cfg, err := config.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the Kubernetes client config (out of the cluster, pass --kubeconfig or set KUBECONFIG): %w", err)
	}
	cfg.UserAgent = fmt.Sprintf("offload-agent/%s (%s)", buildinfo.Get().Version, component)
	return cfg, nil
}

// fromEnv returns value, or the environment variable key when value is empty.
func fromEnv(value, key string) string {
	if value != "" {
		return value
	}
	return os.Getenv(key)
}
