package offload

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func term(exprs ...corev1.NodeSelectorRequirement) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: exprs}}}
}

func TestASelectorBecomesANodeSelectorWithOneTerm(t *testing.T) {
	tests := []struct {
		name     string
		selector string
		want     *corev1.NodeSelector
		// matches and misses are label sets the selector must match and not.
		matches, misses []labels.Set
	}{
		{name: "an empty selector selects every peer", selector: "", want: nil,
			matches: []labels.Set{{}, {"region": "eu"}}},
		{name: "blanks select every peer", selector: "  ", want: nil},
		{name: "equality becomes In", selector: "offload.io/remote-cluster-id=abc",
			want:    term(corev1.NodeSelectorRequirement{Key: "offload.io/remote-cluster-id", Operator: corev1.NodeSelectorOpIn, Values: []string{"abc"}}),
			matches: []labels.Set{{"offload.io/remote-cluster-id": "abc"}}, misses: []labels.Set{{"offload.io/remote-cluster-id": "def"}, {}}},
		{name: "double equality becomes In", selector: "region==eu",
			want: term(corev1.NodeSelectorRequirement{Key: "region", Operator: corev1.NodeSelectorOpIn, Values: []string{"eu"}})},
		{name: "a set becomes In with sorted values", selector: "region in (us, eu)",
			want:    term(corev1.NodeSelectorRequirement{Key: "region", Operator: corev1.NodeSelectorOpIn, Values: []string{"eu", "us"}}),
			matches: []labels.Set{{"region": "us"}}, misses: []labels.Set{{"region": "ap"}}},
		{name: "inequality becomes NotIn and matches a node without the key", selector: "region!=eu",
			want:    term(corev1.NodeSelectorRequirement{Key: "region", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"eu"}}),
			matches: []labels.Set{{"region": "us"}, {}}, misses: []labels.Set{{"region": "eu"}}},
		{name: "notin becomes NotIn", selector: "region notin (eu,us)",
			want: term(corev1.NodeSelectorRequirement{Key: "region", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"eu", "us"}})},
		{name: "a bare key becomes Exists", selector: "gpu",
			want:    term(corev1.NodeSelectorRequirement{Key: "gpu", Operator: corev1.NodeSelectorOpExists}),
			matches: []labels.Set{{"gpu": ""}}, misses: []labels.Set{{}}},
		{name: "a negated key becomes DoesNotExist", selector: "!gpu",
			want: term(corev1.NodeSelectorRequirement{Key: "gpu", Operator: corev1.NodeSelectorOpDoesNotExist})},
		{name: "greater and less than become Gt and Lt", selector: "tier>1,tier<5",
			want: term(
				corev1.NodeSelectorRequirement{Key: "tier", Operator: corev1.NodeSelectorOpGt, Values: []string{"1"}},
				corev1.NodeSelectorRequirement{Key: "tier", Operator: corev1.NodeSelectorOpLt, Values: []string{"5"}}),
			matches: []labels.Set{{"tier": "3"}}, misses: []labels.Set{{"tier": "7"}}},
		{name: "several requirements are ANDed in one term, sorted by key", selector: "zone=a,region in (eu)",
			want: term(
				corev1.NodeSelectorRequirement{Key: "region", Operator: corev1.NodeSelectorOpIn, Values: []string{"eu"}},
				corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}),
			matches: []labels.Set{{"region": "eu", "zone": "a"}}, misses: []labels.Set{{"region": "eu"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, ns, err := ParseClusterSelector(tt.selector)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(ns, tt.want) {
				t.Errorf("node selector %+v, want %+v", ns, tt.want)
			}
			for _, l := range tt.matches {
				if !sel.Matches(l) {
					t.Errorf("the selector does not match %v", l)
				}
			}
			for _, l := range tt.misses {
				if sel.Matches(l) {
					t.Errorf("the selector matches %v", l)
				}
			}
		})
	}
}

func TestASelectorThatIsNotALabelSelectorIsRefused(t *testing.T) {
	for _, s := range []string{"region in eu", "tier>x", "Bad Key=1", "region=eu,", "a=b=c"} {
		t.Run(s, func(t *testing.T) {
			if _, _, err := ParseClusterSelector(s); err == nil {
				t.Errorf("selector %q was accepted", s)
			}
		})
	}
}
