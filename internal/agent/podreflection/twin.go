package podreflection

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// resolveTimeout bounds a read of a NamespaceOffloading by
// DefaultTwinNamespace, whose signature carries no context.
const resolveTimeout = 10 * time.Second

// DefaultTwinNamespace resolves a consumer namespace through its
// NamespaceOffloading: the status entry of providerClusterID names the twin
// namespace, which must be Ready.
func DefaultTwinNamespace(c client.Reader, providerClusterID string) func(string) (string, bool) {
	return func(ns string) (string, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
		defer cancel()
		var no offloadv1alpha1.NamespaceOffloading
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: offloadv1alpha1.NamespaceOffloadingName}, &no); err != nil {
			return "", false
		}
		if no.DeletionTimestamp != nil {
			return "", false
		}
		for _, r := range no.Status.RemoteNamespaces {
			if r.ClusterID == providerClusterID && r.Phase == offloadv1alpha1.RemoteNamespaceReady && r.RemoteNamespace != "" {
				return r.RemoteNamespace, true
			}
		}
		return "", false
	}
}

// DefaultTwinNamespaces lists the twin namespaces on providerClusterID of
// every NamespaceOffloading, whatever their phase, keyed by twin namespace
// with the consumer namespace as value.
func DefaultTwinNamespaces(c client.Reader, providerClusterID string) func(context.Context) (map[string]string, error) {
	return func(ctx context.Context) (map[string]string, error) {
		var list offloadv1alpha1.NamespaceOffloadingList
		if err := c.List(ctx, &list); err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, no := range list.Items {
			for _, r := range no.Status.RemoteNamespaces {
				if r.ClusterID == providerClusterID && r.RemoteNamespace != "" {
					out[r.RemoteNamespace] = no.Namespace
				}
			}
		}
		return out, nil
	}
}

// TwinNamespace returns the Ready twin namespace of consumer namespace ns
// on the provider; remote pods keep their consumer pod's name there.
func (h *Handler) TwinNamespace(ns string) (string, bool) { return h.opts.TwinNamespace(ns) }
