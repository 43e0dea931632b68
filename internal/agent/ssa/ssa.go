// Package ssa writes the status of the agent's objects with server-side
// apply: each controller names itself as the field manager of what it
// writes, so that one object's status fields have one writer each, which
// the API server records (kubectl get -o yaml --show-managed-fields).
package ssa

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// ApplyStatus applies status as the whole status of obj, as field manager
// manager: the fields manager wrote before and status leaves out are
// removed, the others' fields are kept. obj names the object; its own
// status is not read.
func ApplyStatus(ctx context.Context, c client.Client, obj client.Object, status any, manager string) error {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return err
	}
	var st map[string]any
	b, err := json.Marshal(status)
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		return fmt.Errorf("converting the status of %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	metadata := map[string]any{"name": obj.GetName()}
	if ns := obj.GetNamespace(); ns != "" {
		metadata["namespace"] = ns
	}
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": metadata, "status": st}}
	u.SetGroupVersionKind(gvk)
	return c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(manager), client.ForceOwnership)
}
