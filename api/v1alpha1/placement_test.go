package v1alpha1

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestATolerationReadsBackAsItIsWritten(t *testing.T) {
	tests := []struct {
		in   string
		want corev1.Toleration
	}{
		{"dedicated=tenants:NoSchedule", corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tenants", Effect: corev1.TaintEffectNoSchedule}},
		{"dedicated=tenants", corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tenants"}},
		{"kwok.x-k8s.io/node:NoSchedule", corev1.Toleration{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		{"example.com/spot", corev1.Toleration{Key: "example.com/spot", Operator: corev1.TolerationOpExists}},
		{"gpu=:NoExecute", corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpEqual, Effect: corev1.TaintEffectNoExecute}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseToleration(tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("ParseToleration(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
			if s := TolerationString(got); s != tt.in {
				t.Errorf("TolerationString = %q, want %q", s, tt.in)
			}
		})
	}
	t.Run("operator Equal written as the empty operator reads the same", func(t *testing.T) {
		if s := TolerationString(corev1.Toleration{Key: "a", Value: "b"}); s != "a=b" {
			t.Errorf("TolerationString = %q, want a=b", s)
		}
	})
}

func TestABadTolerationIsRefusedWithWhatIsWrong(t *testing.T) {
	for _, tt := range []struct{ in, says string }{
		{"", "not a valid taint key"},
		{"=x", "not a valid taint key"},
		{"a b", "not a valid taint key"},
		{"a=b c", "not a valid taint value"},
		{"a:Sometimes", "not NoSchedule, PreferNoSchedule or NoExecute"},
		{"a:", "not NoSchedule, PreferNoSchedule or NoExecute"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			_, err := ParseToleration(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("ParseToleration(%q) = %v, want an error saying %q", tt.in, err, tt.says)
			}
		})
	}
}

func TestNodeSelectorsAreParsedAndWrittenSorted(t *testing.T) {
	sel, err := ParseNodeSelector([]string{"pool=tenants", "example.com/zone=a", "pool=tenants"})
	if err != nil || len(sel) != 2 || sel["pool"] != "tenants" || sel["example.com/zone"] != "a" {
		t.Fatalf("ParseNodeSelector = %v, %v", sel, err)
	}
	if s := NodeSelectorString(sel); s != "example.com/zone=a,pool=tenants" {
		t.Errorf("NodeSelectorString = %q", s)
	}
	if sel, err := ParseNodeSelector(nil); err != nil || sel != nil {
		t.Errorf("ParseNodeSelector(nil) = %v, %v; want nil", sel, err)
	}
	for _, bad := range [][]string{{"pool"}, {"=x"}, {"pool=a b"}, {"pool=a", "pool=b"}} {
		if _, err := ParseNodeSelector(bad); err == nil {
			t.Errorf("ParseNodeSelector(%q) succeeded, want an error", bad)
		}
	}
}

func TestPoliciesAreEqualOnlyWithTheSameNodesAndTolerations(t *testing.T) {
	base := ConsumerPolicy{NodeSelector: map[string]string{"a": "b"}, Tolerations: []corev1.Toleration{{Key: "t", Operator: corev1.TolerationOpExists}}}
	if !base.Equal(*base.DeepCopy()) {
		t.Error("a policy differs from its copy")
	}
	if !(ConsumerPolicy{}).Equal(ConsumerPolicy{PodSecurity: PodSecurityBaseline}) {
		t.Error("an empty level and baseline differ")
	}
	for name, other := range map[string]ConsumerPolicy{
		"another selector value": {NodeSelector: map[string]string{"a": "c"}, Tolerations: base.Tolerations},
		"no selector":            {Tolerations: base.Tolerations},
		"another toleration":     {NodeSelector: base.NodeSelector, Tolerations: []corev1.Toleration{{Key: "u", Operator: corev1.TolerationOpExists}}},
		"no toleration":          {NodeSelector: base.NodeSelector},
		"node placement":         {NodeSelector: base.NodeSelector, Tolerations: base.Tolerations, NodePlacement: true},
	} {
		if base.Equal(other) {
			t.Errorf("a policy with %s is equal", name)
		}
	}
}
