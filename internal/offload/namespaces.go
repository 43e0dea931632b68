package offload

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// systemNamespaces are never offloaded: their pods run the cluster itself.
var systemNamespaces = map[string]bool{"kube-system": true, "kube-public": true, "kube-node-lease": true}

// refuseNamespace refuses, offline, the namespaces whose pods must stay
// here: the Kubernetes system namespaces and the install namespace of
// kubectl-offload, whose agent runs the virtual nodes.
func refuseNamespace(ns, installNamespace string) error {
	switch {
	case systemNamespaces[ns]:
		return newError(ErrNamespaceRefused, "namespace %s cannot be offloaded: it is a Kubernetes system namespace", ns)
	case ns == installNamespace:
		return newError(ErrNamespaceRefused, "namespace %s cannot be offloaded: kubectl-offload runs in it", ns)
	}
	return nil
}

// refuseLiveNamespace refuses a namespace being deleted, and a twin
// namespace that a consumer's pods run in on this cluster, a provider.
func refuseLiveNamespace(ns *corev1.Namespace) error {
	if ns.DeletionTimestamp != nil {
		return newError(ErrNamespaceRefused, "namespace %s is being deleted", ns.Name)
	}
	if origin, ok := ns.Labels[offloadv1alpha1.LabelOriginNamespace]; ok {
		return newError(ErrNamespaceRefused, "namespace %s cannot be offloaded: it is the twin namespace of namespace %s of a consumer, which offloads it", ns.Name, origin)
	}
	return nil
}

// getNamespace reads namespace name.
func getNamespace(ctx context.Context, c client.Client, name string) (*corev1.Namespace, error) {
	var ns corev1.Namespace
	err := c.Get(ctx, types.NamespacedName{Name: name}, &ns)
	switch {
	case apierrors.IsNotFound(err):
		return nil, newError(ErrNamespaceNotFound, "namespace %q not found: create it first (kubectl create namespace %s)", name, name)
	case err != nil:
		return nil, fmt.Errorf("reading namespace %s: %w", name, err)
	}
	return &ns, nil
}

// getNamespaceOffloading reads the NamespaceOffloading of namespace, nil
// when there is none, and returns ErrNotInstalled when its CRD is missing.
func getNamespaceOffloading(ctx context.Context, c client.Client, namespace string) (*offloadv1alpha1.NamespaceOffloading, error) {
	var no offloadv1alpha1.NamespaceOffloading
	err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: offloadv1alpha1.NamespaceOffloadingName}, &no)
	switch {
	case meta.IsNoMatchError(err):
		return nil, newError(ErrNotInstalled, "kubectl-offload is not installed on this cluster (no NamespaceOffloading CRD): run kubectl offload install first")
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading NamespaceOffloading %s/%s: %w", namespace, offloadv1alpha1.NamespaceOffloadingName, err)
	}
	return &no, nil
}
