package namespaceoffloading

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

type entry = offloadv1alpha1.RemoteNamespaceStatus

// request is the RemoteNamespace spec that no asks every provider for:
// twin namespace NS-<consumer>-<hash6> (DefaultName, also when unset) or NS
// (EnforceSameName).
func request(no *offloadv1alpha1.NamespaceOffloading, id peering.Identity) offloadv1alpha1.RemoteNamespaceSpec {
	spec := offloadv1alpha1.RemoteNamespaceSpec{ConsumerClusterID: id.ID, SourceNamespace: no.Namespace,
		TargetNamespace: offloadv1alpha1.TwinNamespace(no.Namespace, id.Name, id.ID), MappingStrategy: offloadv1alpha1.DefaultName}
	if no.Spec.NamespaceMappingStrategy == offloadv1alpha1.EnforceSameName {
		spec.TargetNamespace, spec.MappingStrategy = no.Namespace, offloadv1alpha1.EnforceSameName
	}
	return spec
}

// sync asks every selected peer for the twin namespace, withdraws the
// request from deselected ones, and returns the new status entries, by
// peer name. Entries of peers on hold are kept as they were; entries of
// peers that have no ForeignCluster any more are dropped.
func (r *Reconciler) sync(ctx context.Context, no *offloadv1alpha1.NamespaceOffloading, id peering.Identity, peers []candidate) []entry {
	want := request(no, id)
	prev := byClusterID(no.Status.RemoteNamespaces)
	seen := map[string]bool{}
	var out []entry
	for _, c := range peers {
		if seen[c.fc.Spec.ClusterID] {
			continue // one entry per cluster ID: the first ForeignCluster by name has it
		}
		seen[c.fc.Spec.ClusterID] = true
		old := prev[c.fc.Spec.ClusterID]
		switch c.choice {
		case selected:
			out = append(out, r.ensure(ctx, c.fc, old, want))
		case onHold:
			if old != nil {
				e := *old
				e.Message = c.why
				out = append(out, e)
			}
		case deselected:
			if old != nil {
				if e, keep := r.withdraw(ctx, c.fc, *old, no.Namespace); keep {
					out = append(out, e)
				}
			}
		}
	}
	return out
}

func byClusterID(entries []entry) map[string]*entry {
	m := make(map[string]*entry, len(entries))
	for i := range entries {
		m[entries[i].ClusterID] = &entries[i]
	}
	return m
}

// ensure makes sure fc's provider has the RemoteNamespace want and returns
// its entry. A provider that does not answer keeps its last known phase.
func (r *Reconciler) ensure(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, old *entry, want offloadv1alpha1.RemoteNamespaceSpec) entry {
	e := entry{ClusterID: fc.Spec.ClusterID, ClusterName: fc.Spec.ClusterName, RemoteNamespace: want.TargetNamespace, Phase: offloadv1alpha1.RemoteNamespacePending}
	if old != nil && old.RemoteNamespace == want.TargetNamespace && old.Phase != "" {
		e.Phase = old.Phase
	}
	p, err := r.provider(ctx, fc)
	if errors.Is(err, errNoCredentials) {
		e.Message = fmt.Sprintf("waiting for the credentials of peer %s (Secret %s/%s)", fc.Name, r.Namespace, peering.PeerKubeconfigSecretName(fc.Name))
		return e
	}
	if err == nil {
		var phase offloadv1alpha1.RemoteNamespacePhase
		if phase, e.Message, err = p.ensure(ctx, want); err == nil {
			e.Phase = phase
			return e
		}
	}
	ctrl.LoggerFrom(ctx).Info("Cannot reach the provider", "foreignCluster", klog.KObj(fc), "error", err.Error())
	e.Message = fmt.Sprintf("cannot reach provider %s: %v; the phase is the last one seen", fc.Name, err)
	return e
}

// withdraw deletes the RemoteNamespace of a deselected peer. It returns the
// entry to keep while the provider cannot be asked; a peer without
// credentials is gone, and its entry with it.
func (r *Reconciler) withdraw(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, old entry, source string) (entry, bool) {
	p, err := r.provider(ctx, fc)
	if errors.Is(err, errNoCredentials) {
		return entry{}, false
	}
	if err == nil {
		if _, err = p.remove(ctx, source); err == nil {
			ctrl.LoggerFrom(ctx).Info("Withdrew twin namespace", "namespace", source, "foreignCluster", klog.KObj(fc), "remoteNamespace", old.RemoteNamespace)
			return entry{}, false
		}
	}
	old.Phase = offloadv1alpha1.RemoteNamespaceTerminating
	old.Message = fmt.Sprintf("peer %s is no longer selected, but its twin namespace cannot be deleted: %v; retrying", fc.Name, err)
	return old, true
}

