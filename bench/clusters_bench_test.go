// Package bench holds the benchmarks of kubectl-offload. They print figures
// (times, memory) and assert nothing; run them with `make bench`.
package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// BenchmarkLocalClusters measures bringing up two local clusters, with and
// without a real node, and the memory they use once idle.
func BenchmarkLocalClusters(b *testing.B) {
	for _, real := range []bool{false, true} {
		b.Run(fmt.Sprintf("real-node=%t", real), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				start := time.Now()
				clusters := localcluster.StartClusters(b,
					localcluster.ClusterOptions{Name: "consumer", FakeNodes: 2, RealNode: real},
					localcluster.ClusterOptions{Name: "provider", FakeNodes: 2, RealNode: real},
				)
				b.ReportMetric(time.Since(start).Seconds(), "s/bringup")
				var controlPlane, node uint64
				for _, c := range clusters {
					rss, err := c.RSS()
					if err != nil {
						b.Fatal(err)
					}
					for _, v := range rss {
						controlPlane += v
					}
					if c.Node != nil {
						node += c.Node.RSS()
					}
				}
				b.ReportMetric(float64(controlPlane)/(1<<20), "MiB-control-planes")
				b.ReportMetric(float64(node)/(1<<20), "MiB-real-nodes")
				stop := time.Now()
				for _, c := range clusters {
					if err := c.Delete(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(time.Since(stop).Seconds(), "s/teardown")
			}
		})
	}
}
