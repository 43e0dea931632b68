// Package waitfor waits for one Kubernetes object to reach a state, the way
// the commands that --wait need it: it lists once, then follows the changes
// with client-go's RetryWatcher (which resumes a broken watch from the last
// version it saw), lists again when the watch cannot resume, and lists
// every interval when the client cannot watch, until the deadline.
package waitfor

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Object waits until cond holds for the object key, cond fails, or ctx
// ends. list is an empty list of the object's kind. cond gets the object,
// or nil when it does not exist (any more); its error ends the wait at once
// and is returned as it is. The objects of the kind in key's namespace are
// listed and watched, and the others ignored: no field selector, which any
// client, fakes included, can serve. interval is the pause before listing
// again, after a failed list or a watch that could not resume.
//
// When ctx ends first, Object returns ctx.Err().
func Object[T client.Object](ctx context.Context, c client.Client, list client.ObjectList, key types.NamespacedName,
	interval time.Duration, cond func(T) (bool, error)) error {
	wc, canWatch := c.(client.WithWatch)
	for {
		fresh := newList(list)
		if err := c.List(ctx, fresh, client.InNamespace(key.Namespace)); err == nil {
			if done, err := cond(find[T](fresh, key)); done || err != nil {
				return err
			}
			if rv := fresh.GetResourceVersion(); canWatch && rv != "" && rv != "0" {
				if done, err := follow(ctx, wc, list, key, rv, cond); done || err != nil {
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

// follow watches the objects of list's kind in key's namespace from
// resource version rv until cond holds for key, cond fails, ctx ends, or
// the watch cannot resume (done false, no error: list again).
func follow[T client.Object](ctx context.Context, wc client.WithWatch, list client.ObjectList, key types.NamespacedName, rv string,
	cond func(T) (bool, error)) (bool, error) {
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		return wc.Watch(ctx, newList(list), &client.ListOptions{Namespace: key.Namespace, Raw: &opts})
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, lw)
	if err != nil {
		return false, nil
	}
	defer rw.Stop()
	_, err = watchtools.UntilWithoutRetry(ctx, rw, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Error {
			return false, errWatchEnded
		}
		o, ok := ev.Object.(T)
		if !ok || o.GetName() != key.Name || o.GetNamespace() != key.Namespace {
			return false, nil
		}
		if ev.Type == watch.Deleted {
			var none T
			o = none
		}
		return cond(o)
	})
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.Is(err, errWatchEnded), errors.Is(err, watchtools.ErrWatchClosed):
		return false, nil
	}
	return false, err // cond's
}

// errWatchEnded is a watch that reported an error, such as an expired
// resource version: the wait lists again.
var errWatchEnded = errors.New("the watch ended")

// newList returns a new empty list of list's kind.
func newList(list client.ObjectList) client.ObjectList {
	fresh, _ := list.DeepCopyObject().(client.ObjectList)
	return fresh
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
