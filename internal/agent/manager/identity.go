package manager

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
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

// Start implements manager.Runnable. It waits for an API server that does
// not answer (the agent may start during an outage), and fails only when
// the API server says the identity cannot be read.
func (c *identityCheck) Start(ctx context.Context) error {
	var id peering.Identity
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 7, Cap: 10 * time.Second}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		var err error
		id, err = peering.ReadIdentity(ctx, c.reader, c.namespace)
		switch {
		case err == nil:
			return true, nil
		case !unavailable(err):
			return false, err
		}
		c.log.Info("Waiting for the API server to read the cluster identity", "error", err.Error())
		return false, nil
	})
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

// unavailable tells whether err says the API server could not be reached
// or could not answer yet, rather than what it answered.
func unavailable(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)
}
