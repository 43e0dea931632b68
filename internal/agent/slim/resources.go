// Package slim holds what the agent's slim caches share: the pods of a
// workload ask for the same resources, and one list serves them all.
package slim

import (
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// maxSharedLists bounds the lists Resources keeps: past it, it starts
// over, so pods that each ask for something else cost no more than without
// sharing.
const maxSharedLists = 1024

var shared = struct {
	sync.Mutex
	lists map[string]corev1.ResourceList
}{lists: map[string]corev1.ResourceList{}}

// Resources returns a list equal to l, the one other callers got for
// an equal list: the pods of a workload ask for the same resources, and a
// list costs more than the rest of a slim pod's spec (a map of two
// quantities is about 700 bytes). The list returned is read-only, as
// everything in an informer's cache is: a caller that changes a list
// copies it first. Quantities are compared in their canonical form: "0.25"
// and "250m" are one, "64Mi" and "67108864" two (they print differently).
// l must be a list nobody changes afterwards, which it may return itself.
func Resources(l corev1.ResourceList) corev1.ResourceList {
	if len(l) == 0 {
		return l
	}
	names := make([]string, 0, len(l))
	for name := range l {
		names = append(names, string(name))
	}
	slices.Sort(names)
	var key strings.Builder
	for _, name := range names {
		q := l[corev1.ResourceName(name)]
		key.WriteString(name)
		key.WriteByte('=')
		key.WriteString(q.String())
		key.WriteByte(';')
	}
	shared.Lock()
	defer shared.Unlock()
	if have, ok := shared.lists[key.String()]; ok {
		return have
	}
	if len(shared.lists) >= maxSharedLists {
		shared.lists = map[string]corev1.ResourceList{}
	}
	shared.lists[key.String()] = l
	return l
}

// Requirements is r with Resources' requests and limits.
func Requirements(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	r.Requests, r.Limits = Resources(r.Requests), Resources(r.Limits)
	return r
}
