package kubeletapi

import (
	"context"
	"errors"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ErrUnknownPod is wrapped by the errors a Resolver returns for pods that
// are not bound to any of the agent's virtual nodes; the Server answers 404.
var ErrUnknownPod = errors.New("pod is not on a virtual node of this agent")

// Target is where a consumer pod really runs: the remote pod on the provider
// cluster, and the virtual node the consumer pod is bound to.
type Target struct {
	// NodeName is the virtual node the consumer pod is bound to; requests
	// are authorized against nodes/proxy of this node.
	NodeName string
	// Config is the client configuration of the provider, with its
	// authentication (a WrapTransport token source included).
	Config *rest.Config
	// Client is a clientset for the provider built from Config.
	Client kubernetes.Interface
	// Namespace is the twin namespace of the remote pod on the provider.
	Namespace string
	// Name is the name of the remote pod.
	Name string
}

// Resolver finds the Target of a consumer pod.
type Resolver interface {
	// Resolve returns the Target of the consumer pod namespace/pod, or an
	// error wrapping ErrUnknownPod when the pod is not bound to a virtual
	// node of this agent.
	Resolve(ctx context.Context, namespace, pod string) (Target, error)
}
