package reflection

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The changes a kubelet carries out on a running pod, which reach the
// remote pod through subresources of their own rather than a pod update:
// ephemeral containers (kubectl debug) and in-place resizes.

// AddEphemeralContainers returns a copy of remote whose ephemeral
// containers are remote's plus those of local that remote lacks, by name,
// translated as RemotePod translates containers (service-account token
// mounts, downward API, NET_RAW), and the names it added. The provider's
// pods/ephemeralcontainers subresource takes it: ephemeral containers are
// only ever added, never changed or removed. It fails as RemotePod does
// when local cannot be offloaded.
func AddEphemeralContainers(remote, local *corev1.Pod, o Origin) (*corev1.Pod, []string, error) {
	if len(local.Spec.EphemeralContainers) == 0 {
		return remote, nil, nil
	}
	spec, err := remoteSpec(local, o)
	if err != nil {
		return nil, nil, err
	}
	out := remote.DeepCopy()
	var added []string
	for _, e := range spec.EphemeralContainers {
		if !hasEphemeralContainer(remote, e.Name) {
			out.Spec.EphemeralContainers = append(out.Spec.EphemeralContainers, e)
			added = append(added, e.Name)
		}
	}
	return out, added, nil
}

func hasEphemeralContainer(p *corev1.Pod, name string) bool {
	return slices.ContainsFunc(p.Spec.EphemeralContainers, func(e corev1.EphemeralContainer) bool { return e.Name == name })
}

// ResizeRemote returns a copy of remote whose containers and init
// containers ask for the cpu and memory requests and limits local's ask
// for, matched by name, and whether any differed: the provider's
// pods/resize subresource takes it. Only the quantities local sets count:
// the provider's LimitRange gave remote the ones local lacks (and a resize
// can neither add nor remove one).
func ResizeRemote(remote, local *corev1.Pod) (*corev1.Pod, bool) {
	out := remote.DeepCopy()
	changed := false
	for _, pair := range []struct{ have, want []corev1.Container }{
		{out.Spec.InitContainers, local.Spec.InitContainers},
		{out.Spec.Containers, local.Spec.Containers},
	} {
		for i := range pair.have {
			for _, w := range pair.want {
				if w.Name != pair.have[i].Name {
					continue
				}
				r := &pair.have[i].Resources
				changed = follow(&r.Requests, w.Resources.Requests) || changed
				changed = follow(&r.Limits, w.Resources.Limits) || changed
			}
		}
	}
	return out, changed
}

// follow sets the cpu and memory quantities of want in have, and reports
// whether one differed.
func follow(have *corev1.ResourceList, want corev1.ResourceList) bool {
	changed := false
	for _, r := range resizable {
		q, ok := lagsIn(*have, want, r)
		if !ok {
			continue
		}
		if *have == nil {
			*have = corev1.ResourceList{}
		}
		(*have)[r] = q.DeepCopy()
		changed = true
	}
	return changed
}

// lagsIn returns want's quantity of r, and whether have lacks it or holds
// another: whether follow would set it.
func lagsIn(have, want corev1.ResourceList, r corev1.ResourceName) (resource.Quantity, bool) {
	q, ok := want[r]
	if !ok {
		return q, false
	}
	cur, ok := have[r]
	return q, !ok || cur.Cmp(q) != 0
}

// resizable are the resources an in-place resize changes.
var resizable = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// resizeLags reports whether remote's containers do not ask for the
// resources local's ask for yet: whether ResizeRemote would change
// anything. ConsumerView asks for every pod the PodController lists, so it
// reads remote without copying it.
func resizeLags(remote, local *corev1.Pod) bool {
	for _, pair := range []struct{ have, want []corev1.Container }{
		{remote.Spec.InitContainers, local.Spec.InitContainers},
		{remote.Spec.Containers, local.Spec.Containers},
	} {
		for _, h := range pair.have {
			for _, w := range pair.want {
				if w.Name == h.Name && (lags(h.Resources.Requests, w.Resources.Requests) || lags(h.Resources.Limits, w.Resources.Limits)) {
					return true
				}
			}
		}
	}
	return false
}

// lags reports whether have lacks, or differs in, a cpu or memory
// quantity of want: what follow would set.
func lags(have, want corev1.ResourceList) bool {
	for _, r := range resizable {
		if _, ok := lagsIn(have, want, r); ok {
			return true
		}
	}
	return false
}

// updateResources sets the resources of every container in have to those
// of the container of the same name in want.
func updateResources(have, want []corev1.Container) {
	for i := range have {
		for _, w := range want {
			if w.Name == have[i].Name {
				have[i].Resources = *w.Resources.DeepCopy()
			}
		}
	}
}
