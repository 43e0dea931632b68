package peering

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// TenantConfig reads the kubeconfig of a peer's kubeconfig Secret: the
// client configuration for the provider, and the tenant namespace, which
// is the namespace of its context. name is the peer, for errors.
func TenantConfig(name string, kubeconfig []byte) (*rest.Config, string, error) {
	cc, err := clientcmd.NewClientConfigFromBytes(kubeconfig)
	if err != nil {
		return nil, "", fmt.Errorf("reading the kubeconfig of peer %s: %w", name, err)
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("reading the kubeconfig of peer %s: %w", name, err)
	}
	namespace, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the tenant namespace in the kubeconfig of peer %s: %w", name, err)
	}
	return cfg, namespace, nil
}
