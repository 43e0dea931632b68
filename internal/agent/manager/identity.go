package manager

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubectl-offload/kubectl-offload/internal/names"
)

// Identity is this cluster's identity, as the install wrote it into
// ConfigMap offload-cluster-identity.
type Identity struct {
	// ID is the cluster's UUID; it never changes.
	ID string
	// Name is the cluster's DNS-1123 name.
	Name string
}

// ReadIdentity reads the identity ConfigMap in namespace. A missing
// ConfigMap or an empty clusterID is an error.
func ReadIdentity(ctx context.Context, r client.Reader, namespace string) (Identity, error) {
	key := types.NamespacedName{Namespace: namespace, Name: names.IdentityConfigMap}
	var cm corev1.ConfigMap
	if err := r.Get(ctx, key, &cm); err != nil {
		return Identity{}, fmt.Errorf("reading the cluster identity ConfigMap %s (kubectl offload install creates it): %w", key, err)
	}
	id := Identity{ID: cm.Data["clusterID"], Name: cm.Data["clusterName"]}
	if id.ID == "" {
		return Identity{}, fmt.Errorf("the cluster identity ConfigMap %s has no clusterID: run kubectl offload upgrade to restore it", key)
	}
	return id, nil
}

// identityCheck reads and logs the cluster identity once at start, on every
// replica, leader or not. The manager stops with its error when the
// identity is missing, since nothing works without it.
type identityCheck struct {
	// reader reads straight from the API server: a cached client would
	// watch ConfigMaps in every namespace, which RBAC does not allow.
	reader      client.Reader
	namespace   string
	clusterName string
	log         klog.Logger
}

// Start implements manager.Runnable.
func (c *identityCheck) Start(ctx context.Context) error {
	id, err := ReadIdentity(ctx, c.reader, c.namespace)
	if err != nil {
		return err
	}
	c.log.Info("Cluster identity", "clusterID", id.ID, "clusterName", id.Name)
	if c.clusterName != "" && c.clusterName != id.Name {
		c.log.Info("The configured cluster name differs from the identity ConfigMap's, which wins",
			"configured", c.clusterName, "identity", id.Name)
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: the check
// runs on every replica.
func (c *identityCheck) NeedLeaderElection() bool { return false }
