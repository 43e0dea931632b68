// Package waitfor waits for one Kubernetes object to reach a state, the way
// the commands that --wait need it: by watch when the client can, by listing
// every interval otherwise, surviving broken watches until the deadline.
package waitfor

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Object waits until cond holds for the object key, cond fails, or ctx
// ends. list is an empty list of the object's kind. cond gets the object,
// or nil once it is gone; its error ends the wait at once. The objects of
// the kind in key's namespace are listed and watched, and the others
// ignored: no field selector, which any client, fakes included, can serve.
func Object[T client.Object](ctx context.Context, c client.Client, list client.ObjectList, key types.NamespacedName,
	interval time.Duration, cond func(T) (bool, error)) error {
	var opts []client.ListOption
	if key.Namespace != "" {
		opts = append(opts, client.InNamespace(key.Namespace))
	}
	wc, canWatch := c.(client.WithWatch)
	for {
		fresh, _ := list.DeepCopyObject().(client.ObjectList)
		if err := c.List(ctx, fresh, opts...); err == nil {
			if done, err := cond(find[T](fresh, key)); done || err != nil {
				return err
			}
			if canWatch {
				if done, err := watchUntil(ctx, wc, fresh, key, cond); done || err != nil {
					return err
				}
			}
		}
		select { // transient: the deadline decides
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// find returns the object key of list, or nil.
func find[T client.Object](list client.ObjectList, key types.NamespacedName) T {
	var none T
	items, err := meta.ExtractList(list)
	if err != nil {
		return none
	}
	for _, item := range items {
		if o, ok := item.(T); ok && o.GetName() == key.Name && o.GetNamespace() == key.Namespace {
			return o
		}
	}
	return none
}

// watchUntil follows the objects listed in list from its resourceVersion on
// until cond holds for key, cond fails, or the watch ends.
func watchUntil[T client.Object](ctx context.Context, wc client.WithWatch, list client.ObjectList, key types.NamespacedName, cond func(T) (bool, error)) (bool, error) {
	w, err := wc.Watch(ctx, list, &client.ListOptions{Namespace: key.Namespace, Raw: &metav1.ListOptions{ResourceVersion: list.GetResourceVersion()}})
	if err != nil {
		return false, nil
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return false, nil
			}
			o, isT := ev.Object.(T)
			if !isT || o.GetName() != key.Name || o.GetNamespace() != key.Namespace {
				continue
			}
			if ev.Type == watch.Deleted {
				var none T
				o = none
			}
			if done, err := cond(o); done || err != nil {
				return done, err
			}
		}
	}
}
