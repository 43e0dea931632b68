package namespaceoffloading

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

func TestMatchesReadsANodeSelectorLikeTheScheduler(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "offload-eu", Labels: map[string]string{"region": "eu", "tier": "3"}}}
	req := func(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
	}
	term := func(reqs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: reqs}
	}
	for _, tc := range []struct {
		name  string
		terms []corev1.NodeSelectorTerm
		want  bool
	}{
		{"a term with a matching In requirement matches", []corev1.NodeSelectorTerm{term(req("region", corev1.NodeSelectorOpIn, "eu", "us"))}, true},
		{"a term with a failing requirement does not match", []corev1.NodeSelectorTerm{term(req("region", corev1.NodeSelectorOpIn, "eu"), req("tier", corev1.NodeSelectorOpGt, "5"))}, false},
		{"terms are ORed", []corev1.NodeSelectorTerm{term(req("region", corev1.NodeSelectorOpIn, "us")), term(req("tier", corev1.NodeSelectorOpLt, "5"))}, true},
		{"NotIn and DoesNotExist match what is absent", []corev1.NodeSelectorTerm{term(req("region", corev1.NodeSelectorOpNotIn, "us"), req("gpu", corev1.NodeSelectorOpDoesNotExist))}, true},
		{"Exists needs the label", []corev1.NodeSelectorTerm{term(req("gpu", corev1.NodeSelectorOpExists))}, false},
		{"an empty term matches nothing", []corev1.NodeSelectorTerm{{}}, false},
		{"an invalid operator matches nothing", []corev1.NodeSelectorTerm{term(req("region", "Near", "eu"))}, false},
		{"a metadata.name field matches the node name", []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{req("metadata.name", corev1.NodeSelectorOpIn, "offload-eu")}}}, true},
		{"another name does not match", []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{req("metadata.name", corev1.NodeSelectorOpIn, "offload-us")}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := matches(&corev1.NodeSelector{NodeSelectorTerms: tc.terms}, node); got != tc.want {
				t.Errorf("matches = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPendingDelayGrowsWithTheTimeSinceTheLastChange(t *testing.T) {
	now := time.Now()
	for _, tt := range []struct {
		age  time.Duration
		want time.Duration
	}{
		{0, minPendingRequeue},
		{3 * time.Second, 1500 * time.Millisecond},
		{time.Hour, pendingRequeue},
	} {
		no := &offloadv1alpha1.NamespaceOffloading{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-tt.age))}}
		if got := pendingDelay(no, now); got != tt.want {
			t.Errorf("pendingDelay after %s = %s, want %s", tt.age, got, tt.want)
		}
	}
}
