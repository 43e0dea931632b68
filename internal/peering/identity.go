package peering

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// The keys of the identity ConfigMap, which install writes once.
const (
	IdentityClusterIDKey   = "clusterID"
	IdentityClusterNameKey = "clusterName"
)

// Identity is a cluster's identity, as install wrote it into ConfigMap
// offload-cluster-identity.
type Identity struct {
	// ID is the cluster's UUID; it never changes.
	ID string
	// Name is the cluster's DNS-1123 name.
	Name string
}

// ReadIdentity reads the identity ConfigMap in namespace. A missing
// ConfigMap or an empty clusterID is an error that says what to run.
func ReadIdentity(ctx context.Context, r client.Reader, namespace string) (Identity, error) {
	var cm corev1.ConfigMap
	key := types.NamespacedName{Namespace: namespace, Name: offloadv1alpha1.IdentityConfigMap}
	if err := r.Get(ctx, key, &cm); err != nil {
		return Identity{}, fmt.Errorf("reading the cluster identity ConfigMap %s (kubectl offload install creates it): %w", key, err)
	}
	return ParseIdentity(&cm)
}

// ParseIdentity reads an identity ConfigMap.
func ParseIdentity(cm *corev1.ConfigMap) (Identity, error) {
	id := Identity{ID: cm.Data[IdentityClusterIDKey], Name: cm.Data[IdentityClusterNameKey]}
	if id.ID == "" {
		return Identity{}, fmt.Errorf("the cluster identity ConfigMap %s/%s has no clusterID: run kubectl offload upgrade to restore it", cm.Namespace, cm.Name)
	}
	return id, nil
}
