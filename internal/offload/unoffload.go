package offload

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
)

// UnoffloadOptions are the options of `kubectl offload unoffload namespace NS`.
type UnoffloadOptions struct {
	genericiooptions.IOStreams

	// Namespace is NS, the namespace to stop offloading.
	Namespace string
	// IgnoreNotFound treats a namespace that is not offloaded as done.
	IgnoreNotFound bool
	// Wait waits until the agent removed the remote pods and twin namespaces.
	Wait bool
	// Timeout bounds the wait.
	Timeout time.Duration

	args             []string
	installNamespace string
	client           client.Client
	pollInterval     time.Duration
}

// NewUnoffloadOptions returns UnoffloadOptions with defaults.
func NewUnoffloadOptions(streams genericiooptions.IOStreams) *UnoffloadOptions {
	return &UnoffloadOptions{IOStreams: streams, Wait: true, Timeout: DefaultTimeout, pollInterval: pollInterval}
}

// Complete takes NS from args and builds the client.
func (o *UnoffloadOptions) Complete(f factory.Factory, args []string) error {
	o.args = args
	if len(args) > 0 {
		o.Namespace = args[0]
	}
	o.installNamespace = f.Namespace()
	c, err := f.Client()
	if err != nil {
		return err
	}
	o.client = c
	return nil
}

// Validate checks the arguments and flags offline.
func (o *UnoffloadOptions) Validate() error {
	if len(o.args) != 1 {
		return errors.New("exactly one namespace is expected: kubectl offload unoffload namespace NS")
	}
	if err := validateNamespaceName(o.Namespace); err != nil {
		return err
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be more than 0, got %s", o.Timeout)
	}
	return nil
}

// Run deletes the NamespaceOffloading of NS and, with Wait, waits until the
// agent's finalizer let it go, which it does once the remote pods and twin
// namespaces are removed.
func (o *UnoffloadOptions) Run(ctx context.Context) error {
	if _, err := getNamespace(ctx, o.client, o.Namespace); err != nil {
		if o.IgnoreNotFound && errors.Is(err, ErrNamespaceNotFound) {
			return nil
		}
		return err
	}
	no, err := getNamespaceOffloading(ctx, o.client, o.Namespace)
	switch {
	case errors.Is(err, ErrNotInstalled) && o.IgnoreNotFound:
		return nil
	case errors.Is(err, ErrNotInstalled):
		return newError(ErrNotOffloaded, "namespace %s is not offloaded: kubectl-offload is not installed on this cluster", o.Namespace)
	case err != nil:
		return err
	case no == nil && o.IgnoreNotFound:
		return nil
	case no == nil:
		return newError(ErrNotOffloaded, "namespace %s is not offloaded (it has no NamespaceOffloading)", o.Namespace)
	}
	if err := o.client.Delete(ctx, no); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting NamespaceOffloading %s/%s: %w", no.Namespace, no.Name, err)
	}
	fmt.Fprintf(o.Out, "namespaceoffloading.offload.io/%s deleted\n", no.Name)
	if !o.Wait {
		return nil
	}
	return o.wait(ctx, no)
}

// wait waits until the NamespaceOffloading is gone, showing each twin
// namespace as it leaves the status.
func (o *UnoffloadOptions) wait(ctx context.Context, no *offloadv1alpha1.NamespaceOffloading) error {
	steps := output.NewSteps(o.ErrOut)
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	remaining := map[string]offloadv1alpha1.RemoteNamespaceStatus{}
	for _, rn := range no.Status.RemoteNamespaces {
		remaining[rn.ClusterID] = rn
	}
	reportRemoved := func(current map[string]bool) {
		ids := make([]string, 0, len(remaining))
		for id := range remaining {
			if !current[id] {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		for _, id := range ids {
			rn := remaining[id]
			delete(remaining, id)
			steps.Done(fmt.Sprintf("%s: twin namespace %s removed", peerName(rn), rn.RemoteNamespace))
		}
	}
	var last *offloadv1alpha1.NamespaceOffloading
	err := waitNamespaceOffloading(ctx, o.client, o.Namespace, o.pollInterval, func(no *offloadv1alpha1.NamespaceOffloading) (bool, error) {
		current := map[string]bool{}
		if no != nil {
			last = no
			for _, rn := range no.Status.RemoteNamespaces {
				current[rn.ClusterID] = true
				if _, known := remaining[rn.ClusterID]; !known {
					remaining[rn.ClusterID] = rn
				}
			}
		}
		reportRemoved(current)
		return no == nil, nil
	})
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return newError(ErrTimeout, "namespace %s is still being unoffloaded after %s (--timeout)%s; the agent removes the remote pods and twin namespaces before the NamespaceOffloading goes: see kubectl get namespaceoffloading -n %s %s -o yaml and the controller-manager logs (kubectl logs -n %s deploy/offload-controller-manager)",
			o.Namespace, o.Timeout, removalDetail(last), o.Namespace, offloadv1alpha1.NamespaceOffloadingName, o.installNamespace)
	case err != nil:
		return err
	}
	steps.Done(fmt.Sprintf("Namespace %s is no longer offloaded", o.Namespace))
	return nil
}

// removalDetail says what the removal was still waiting for.
func removalDetail(no *offloadv1alpha1.NamespaceOffloading) string {
	if no == nil {
		return ""
	}
	var parts []string
	for _, rn := range no.Status.RemoteNamespaces {
		s := fmt.Sprintf("twin namespace %s on %s is %s", rn.RemoteNamespace, peerName(rn), rn.Phase)
		if rn.Message != "" {
			s += " (" + rn.Message + ")"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 && len(no.Finalizers) > 0 {
		parts = append(parts, "finalizers "+strings.Join(no.Finalizers, ", ")+" remain")
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}