// release deletes the RemoteNamespaces of a deleted NamespaceOffloading and
// returns the entries of those not gone yet, and whether any is. Every peer
// with an entry is waited for. A usable peer without one is asked too, in
// case the entry was never recorded, but one that does not answer is not
// waited for.
func (r *Reconciler) release(ctx context.Context, no *offloadv1alpha1.NamespaceOffloading, peers []candidate) ([]entry, bool) {
	prev := byClusterID(no.Status.RemoteNamespaces)
	seen := map[string]bool{}
	var out []entry
	pending := false
	for _, c := range peers {
		if seen[c.fc.Spec.ClusterID] {
			continue
		}
		seen[c.fc.Spec.ClusterID] = true
		old := prev[c.fc.Spec.ClusterID]
		if old == nil && c.choice == deselected {
			continue
		}
		p, err := r.provider(ctx, c.fc)
		if errors.Is(err, errNoCredentials) {
			continue
		}
		gone := false
		if err == nil {
			gone, err = p.remove(ctx, no.Namespace)
		}
		if gone || (err != nil && old == nil) {
			continue
		}
		e := entry{ClusterID: c.fc.Spec.ClusterID, ClusterName: c.fc.Spec.ClusterName}
		if old != nil {
			e = *old
		}
		e.Phase = offloadv1alpha1.RemoteNamespaceTerminating
		e.Message = fmt.Sprintf("waiting for provider %s to delete twin namespace %s", c.fc.Name, e.RemoteNamespace)
		if err != nil {
			e.Message = fmt.Sprintf("cannot reach provider %s to delete twin namespace %s: %v; retrying", c.fc.Name, e.RemoteNamespace, err)
		}
		out = append(out, e)
		pending = true
	}
	return out, pending
}

// ensure creates or updates the RemoteNamespace want and returns the phase
// and message the provider reports for it.
func (p *provider) ensure(ctx context.Context, want offloadv1alpha1.RemoteNamespaceSpec) (offloadv1alpha1.RemoteNamespacePhase, string, error) {
	// A namespace name is a DNS-1123 label, so it is always a valid
	// object name, and unique in the tenant namespace of this consumer.
	var rn offloadv1alpha1.RemoteNamespace
	err := p.client.Get(ctx, types.NamespacedName{Namespace: p.namespace, Name: want.SourceNamespace}, &rn)
	if apierrors.IsNotFound(err) {
		rn = offloadv1alpha1.RemoteNamespace{
			ObjectMeta: metav1.ObjectMeta{Name: want.SourceNamespace, Namespace: p.namespace, Labels: map[string]string{
				offloadv1alpha1.LabelOriginClusterID: want.ConsumerClusterID, offloadv1alpha1.LabelOriginNamespace: want.SourceNamespace}},
			Spec: want,
		}
		if err := p.client.Create(ctx, &rn); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", "", fmt.Errorf("creating RemoteNamespace %s: %w", klog.KObj(&rn), err)
		}
		return offloadv1alpha1.RemoteNamespacePending, fmt.Sprintf("asked the provider for namespace %s", want.TargetNamespace), nil
	}
	if err != nil {
		return "", "", fmt.Errorf("reading RemoteNamespace %s/%s: %w", p.namespace, want.SourceNamespace, err)
	}
	if !rn.DeletionTimestamp.IsZero() {
		return offloadv1alpha1.RemoteNamespacePending, fmt.Sprintf("the provider is still deleting twin namespace %s: namespace %s is asked for once it is gone",
			rn.Spec.TargetNamespace, want.TargetNamespace), nil
	}
	if rn.Spec.TargetNamespace != want.TargetNamespace {
		// The provider serves a new target by making a new namespace: the
		// old twin goes first, with the request for it.
		if err := p.client.Delete(ctx, &rn, client.Preconditions{UID: &rn.UID}); client.IgnoreNotFound(err) != nil {
			return "", "", fmt.Errorf("deleting RemoteNamespace %s to replace it: %w", klog.KObj(&rn), err)
		}
		return offloadv1alpha1.RemoteNamespacePending, fmt.Sprintf("replacing twin namespace %s with %s", rn.Spec.TargetNamespace, want.TargetNamespace), nil
	}
	if rn.Spec != want {
		rn.Spec = want
		if err := p.client.Update(ctx, &rn); err != nil {
			return "", "", fmt.Errorf("updating RemoteNamespace %s: %w", klog.KObj(&rn), err)
		}
		return offloadv1alpha1.RemoteNamespacePending, fmt.Sprintf("asked the provider again for namespace %s", want.TargetNamespace), nil
	}
	ready := meta.FindStatusCondition(rn.Status.Conditions, offloadv1alpha1.ConditionReady)
	if rn.Status.Phase == "" || ready != nil && ready.ObservedGeneration != 0 && ready.ObservedGeneration < rn.Generation {
		return offloadv1alpha1.RemoteNamespacePending, fmt.Sprintf("waiting for the provider to serve namespace %s", want.TargetNamespace), nil
	}
	// The provider writes the status: its phase must be one of ours, and
	// its text is cleaned.
	message := ""
	if ready != nil {
		message = peering.CleanText(ready.Message)
	}
	switch phase := rn.Status.Phase; phase {
	case offloadv1alpha1.RemoteNamespacePending, offloadv1alpha1.RemoteNamespaceReady, offloadv1alpha1.RemoteNamespaceFailed, offloadv1alpha1.RemoteNamespaceTerminating:
		return phase, message, nil
	default:
		return offloadv1alpha1.RemoteNamespaceFailed, fmt.Sprintf("the provider reports an unknown phase for namespace %s", want.TargetNamespace), nil
	}
}

