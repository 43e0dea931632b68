package install

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// agentFinalizerPrefix starts every finalizer the agent puts on objects.
const agentFinalizerPrefix = "offload.io/"

// held is an object whose deletion waits for the agent.
type held struct {
	kind, name string
	finalizers []string
}

// String names the object and what holds it.
func (h held) String() string {
	return fmt.Sprintf("%s %s (%s)", h.kind, h.name, strings.Join(h.finalizers, ", "))
}

// agentFinalizers returns the agent's finalizers of o.
func agentFinalizers(o client.Object) []string {
	var out []string
	for _, f := range o.GetFinalizers() {
		if strings.HasPrefix(f, agentFinalizerPrefix) {
			out = append(out, f)
		}
	}
	return out
}

// objectName is namespace/name, or name for a cluster-scoped object.
func objectName(o client.Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// heldByTheAgent lists what is being deleted but waits for the agent: the
// offload.io objects with an agent finalizer and a deletion timestamp, and
// the terminating tenant and twin namespaces, whose contents do. Removing
// the agent now would leave them Terminating for good.
func (o *UninstallOptions) heldByTheAgent(ctx context.Context) ([]held, error) {
	var out []held
	lists := []struct {
		kind string
		list client.ObjectList
	}{
		{"ForeignCluster", &offloadv1alpha1.ForeignClusterList{}},
		{"Tenant", &offloadv1alpha1.TenantList{}},
		{"NamespaceOffloading", &offloadv1alpha1.NamespaceOffloadingList{}},
		{"RemoteNamespace", &offloadv1alpha1.RemoteNamespaceList{}},
	}
	for _, l := range lists {
		if err := o.client.List(ctx, l.list); err != nil {
			if isMissingCRD(err) {
				continue
			}
			return nil, fmt.Errorf("listing %ss: %w", l.kind, err)
		}
		items, err := metaItems(l.list)
		if err != nil {
			return nil, err
		}
		for _, obj := range items {
			if f := agentFinalizers(obj); obj.GetDeletionTimestamp() != nil && len(f) > 0 {
				out = append(out, held{kind: l.kind, name: objectName(obj), finalizers: f})
			}
		}
	}
	var nss corev1.NamespaceList
	if err := o.client.List(ctx, &nss); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	for _, ns := range nss.Items {
		_, tenant := ns.Labels[offloadv1alpha1.LabelTenant]
		_, twin := ns.Labels[offloadv1alpha1.LabelOriginClusterID]
		if ns.DeletionTimestamp != nil && (tenant || twin) {
			out = append(out, held{kind: "Namespace", name: ns.Name, finalizers: []string{"Terminating"}})
		}
	}
	// The agent lets the DaemonSets it kept off virtual nodes back once the
	// last virtual node is gone; uninstalled before, it would leave them so.
	var dss appsv1.DaemonSetList
	if err := o.client.List(ctx, &dss); err != nil {
		return nil, fmt.Errorf("listing DaemonSets: %w", err)
	}
	for _, ds := range dss.Items {
		if ds.Annotations[offloadv1alpha1.AnnotationVirtualNodesExcluded] == "true" {
			out = append(out, held{kind: "DaemonSet", name: objectName(&ds), finalizers: []string{"kept off virtual nodes"}})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// waitForTheAgent waits, while the agent is still installed, until nothing
// waits for it any more. It returns an error naming what is still held
// when timeout passes first.
func (o *UninstallOptions) waitForTheAgent(ctx context.Context, timeout time.Duration) error {
	var last []held
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		h, err := o.heldByTheAgent(ctx)
		if err != nil {
			return false, err
		}
		last = h
		return len(h) == 0, nil
	})
	if err != nil && len(last) > 0 {
		names := make([]string, len(last))
		for i, h := range last {
			names[i] = h.String()
		}
		return fmt.Errorf("the agent has not finished its cleanup after %s: %s are still being deleted; nothing was uninstalled. Check that offload-controller-manager runs (kubectl offload status), then run uninstall again",
			timeout, strings.Join(names, "; "))
	}
	return err
}

// startCleanup deletes what uses kubectl-offload, for uninstall --force:
// the peerings (told not to wait for an unreachable provider), the tenants
// of consumers and the offloaded namespaces. The agent's finalizers then do
// the work, and waitForTheAgent waits for them.
func (o *UninstallOptions) startCleanup(ctx context.Context) error {
	var fcs offloadv1alpha1.ForeignClusterList
	if err := o.client.List(ctx, &fcs); err != nil && !isMissingCRD(err) {
		return fmt.Errorf("listing peers: %w", err)
	}
	for i := range fcs.Items {
		if err := peering.DeleteForeignCluster(ctx, o.client, &fcs.Items[i], true); err != nil {
			return err
		}
	}
	for _, l := range []client.ObjectList{&offloadv1alpha1.TenantList{}, &offloadv1alpha1.NamespaceOffloadingList{}} {
		if err := o.client.List(ctx, l); err != nil {
			if isMissingCRD(err) {
				continue
			}
			return err
		}
		items, err := metaItems(l)
		if err != nil {
			return err
		}
		for _, obj := range items {
			if err := o.client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %s: %w", objectName(obj), err)
			}
		}
	}
	return nil
}

// metaItems returns the items of list as client.Objects.
func metaItems(list client.ObjectList) ([]client.Object, error) {
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(objs))
	for _, obj := range objs {
		co, ok := obj.(client.Object)
		if !ok {
			return nil, fmt.Errorf("unexpected item %T", obj)
		}
		out = append(out, co)
	}
	return out, nil
}
