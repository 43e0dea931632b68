package manager

import (
	"context"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

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
	id, err := peering.ReadIdentity(ctx, c.reader, c.namespace)
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
