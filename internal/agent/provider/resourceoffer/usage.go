package resourceoffer

import (
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/cache"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/slim"
)

// Usage is what the pods bound to each node request, by node and by the
// cluster ID of the consumer each pod comes from ("" for the provider's
// own): what Free subtracts from the nodes' allocatable. It is kept up to
// date pod by pod from the pod informer's events (Handler), so that a
// count of the free resources costs the nodes, not every pod of the
// cluster: a recount every MinUpdateInterval would list and add up all of
// them, which at ten thousand pods was most of what a provider's own pods
// cost the agent.
type Usage struct {
	mu sync.Mutex
	// pods is each counted pod's contribution, by UID.
	pods map[string]podUse
	// nodes is the sum of the contributions, by node and origin.
	nodes map[string]map[string]*use
}

// podUse is what one pod counts for: its node, its origin and its
// requests (the scheduler's arithmetic).
type podUse struct {
	node, origin string
	requests     corev1.ResourceList
}

// use is what the pods of one node and origin request.
type use struct {
	pods     int64
	requests corev1.ResourceList
}

// NewUsage returns an empty Usage.
func NewUsage() *Usage {
	return &Usage{pods: map[string]podUse{}, nodes: map[string]map[string]*use{}}
}

// usageOf is the Usage of pods, each counted once whatever its UID.
func usageOf(pods []corev1.Pod) *Usage {
	u := NewUsage()
	for i := range pods {
		u.set(strconv.Itoa(i), &pods[i])
	}
	return u
}

// Set counts pod as it is now: bound to a node and neither Succeeded nor
// Failed, or not at all. It returns the origins whose use changed: none
// when the pod counts as it did (a status update, most of a pod's events),
// else its origin before and after (one when they are the same).
func (u *Usage) Set(pod *corev1.Pod) []string {
	return u.set(string(pod.UID), pod)
}

// set counts pod under key.
func (u *Usage) set(key string, pod *corev1.Pod) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	was, had := u.pods[key]
	if pod.Spec.NodeName == "" || finished(pod) {
		if !had {
			return nil
		}
		u.remove(key)
		return []string{was.origin}
	}
	p := podUse{node: pod.Spec.NodeName, origin: pod.Labels[offloadv1alpha1.LabelOriginClusterID], requests: slim.Resources(podRequests(pod))}
	if had && was.node == p.node && was.origin == p.origin && sameResources(was.requests, p.requests) {
		return nil
	}
	u.remove(key)
	u.pods[key] = p
	byOrigin := u.nodes[p.node]
	if byOrigin == nil {
		byOrigin = map[string]*use{}
		u.nodes[p.node] = byOrigin
	}
	sum := byOrigin[p.origin]
	if sum == nil {
		sum = &use{requests: corev1.ResourceList{}}
		byOrigin[p.origin] = sum
	}
	sum.pods++
	for r, q := range p.requests {
		total := sum.requests[r]
		total.Add(q)
		sum.requests[r] = total
	}
	if had && was.origin != p.origin {
		return []string{was.origin, p.origin}
	}
	return []string{p.origin}
}

// Delete stops counting pod. It returns the pod's origin when it was
// counted, else nothing.
func (u *Usage) Delete(pod *corev1.Pod) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	was, had := u.pods[string(pod.UID)]
	if !had {
		return nil
	}
	u.remove(string(pod.UID))
	return []string{was.origin}
}

// remove takes the contribution of the pod under key out of the sums.
func (u *Usage) remove(key string) {
	p, ok := u.pods[key]
	if !ok {
		return
	}
	delete(u.pods, key)
	byOrigin := u.nodes[p.node]
	sum := byOrigin[p.origin]
	sum.pods--
	for r, q := range p.requests {
		total := sum.requests[r]
		total.Sub(q)
		sum.requests[r] = total
	}
	if sum.pods == 0 {
		delete(byOrigin, p.origin)
		if len(byOrigin) == 0 {
			delete(u.nodes, p.node)
		}
	}
}

// subtract takes from total what the pods on the usable nodes request,
// but those of the consumer whose cluster ID is tenant ("" for none).
func (u *Usage) subtract(total map[corev1.ResourceName]*resource.Quantity, usable map[string]bool, tenant string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for node := range usable {
		for origin, sum := range u.nodes[node] {
			if tenant != "" && origin == tenant {
				continue
			}
			total[corev1.ResourcePods].Sub(*resource.NewQuantity(sum.pods, resource.DecimalSI))
			for r, q := range sum.requests {
				if t, ok := total[r]; ok {
					t.Sub(q)
				}
			}
		}
	}
}

// Handler keeps u up to date with the events of a pod informer, and calls
// changed (when not nil) with each origin whose use an event changed.
func (u *Usage) Handler(changed func(origin string)) cache.ResourceEventHandler {
	notify := func(origins []string) {
		if changed != nil {
			for _, o := range origins {
				changed(o)
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				notify(u.Set(p))
			}
		},
		UpdateFunc: func(old, obj any) {
			p, ok := obj.(*corev1.Pod)
			if !ok {
				return
			}
			if o, ok := old.(*corev1.Pod); ok && countsAsBefore(o, p) {
				return
			}
			notify(u.Set(p))
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				notify(u.Delete(p))
			}
		},
	}
}

// countsAsBefore tells, without adding up requests, that cur counts as old
// did: same node, origin and requests, and neither or both finished. It
// is the quick answer for a pod's status updates, where the cache's slim
// pods share their container lists (slim.Containers); when it cannot tell,
// it says no, and Set compares what the pod requests.
func countsAsBefore(old, cur *corev1.Pod) bool {
	same := func(a, b []corev1.Container) bool {
		return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
	}
	return old.Spec.NodeName == cur.Spec.NodeName && finished(old) == finished(cur) &&
		old.Labels[offloadv1alpha1.LabelOriginClusterID] == cur.Labels[offloadv1alpha1.LabelOriginClusterID] &&
		same(old.Spec.Containers, cur.Spec.Containers) && same(old.Spec.InitContainers, cur.Spec.InitContainers) &&
		old.Spec.Overhead == nil && cur.Spec.Overhead == nil && old.Spec.Resources == nil && cur.Spec.Resources == nil
}

// finished tells whether p has ended (Succeeded or Failed): it no longer
// counts against its node.
func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
