package slim

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func list(cpu, memory string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}
}

func same(a, b corev1.ResourceList) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestEqualListsAreOneList(t *testing.T) {
	first := Resources(list("250m", "64Mi"))
	if got := Resources(list("250m", "64Mi")); !same(got, first) {
		t.Error("two equal lists are two lists")
	}
	if got := Resources(list("0.25", "64Mi")); !same(got, first) {
		t.Error("lists of the same canonical quantities (0.25 and 250m) are two lists")
	}
	if got := Resources(list("250m", "67108864")); same(got, first) || got.Memory().String() != "67108864" {
		t.Errorf("a list that prints differently was answered with the first one: %v", got)
	}
	if got := Resources(list("500m", "64Mi")); same(got, first) || got.Cpu().MilliValue() != 500 {
		t.Errorf("another list was answered with the first one: %v", got)
	}
	r := Requirements(corev1.ResourceRequirements{Requests: list("250m", "64Mi"), Limits: list("250m", "64Mi")})
	if !same(r.Requests, first) || !same(r.Limits, first) {
		t.Error("Requirements does not share its requests and limits")
	}
	if Resources(nil) != nil || len(Resources(corev1.ResourceList{})) != 0 {
		t.Error("an empty list is not answered as it is")
	}
}

// Past maxShared different lists, the table starts over: its size is
// bounded, whatever pods ask for.
func TestTheListsKeptAreBounded(t *testing.T) {
	for i := range 3 * maxShared {
		Resources(list(fmt.Sprintf("%dm", i+1), "1Mi"))
	}
	if n := lists.size(); n > maxShared {
		t.Errorf("%d lists kept, want at most %d", n, maxShared)
	}
}
