// Package children keeps the objects a controller owns as their
// controller: the parts of a peering, each named after its
// ForeignCluster. Ensure creates one, and replaces one that an earlier
// owner of the same name left behind, which the garbage collector has not
// removed yet.
package children

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// Ensure returns the object named as want that owner controls: existing,
// read through reader, when owner controls it; else want, created with
// owner as its controller. An object of that name that owner does not
// control (left by an earlier owner of the same name) is deleted first,
// with a UID precondition, so that a newer one is never deleted.
func Ensure[T client.Object](ctx context.Context, c client.Client, reader client.Reader, owner client.Object, want, existing T) (T, error) {
	kind := fmt.Sprintf("%T", want)
	if gvk, err := apiutil.GVKForObject(want, c.Scheme()); err == nil {
		kind = gvk.Kind
	}
	name := client.ObjectKeyFromObject(want)
	err := reader.Get(ctx, name, existing)
	switch {
	case err == nil && metav1.IsControlledBy(existing, owner):
		return existing, nil
	case err == nil:
		uid := existing.GetUID()
		if err := c.Delete(ctx, existing, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return want, fmt.Errorf("deleting the %s %s of an earlier owner: %w", kind, name, err)
		}
	case !apierrors.IsNotFound(err):
		return want, fmt.Errorf("reading %s %s: %w", kind, name, err)
	}
	if err := controllerutil.SetControllerReference(owner, want, c.Scheme()); err != nil {
		return want, err
	}
	err = c.Create(ctx, want)
	if apierrors.IsAlreadyExists(err) {
		// Created meanwhile: the one there is owner's if it controls it.
		if err := reader.Get(ctx, name, existing); err == nil && metav1.IsControlledBy(existing, owner) {
			return existing, nil
		}
	}
	if err != nil {
		return want, fmt.Errorf("creating %s %s: %w", kind, name, err)
	}
	return want, nil
}
