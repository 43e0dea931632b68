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
// Failed, or not at all.
func (u *Usage) Set(pod *corev1.Pod) {
	u.set(string(pod.UID), pod)
}

// set counts pod under key.
func (u *Usage) set(key string, pod *corev1.Pod) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.remove(key)
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return
	}
	p := podUse{node: pod.Spec.NodeName, origin: pod.Labels[offloadv1alpha1.LabelOriginClusterID], requests: slim.Resources(podRequests(pod))}
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
}

// Delete stops counting pod.
func (u *Usage) Delete(pod *corev1.Pod) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.remove(string(pod.UID))
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

// Handler keeps u up to date with the events of a pod informer.
func (u *Usage) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				u.Set(p)
			}
		},
		UpdateFunc: func(_, obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				u.Set(p)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				u.Delete(p)
			}
		},
	}
}
