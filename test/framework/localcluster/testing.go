package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// CreateClusters starts the clusters concurrently. On any failure it deletes
// the ones that did start and returns the error.
func (e *Env) CreateClusters(ctx context.Context, opts ...ClusterOptions) ([]*Cluster, error) {
	clusters := make([]*Cluster, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i, o := range opts {
		wg.Go(func() {
			clusters[i], errs[i] = e.Create(ctx, o)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range clusters {
			if c != nil {
				_ = c.Delete(context.WithoutCancel(ctx))
			}
		}
		return nil, err
	}
	return clusters, nil
}

// StartClusters starts local clusters for a test, concurrently, and deletes
// them when the test ends, also when it fails. Set OFFLOAD_KEEP_CLUSTERS=1 to
// keep a failed test's clusters for debugging.
func StartClusters(t testing.TB, opts ...ClusterOptions) []*Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "offload-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	env, err := NewEnv(ctx, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	start := time.Now()
	clusters, err := env.CreateClusters(ctx, opts...)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Logf("started %d clusters in %s (workdir %s)", len(clusters), time.Since(start).Round(time.Millisecond), dir)
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("OFFLOAD_KEEP_CLUSTERS") != "" {
			t.Logf("keeping clusters in %s (OFFLOAD_KEEP_CLUSTERS is set)", dir)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var errs []error
		for _, c := range clusters {
			errs = append(errs, c.Delete(ctx))
		}
		errs = append(errs, os.RemoveAll(dir))
		if err := errors.Join(errs...); err != nil {
			t.Errorf("tearing down clusters: %v", err)
		}
	})
	return clusters
}

// String returns the cluster name and its kubeconfig.
func (c *Cluster) String() string { return fmt.Sprintf("%s (kubeconfig %s)", c.Name, c.Kubeconfig) }
