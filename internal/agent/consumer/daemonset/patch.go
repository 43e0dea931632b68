package daemonset

import (
	"encoding/json"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	appsv1 "k8s.io/api/apps/v1"
)

// changes returns the JSON patch from before to after, both as this
// agent's types see them: it touches only what Reconcile changed, so the
// fields of the object that these types do not know (a newer API server's)
// are kept, where a patch from the request's raw object would remove them.
func changes(before, after *appsv1.DaemonSet) ([]jsonpatch.JsonPatchOperation, error) {
	a, err := json.Marshal(before)
	if err != nil {
		return nil, fmt.Errorf("encoding the DaemonSet: %w", err)
	}
	b, err := json.Marshal(after)
	if err != nil {
		return nil, fmt.Errorf("encoding the mutated DaemonSet: %w", err)
	}
	return jsonpatch.CreatePatch(a, b)
}
