package v1alpha1

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// TolerationString writes t as key[=value][:effect]: "=value" for operator
// Equal (or none), nothing for Exists; no effect means every effect. It is
// the form of AnnotationTolerations, of peer generate --toleration and of
// the chart's admission policies, which build it from a pod's tolerations.
func TolerationString(t corev1.Toleration) string {
	s := t.Key
	if t.Operator != corev1.TolerationOpExists {
		s += "=" + t.Value
	}
	if t.Effect != "" {
		s += ":" + string(t.Effect)
	}
	return s
}

// ParseToleration reads key[=value][:effect] (TolerationString's form):
// operator Exists without a value, Equal with one. The key is required,
// the value is a label value and the effect NoSchedule, PreferNoSchedule
// or NoExecute.
func ParseToleration(s string) (corev1.Toleration, error) {
	var t corev1.Toleration
	rest, effect, hasEffect := strings.Cut(s, ":")
	key, value, hasValue := strings.Cut(rest, "=")
	t.Key = key
	t.Operator = corev1.TolerationOpExists
	if hasValue {
		t.Operator, t.Value = corev1.TolerationOpEqual, value
	}
	if hasEffect {
		t.Effect = corev1.TaintEffect(effect)
	}
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return t, fmt.Errorf("toleration %q: key %q is not a valid taint key: %s; write KEY[=VALUE][:EFFECT]", s, key, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(value); hasValue && len(errs) > 0 {
		return t, fmt.Errorf("toleration %q: value %q is not a valid taint value: %s", s, value, strings.Join(errs, "; "))
	}
	effects := []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
	if hasEffect && !slices.Contains(effects, t.Effect) {
		return t, fmt.Errorf("toleration %q: effect %q is not NoSchedule, PreferNoSchedule or NoExecute", s, effect)
	}
	return t, nil
}

// ParseNodeSelector reads key=value pairs, as kubectl's --selector takes
// equality requirements, into a node selector.
func ParseNodeSelector(pairs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range pairs {
		key, value, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("node selector %q: write KEY=VALUE", p)
		}
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return nil, fmt.Errorf("node selector %q: key %q is not a valid label key: %s", p, key, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
			return nil, fmt.Errorf("node selector %q: value %q is not a valid label value: %s", p, value, strings.Join(errs, "; "))
		}
		if prev, dup := out[key]; dup && prev != value {
			return nil, fmt.Errorf("node selector: key %q is given twice, as %q and %q: a node has one value per label", key, prev, value)
		}
		out[key] = value
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// NodeSelectorString writes a node selector as sorted key=value pairs,
// comma-separated: the form of AnnotationNodeSelector.
func NodeSelectorString(sel map[string]string) string {
	pairs := make([]string, 0, len(sel))
	for k, v := range sel {
		pairs = append(pairs, k+"="+v)
	}
	slices.Sort(pairs)
	return strings.Join(pairs, ",")
}

// TolerationsString writes tolerations as TolerationString forms, sorted
// and comma-separated: the form of AnnotationTolerations.
func TolerationsString(ts []corev1.Toleration) string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, TolerationString(t))
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ",")
}
