package slim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// tolerations are what the API server gives every pod, and the workload's.
func tolerationsOf(workload string) []corev1.Toleration {
	return append(make([]corev1.Toleration, 0, 8),
		corev1.Toleration{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		corev1.Toleration{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		corev1.Toleration{Key: "example.com/" + workload, Operator: corev1.TolerationOpEqual, Value: "yes", Effect: corev1.TaintEffectNoSchedule})
}

func TestEqualTolerationsAreOneList(t *testing.T) {
	first := Tolerations(tolerationsOf("web"))
	if got := Tolerations(tolerationsOf("web")); &got[0] != &first[0] {
		t.Error("two equal lists of tolerations are two lists")
	}
	if got := Tolerations(tolerationsOf("db")); &got[0] == &first[0] || got[2].Key != "example.com/db" {
		t.Errorf("another list was answered with the first one: %v", got)
	}
	other := tolerationsOf("web")
	other[0].TolerationSeconds = ptr.To[int64](30)
	if got := Tolerations(other); &got[0] == &first[0] || *got[0].TolerationSeconds != 30 {
		t.Errorf("a list with other toleration seconds was answered with the first one: %v", got)
	}
	noSeconds := tolerationsOf("web")
	noSeconds[0].TolerationSeconds = nil
	if got := Tolerations(noSeconds); &got[0] == &first[0] {
		t.Error("a toleration without seconds was answered with one that has them")
	}
	reordered := tolerationsOf("web")
	reordered[0], reordered[1] = reordered[1], reordered[0]
	if got := Tolerations(reordered); &got[0] == &first[0] {
		t.Error("a list in another order was answered with the first one")
	}
	// An append to a shared list copies it: it never writes into the list
	// other pods hold.
	if cap(first) != len(first) {
		t.Errorf("a shared list has spare capacity (%d of %d): an append would write into it", cap(first), len(first))
	}
	if Tolerations(nil) != nil {
		t.Error("no tolerations are not answered as they are")
	}
}

func TestEqualLabelsAreOneMap(t *testing.T) {
	labels := func(hash string) map[string]string {
		return map[string]string{"app": "web", "pod-template-hash": hash}
	}
	first := Labels(labels("5d4f"))
	got := Labels(labels("5d4f"))
	got["probe"] = "x" // maps are references: the same map sees it
	if first["probe"] != "x" {
		t.Error("two equal label maps are two maps")
	}
	delete(got, "probe")
	if got := Labels(labels("77aa")); got["pod-template-hash"] != "77aa" {
		t.Errorf("other labels were answered with the first ones: %v", got)
	}
	// "a=b" and "c" against "a" and "b=c": the key separates them.
	one, two := Labels(map[string]string{"a": "b\x00c"}), Labels(map[string]string{"a\x00b": "c"})
	if len(one) != 1 || one["a"] != "b\x00c" || len(two) != 1 || two["a\x00b"] != "c" {
		t.Errorf("maps that run together were confused: %v, %v", one, two)
	}
	if Labels(nil) != nil {
		t.Error("no labels are not answered as they are")
	}
}

func TestEqualOwnerReferencesAreOneList(t *testing.T) {
	owner := func(uid string, controller *bool) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d4f", UID: types.UID("u-" + uid), Controller: controller}}
	}
	first := OwnerReferences(owner("1", ptr.To(true)))
	if got := OwnerReferences(owner("1", ptr.To(true))); &got[0] != &first[0] {
		t.Error("two equal owner lists are two lists")
	}
	if got := OwnerReferences(owner("2", ptr.To(true))); &got[0] == &first[0] {
		t.Error("an owner of another UID was answered with the first one")
	}
	if got := OwnerReferences(owner("1", nil)); &got[0] == &first[0] || got[0].Controller != nil {
		t.Error("an owner that is not the controller was answered with the controller")
	}
	if cap(first) != len(first) {
		t.Error("a shared owner list has spare capacity")
	}
}

// Every table is bounded, whatever pods carry.
func TestEveryTableIsBounded(t *testing.T) {
	for i := range 3 * maxShared {
		Tolerations([]corev1.Toleration{{Key: string(rune('a' + i%26)), Value: string(rune(i))}})
		Labels(map[string]string{"n": string(rune(i))})
		OwnerReferences([]metav1.OwnerReference{{Name: string(rune(i))}})
		String(string(rune(i)))
		Containers([]corev1.Container{{Name: string(rune(i))}})
	}
	for name, n := range map[string]int{"tolerations": tolerations.size(), "labels": labels.size(), "owners": owners.size(),
		"strings": strs.size(), "containers": containers.size()} {
		if n > maxShared {
			t.Errorf("%d %s kept, want at most %d", n, name, maxShared)
		}
	}
}
