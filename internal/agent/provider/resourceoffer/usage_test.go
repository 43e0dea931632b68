package resourceoffer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// TestTheUsageKeptFromEventsCountsAsARecountOfEveryPod plays random pod
// events (pods bound, moved on in phase, resized, relabelled, deleted,
// some through a tombstone) through Usage's handler, and checks after
// each that what is free, for each tenant, is what Free counts from the
// pods as they are then, and that a step which changed it woke the tenant
// (the origins the handler reports are what the offers' reconciles follow).
func TestTheUsageKeptFromEventsCountsAsARecountOfEveryPod(t *testing.T) {
	nodes := []corev1.Node{
		node("a", "8", "16Gi", "110", true, nil),
		node("b", "4", "8Gi", "110", true, nil),
		node("down", "4", "8Gi", "110", false, nil),
	}
	origins := []string{"", "tenant-a", "tenant-b"}
	cpus := []string{"100m", "250m", "1", "2"}
	phases := []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed}
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(uid int) *corev1.Pod {
		p := pod([]string{"", "a", "b", "down"}[rng.IntN(4)], cpus[rng.IntN(len(cpus))], "1Gi", phases[rng.IntN(len(phases))])
		p = fromConsumer(p, origins[rng.IntN(len(origins))])
		if rng.IntN(5) == 0 {
			p = withSidecar(p, "100m", "500m")
		}
		p.Name, p.Namespace, p.UID = fmt.Sprintf("p%d", uid), "ns", types.UID(fmt.Sprintf("uid-%d", uid))
		return &p
	}
	u := NewUsage()
	var changed []string
	h := u.Handler(func(origin string) { changed = append(changed, origin) })
	wakes := func(tenant string) bool {
		return slices.ContainsFunc(changed, func(o string) bool { return o == "" || o != tenant })
	}
	current := map[types.UID]*corev1.Pod{}
	before := map[string]corev1.ResourceList{}
	for step := range 2000 {
		changed = nil
		uid := rng.IntN(60)
		old, exists := current[types.UID(fmt.Sprintf("uid-%d", uid))]
		switch {
		case !exists:
			p := random(uid)
			current[p.UID] = p
			h.OnAdd(p, false)
		case rng.IntN(4) == 0:
			delete(current, old.UID)
			if rng.IntN(2) == 0 {
				h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/" + old.Name, Obj: old})
			} else {
				h.OnDelete(old)
			}
		default:
			p := random(uid)
			current[p.UID] = p
			h.OnUpdate(old, p)
		}
		var pods []corev1.Pod
		for _, p := range current {
			pods = append(pods, *p)
		}
		for _, tenant := range origins {
			want := Free(nodes, pods, tenant, offloadv1alpha1.ConsumerPolicy{})
			got := freeOf(nodes, u, tenant, offloadv1alpha1.ConsumerPolicy{})
			if !sameResources(got, want) {
				t.Fatalf("step %d, tenant %q: the usage kept from events leaves %v free, a recount %v", step, tenant, got, want)
			}
			if step > 0 && !sameResources(before[tenant], want) && !wakes(tenant) {
				t.Fatalf("step %d changed what is free for tenant %q (%v, then %v) but reported origins %q", step, tenant, before[tenant], want, changed)
			}
			before[tenant] = want
		}
	}
	// Every pod gone: nothing is left of the sums.
	for _, p := range current {
		h.OnDelete(p)
	}
	if len(u.pods) != 0 || len(u.nodes) != 0 {
		t.Errorf("with every pod deleted, the usage still holds %d pods and %d nodes", len(u.pods), len(u.nodes))
	}
}
