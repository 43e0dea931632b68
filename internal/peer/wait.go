package peer

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// fcCondition tells from the ForeignCluster, nil once it is gone, whether a
// wait is over.
type fcCondition func(fc *offloadv1alpha1.ForeignCluster) (bool, error)

// waitForeignCluster waits until cond holds for ForeignCluster name or ctx
// ends. It watches the ForeignCluster when c can watch, so a change shows at
// once, and reads it every interval otherwise.
func waitForeignCluster(ctx context.Context, c client.Client, name string, interval time.Duration, cond fcCondition) error {
	wc, ok := c.(client.WithWatch)
	if !ok {
		return wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
			var fc offloadv1alpha1.ForeignCluster
			err := c.Get(ctx, types.NamespacedName{Name: name}, &fc)
			if apierrors.IsNotFound(err) {
				return cond(nil)
			}
			if err != nil {
				return false, nil // transient; the deadline decides
			}
			return cond(&fc)
		})
	}
	// Every ForeignCluster is watched, and the others ignored: a cluster has
	// few peers, and any client, fakes included, can serve that.
	find := func(list *offloadv1alpha1.ForeignClusterList) *offloadv1alpha1.ForeignCluster {
		for i := range list.Items {
			if list.Items[i].Name == name {
				return &list.Items[i]
			}
		}
		return nil
	}
	for {
		var list offloadv1alpha1.ForeignClusterList
		if err := wc.List(ctx, &list); err == nil {
			if done, err := cond(find(&list)); done || err != nil {
				return err
			}
			if done, err := watchUntil(ctx, wc, list.ResourceVersion, name, cond); done || err != nil {
				return err
			}
		}
		select { // transient: the deadline decides
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// watchUntil follows the ForeignClusters from resourceVersion on until cond
// holds for name, or the watch ends.
func watchUntil(ctx context.Context, wc client.WithWatch, resourceVersion, name string, cond fcCondition) (bool, error) {
	w, err := wc.Watch(ctx, &offloadv1alpha1.ForeignClusterList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resourceVersion}})
	if err != nil {
		return false, nil
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return false, nil
			}
			fc, isFC := ev.Object.(*offloadv1alpha1.ForeignCluster)
			if !isFC || fc.Name != name {
				continue
			}
			if ev.Type == watch.Deleted {
				fc = nil
			}
			if done, err := cond(fc); done || err != nil {
				return done, err
			}
		}
	}
}
