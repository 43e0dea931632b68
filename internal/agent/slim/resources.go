// Package slim holds what the agent's slim caches share: the pods of a
// workload ask for the same resources, tolerate the same taints and carry
// the same labels and owner, and one copy serves them all.
package slim

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxShared bounds what each table keeps: past it, the table starts over,
// so pods that each carry something else cost no more than without
// sharing.
const maxShared = 1024

// table keeps one value per key, at most maxShared of them.
type table[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

// share returns the value kept for key, or keeps v for it and returns v.
func (t *table[V]) share(key string, v V) V {
	t.mu.Lock()
	defer t.mu.Unlock()
	if have, ok := t.m[key]; ok {
		return have
	}
	if t.m == nil || len(t.m) >= maxShared {
		t.m = map[string]V{}
	}
	t.m[key] = v
	return v
}

// size is how many values t keeps.
func (t *table[V]) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

var (
	lists       table[corev1.ResourceList]
	tolerations table[[]corev1.Toleration]
	labels      table[map[string]string]
	owners      table[[]metav1.OwnerReference]
	containers  table[[]corev1.Container]
)

// What the functions below return is read-only, as everything in an
// informer's cache is: a caller that changes it copies it first. A shared
// slice has no spare capacity, so that an append copies it. Each takes a
// value nobody changes afterwards, which it may return itself.

// Resources returns a list equal to l, the one other callers got for
// an equal list: the pods of a workload ask for the same resources, and a
// list costs more than the rest of a slim pod's spec (a map of two
// quantities is about 700 bytes). Quantities are compared in their
// canonical form: "0.25" and "250m" are one, "64Mi" and "67108864" two
// (they print differently).
func Resources(l corev1.ResourceList) corev1.ResourceList {
	if len(l) == 0 {
		return l
	}
	return lists.share(mapKey(l, func(q resource.Quantity) string { return q.String() }), l)
}

// Requirements is r with Resources' requests and limits.
func Requirements(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	r.Requests, r.Limits = Resources(r.Requests), Resources(r.Limits)
	return r
}

// Containers returns a list equal to cs, the one other callers got for an
// equal list: what a slim cache keeps of a workload's containers (their
// names, images, resources, policies) is the same in each of its pods, and
// a container is some 400 bytes even when little of it is set. Lists are
// compared in their protobuf encoding, which gives each field, and a map's
// entries in the order of their keys.
func Containers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return cs
	}
	var key strings.Builder
	for i := range cs {
		b, err := cs[i].Marshal()
		if err != nil {
			return cs
		}
		fields(&key, string(b))
	}
	return containers.share(key.String(), slices.Clip(cs))
}

// Tolerations returns a list equal to ts, in the same order, the one
// other callers got for an equal list. A pod's tolerations are the
// defaults its API server adds and its workload's: a few hundred bytes.
func Tolerations(ts []corev1.Toleration) []corev1.Toleration {
	if len(ts) == 0 {
		return ts
	}
	var key strings.Builder
	for _, t := range ts {
		seconds := "-"
		if t.TolerationSeconds != nil {
			seconds = strconv.FormatInt(*t.TolerationSeconds, 10)
		}
		fields(&key, t.Key, string(t.Operator), t.Value, string(t.Effect), seconds)
	}
	return tolerations.share(key.String(), slices.Clip(ts))
}

// Labels returns a map equal to m, the one other callers got for an equal
// map: the pods of a ReplicaSet carry the same labels.
func Labels(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	return labels.share(mapKey(m, func(v string) string { return v }), m)
}

// OwnerReferences returns a list equal to refs, the one other callers got
// for an equal list: the pods of a ReplicaSet have the same owner.
func OwnerReferences(refs []metav1.OwnerReference) []metav1.OwnerReference {
	if len(refs) == 0 {
		return refs
	}
	flag := func(b *bool) string {
		if b == nil {
			return "-"
		}
		return strconv.FormatBool(*b)
	}
	var key strings.Builder
	for _, r := range refs {
		fields(&key, r.APIVersion, r.Kind, r.Name, string(r.UID), flag(r.Controller), flag(r.BlockOwnerDeletion))
	}
	return owners.share(key.String(), slices.Clip(refs))
}

// mapKey is the key of map m: its entries in the order of their keys,
// each value as str prints it.
func mapKey[K ~string, V any](m map[K]V, str func(V) string) string {
	var key strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fields(&key, string(k), str(m[k]))
	}
	return key.String()
}

// fields writes each of values to key, prefixed with its length, so that
// no two lists of values make the same key.
func fields(key *strings.Builder, values ...string) {
	for _, v := range values {
		key.WriteString(strconv.Itoa(len(v)))
		key.WriteByte(':')
		key.WriteString(v)
	}
}
