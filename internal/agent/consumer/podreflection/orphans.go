package podreflection

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// CollectOrphans deletes the remote pods of the consumer whose consumer pod
// is gone. localPods is a full list of the consumer's pods bound to the
// virtual node. Remote pods are taken from synced informers of every twin
// namespace; as localPods may be older than that view, every candidate is
// checked once more against the consumer API before it is deleted, so a pod
// created meanwhile is never taken for an orphan (docs/architecture.md, Failure policy).
// Pods of other consumers are never touched.
func (h *Handler) CollectOrphans(ctx context.Context, localPods []*corev1.Pod) error {
	twins, err := h.syncAll(ctx)
	if err != nil {
		return err
	}
	uids := sets.New[types.UID]()
	for _, p := range localPods {
		uids.Insert(p.UID)
	}
	var errs []error
	for _, ti := range twins {
		cached, err := ti.lister.Pods(ti.twin).List(everything)
		if err != nil {
			return err
		}
		for _, orphan := range reflection.Orphans(cached, uids, h.opts.ConsumerClusterID) {
			if h.stillLocal(ctx, ti, orphan) {
				continue
			}
			if err := h.deleteRemote(ctx, orphan, nil); err != nil {
				errs = append(errs, err)
				continue
			}
			h.opts.Logger.Info("Deleted orphaned remote pod", "remotePod", klog.KObj(orphan), "namespace", ti.consumer)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("collecting orphaned remote pods: %w", err)
	}
	return nil
}

// stillLocal reports whether the consumer pod remote reflects exists after
// all. It errs on the side of keeping the remote pod.
func (h *Handler) stillLocal(ctx context.Context, ti *twinInformer, remote *corev1.Pod) bool {
	uid, _ := reflection.IsRemoteOf(remote, h.opts.ConsumerClusterID)
	local, err := h.opts.Consumer.CoreV1().Pods(ti.consumer).Get(ctx, remote.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false
	case err != nil:
		return true
	}
	return local.UID == uid
}