// remove deletes the RemoteNamespace of source namespace source, and says
// whether it is gone. One asking for another source namespace is not ours.
func (p *provider) remove(ctx context.Context, source string) (bool, error) {
	var rn offloadv1alpha1.RemoteNamespace
	err := p.client.Get(ctx, types.NamespacedName{Namespace: p.namespace, Name: source}, &rn)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading RemoteNamespace %s/%s: %w", p.namespace, source, err)
	}
	if rn.Spec.SourceNamespace != source {
		return true, nil
	}
	if rn.DeletionTimestamp.IsZero() {
		if err := p.client.Delete(ctx, &rn, client.Preconditions{UID: &rn.UID}); err != nil {
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, fmt.Errorf("deleting RemoteNamespace %s: %w", klog.KObj(&rn), err)
		}
	}
	// Without a finalizer the delete took it at once.
	err = p.client.Get(ctx, client.ObjectKeyFromObject(&rn), &rn)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// readiness is the Ready condition of no for entries.
func readiness(no *offloadv1alpha1.NamespaceOffloading, entries []entry) metav1.Condition {
	c := metav1.Condition{Type: offloadv1alpha1.ConditionReady}
	local := no.Spec.PodOffloadingStrategy == offloadv1alpha1.Local
	var failed, waiting []string
	active := 0
	for _, e := range entries {
		switch e.Phase {
		case offloadv1alpha1.RemoteNamespaceTerminating:
			continue // a deselected peer on its way out
		case offloadv1alpha1.RemoteNamespaceReady:
		case offloadv1alpha1.RemoteNamespaceFailed:
			failed = append(failed, fmt.Sprintf("twin namespace %s on %s: %s", e.RemoteNamespace, e.ClusterName, e.Message))
		default:
			waiting = append(waiting, fmt.Sprintf("twin namespace %s on %s is %s (%s)", e.RemoteNamespace, e.ClusterName, e.Phase, e.Message))
		}
		active++
	}
	switch {
	case active == 0 && local:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonPodsStayLocal
		c.Message = fmt.Sprintf("podOffloadingStrategy is Local: the pods of namespace %s stay on this cluster, no peer is needed", no.Namespace)
	case active == 0 && selects(no.Spec.ClusterSelector):
		c.Status, c.Reason = metav1.ConditionFalse, ReasonNoPeer
		c.Message = "no authenticated peer with outgoing peering matches the cluster selector: fix the selector (kubectl offload namespace " +
			no.Namespace + " --selector) or peer with a matching cluster (kubectl offload peer)"
	case active == 0:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonNoPeer
		c.Message = "no authenticated peer with outgoing peering: peer with a cluster first (kubectl offload peer), see kubectl get foreignclusters"
	case len(failed) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonRemoteNamespaceFailed, strings.Join(failed, "; ")
	case len(waiting) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, ReasonPending, strings.Join(waiting, "; ")
	default:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonRemoteNamespacesReady
		c.Message = fmt.Sprintf("namespace %s is offloaded to %d %s", no.Namespace, active, plural(active, "peer", "peers"))
		if local {
			c.Message += "; podOffloadingStrategy is Local: its pods stay on this cluster"
		}
	}
	return c
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
