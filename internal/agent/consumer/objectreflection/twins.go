package objectreflection

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// twinReadTimeout bounds a read of a NamespaceOffloading by
// DefaultTwinNamespace, whose signature carries no context.
const twinReadTimeout = 10 * time.Second

// twinOn returns the twin namespace of no on providerClusterID. With ready,
// only a Ready twin namespace of a NamespaceOffloading that is not being
// deleted counts.
func twinOn(no *offloadv1alpha1.NamespaceOffloading, providerClusterID string, ready bool) (string, bool) {
	if ready && no.DeletionTimestamp != nil {
		return "", false
	}
	for _, r := range no.Status.RemoteNamespaces {
		if r.ClusterID == providerClusterID && r.RemoteNamespace != "" && (!ready || r.Phase == offloadv1alpha1.RemoteNamespaceReady) {
			return r.RemoteNamespace, true
		}
	}
	return "", false
}

// DefaultTwinNamespace resolves a consumer namespace through its
// NamespaceOffloading: the status entry of providerClusterID names the twin
// namespace, which must be Ready.
func DefaultTwinNamespace(c client.Reader, providerClusterID string) func(string) (string, bool) {
	return func(ns string) (string, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), twinReadTimeout)
		defer cancel()
		var no offloadv1alpha1.NamespaceOffloading
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: offloadv1alpha1.NamespaceOffloadingName}, &no); err != nil {
			return "", false
		}
		return twinOn(&no, providerClusterID, true)
	}
}

// ListTwinNamespaces lists the twin namespaces on providerClusterID of
// every NamespaceOffloading, keyed by twin namespace with the consumer
// namespace as value: all of them whatever their phase, or with ready only
// the Ready ones of namespaces that are not being unoffloaded.
func ListTwinNamespaces(ctx context.Context, c client.Reader, providerClusterID string, ready bool) (map[string]string, error) {
	var list offloadv1alpha1.NamespaceOffloadingList
	if err := c.List(ctx, &list); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i := range list.Items {
		if twin, ok := twinOn(&list.Items[i], providerClusterID, ready); ok {
			out[twin] = list.Items[i].Namespace
		}
	}
	return out, nil
}

// DefaultTwinNamespaces lists the twin namespaces on providerClusterID of
// every NamespaceOffloading, whatever their phase (see ListTwinNamespaces).
func DefaultTwinNamespaces(c client.Reader, providerClusterID string) func(context.Context) (map[string]string, error) {
	return func(ctx context.Context) (map[string]string, error) {
		return ListTwinNamespaces(ctx, c, providerClusterID, false)
	}
}
