package peer

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/waitfor"
)

// fcCondition tells from the ForeignCluster, nil once it is gone, whether a
// wait is over.
type fcCondition func(fc *offloadv1alpha1.ForeignCluster) (bool, error)

// waitForeignCluster waits until cond holds for ForeignCluster name or ctx
// ends, watching it when c can.
func waitForeignCluster(ctx context.Context, c client.Client, name string, interval time.Duration, cond fcCondition) error {
	return waitfor.Object(ctx, c, &offloadv1alpha1.ForeignClusterList{}, types.NamespacedName{Name: name}, interval, cond)
}
