package daemonset

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
)

// The agent's changes to a DaemonSet are a patch of what Reconcile changed,
// so the fields its types do not know (those of a newer API server) stay.
func TestTheAgentsPatchKeepsFieldsItsTypesDoNotKnow(t *testing.T) {
	for name, ds := range map[string]func() *corev1.Affinity{
		"without affinity":       func() *corev1.Affinity { return nil },
		"with a term of its own": func() *corev1.Affinity { return required(term(linuxOnly)) },
		"with terms and fields": func() *corev1.Affinity {
			return required(term(linuxOnly), corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{named}})
		},
	} {
		before := daemonSet([]corev1.Toleration{everyTaint}, nil, ds())
		after := before.DeepCopy()
		if !Reconcile(after, tainted) {
			t.Fatalf("%s: Reconcile changed nothing", name)
		}
		ops, err := changes(before, after)
		if err != nil {
			t.Fatal(err)
		}
		// The object as the API server has it: with a field this agent's
		// types do not know, in the pod template and at the top.
		raw, err := json.Marshal(before)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := json.Unmarshal(raw, &obj); err != nil {
			t.Fatal(err)
		}
		obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["futureField"] = "kept"
		obj["spec"].(map[string]any)["futureSpecField"] = map[string]any{"x": 1.0}
		raw, _ = json.Marshal(obj)
		opsJSON, _ := json.Marshal(ops)
		patch, err := jsonpatch.DecodePatch(opsJSON)
		if err != nil {
			t.Fatal(err)
		}
		patched, err := patch.Apply(raw)
		if err != nil {
			t.Fatalf("%s: applying %s: %v", name, opsJSON, err)
		}
		if !strings.Contains(string(patched), `"futureField":"kept"`) || !strings.Contains(string(patched), `"futureSpecField":{"x":1}`) {
			t.Errorf("%s: the patch %s dropped fields the agent does not know: %s", name, opsJSON, patched)
		}
		for _, op := range ops {
			if !strings.HasPrefix(op.Path, "/spec/template/spec/affinity") && !strings.HasPrefix(op.Path, "/metadata/annotations") {
				t.Errorf("%s: the patch touches %s %s", name, op.Operation, op.Path)
			}
		}
	}
}
