package offload

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// virtualNodeSelectorExample shows a selector in messages.
const virtualNodeSelectorExample = offloadv1alpha1.LabelRemoteClusterID + "=ID"

// ParseClusterSelector parses s, a label selector on the labels of virtual
// nodes as `kubectl get nodes -l` takes it, and returns it both as a
// labels.Selector, to match virtual nodes with, and as the node selector
// stored in a NamespaceOffloading's clusterSelector.
//
// The node selector has a single term, so its match expressions are ANDed
// like the requirements of the label selector, one expression per
// requirement, sorted by key:
//
//	key=v, key==v, key in (a,b)   → In
//	key!=v, key notin (a,b)       → NotIn
//	key                           → Exists
//	!key                          → DoesNotExist
//	key>N, key<N                  → Gt, Lt
//
// Node affinity gives NotIn and DoesNotExist the meaning the label selector
// gives them (a node without the key matches), so the conversion is exact.
// An empty s selects every peer and gives a nil node selector. A selector
// using an operator with no node selector counterpart is rejected.
func ParseClusterSelector(s string) (labels.Selector, *corev1.NodeSelector, error) {
	if strings.TrimSpace(s) == "" {
		return labels.Everything(), nil, nil
	}
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid --selector %q: %w (want a label selector on virtual-node labels, e.g. %s or \"region in (eu)\")", s, err, virtualNodeSelectorExample)
	}
	reqs, selectable := sel.Requirements()
	if !selectable {
		return nil, nil, fmt.Errorf("invalid --selector %q: it selects nothing", s)
	}
	if len(reqs) == 0 {
		return labels.Everything(), nil, nil
	}
	term := corev1.NodeSelectorTerm{}
	for _, r := range reqs {
		expr := corev1.NodeSelectorRequirement{Key: r.Key()}
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			expr.Operator = corev1.NodeSelectorOpIn
		case selection.NotEquals, selection.NotIn:
			expr.Operator = corev1.NodeSelectorOpNotIn
		case selection.Exists:
			expr.Operator = corev1.NodeSelectorOpExists
		case selection.DoesNotExist:
			expr.Operator = corev1.NodeSelectorOpDoesNotExist
		case selection.GreaterThan:
			expr.Operator = corev1.NodeSelectorOpGt
		case selection.LessThan:
			expr.Operator = corev1.NodeSelectorOpLt
		default:
			return nil, nil, fmt.Errorf("invalid --selector %q: operator %q of %q cannot be expressed as a node selector; use =, !=, in, notin, exists, !key, > or <", s, r.Operator(), r.Key())
		}
		if expr.Operator != corev1.NodeSelectorOpExists && expr.Operator != corev1.NodeSelectorOpDoesNotExist {
			expr.Values = r.ValuesUnsorted()
			sort.Strings(expr.Values)
		}
		term.MatchExpressions = append(term.MatchExpressions, expr)
	}
	return sel, &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}, nil
}
