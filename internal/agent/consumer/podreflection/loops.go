package podreflection

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
)

// DefaultTokenRenewInterval is how often Run checks the service-account
// tokens of offloaded pods when Options.TokenRenewInterval is zero. They
// live tokenLifetime and are renewed in their last tokenRenewBefore.
const DefaultTokenRenewInterval = 5 * time.Minute

// Run runs the handler's own loops until ctx is done:
//   - orphan collection: the remote pods whose consumer pod went while the
//     agent was away are deleted, at once and then at every tick until it
//     succeeded once;
//   - token renewal: every Options.TokenRenewInterval, the service-account
//     tokens due for renewal are renewed.
//
// Call it once the PodController is ready, so LocalPods is synced. It
// returns nil when ctx is done; failures of one round are logged and tried
// again at the next.
func (h *Handler) Run(ctx context.Context) error {
	ticker := time.NewTicker(cmp.Or(h.opts.TokenRenewInterval, DefaultTokenRenewInterval))
	defer ticker.Stop()
	addresses := time.NewTicker(addressesInterval)
	defer addresses.Stop()
	collected := h.collectOrphansOnce(ctx)
	seen := fmt.Sprint(h.addresses())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-addresses.C:
			// Pod IPs depend on the peering's address translation: when it
			// changes (the tunnel came up), every status is sent again.
			if now := fmt.Sprint(h.addresses()); now != seen {
				seen = now
				h.replay()
			}
			continue
		case <-ticker.C:
		}
		if !collected {
			collected = h.collectOrphansOnce(ctx)
		}
		if err := h.RenewTokens(ctx); err != nil {
			h.opts.Logger.Info("Cannot renew the service-account tokens of offloaded pods", "error", err.Error())
		}
	}
}

// addressesInterval is how often Run looks for a new address translation.
// Options.Addresses caches its answer, so a look is cheap.
const addressesInterval = time.Second

// twinInformers are the informers of the twin namespaces, as they are now.
func (h *Handler) twinInformers() []*twinInformer {
	h.mu.Lock()
	defer h.mu.Unlock()
	twins := make([]*twinInformer, 0, len(h.twins))
	for _, ti := range h.twins {
		twins = append(twins, ti)
	}
	return twins
}

// replay sends the status of every remote pod the informers know.
func (h *Handler) replay() {
	// Until LocalPods has synced, remoteChanged sends nothing: the replay
	// must come after.
	if !h.localPodsSynced() && !cache.WaitForCacheSync(h.stopped(), h.opts.LocalPodsSynced) {
		return
	}
	for _, ti := range h.twinInformers() {
		for _, obj := range ti.informer.GetStore().List() {
			h.remoteChanged(ti, obj)
		}
	}
}

// ReflectedPods is how many remote pods the informers know: the pods
// reflected to the provider that it still holds.
func (h *Handler) ReflectedPods() int {
	n := 0
	for _, ti := range h.twinInformers() {
		n += len(ti.informer.GetStore().ListKeys())
	}
	return n
}

// collectOrphansOnce runs CollectOrphans over every consumer pod bound to
// the virtual node and reports whether it succeeded.
func (h *Handler) collectOrphansOnce(ctx context.Context) bool {
	local, err := h.localPods(ctx)
	if err == nil {
		err = h.CollectOrphans(ctx, local)
	}
	if err != nil {
		if ctx.Err() == nil {
			h.opts.Logger.Info("Cannot collect orphaned remote pods yet", "error", err.Error())
		}
		return false
	}
	return true
}

// localPods lists the consumer pods bound to the virtual node: from
// LocalPods when set, from the consumer's API server otherwise.
func (h *Handler) localPods(ctx context.Context) ([]*corev1.Pod, error) {
	if h.opts.LocalPods != nil {
		return h.opts.LocalPods.List(everything)
	}
	list, err := h.opts.Consumer.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", h.opts.VirtualNodeName).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the consumer pods of virtual node %s: %w", h.opts.VirtualNodeName, err)
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods, nil
}
