package peer

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// DefaultUnpeerTimeout is how long unpeer waits by default.
const DefaultUnpeerTimeout = time.Minute

// forceAgentWait is how long unpeer --force lets the agent clean up before
// it removes what is left itself.
const forceAgentWait = 20 * time.Second

// UnpeerOptions are the options of `kubectl offload unpeer`.
type UnpeerOptions struct {
	genericiooptions.IOStreams

	// Name is the peer: a ForeignCluster on a consumer, a Tenant on a provider.
	Name string
	// Force removes the peering on this side even when the provider cannot
	// be reached or the agent is not running.
	Force bool
	// Timeout bounds the wait for each side's cleanup.
	Timeout time.Duration

	extraArgs    int
	namespace    string
	client       client.Client
	pollInterval time.Duration
	agentWait    time.Duration
}

// NewUnpeerOptions returns UnpeerOptions with defaults.
func NewUnpeerOptions(streams genericiooptions.IOStreams) *UnpeerOptions {
	return &UnpeerOptions{IOStreams: streams, Timeout: DefaultUnpeerTimeout, pollInterval: pollInterval, agentWait: forceAgentWait}
}

// Complete takes the peer's name from args and builds the client.
func (o *UnpeerOptions) Complete(f factory.Factory, args []string) error {
	if len(args) > 0 {
		o.Name = args[0]
		o.extraArgs = len(args) - 1
	}
	o.namespace = f.Namespace()
	c, err := f.Client()
	if err != nil {
		return err
	}
	o.client = c
	return nil
}

// Validate checks the arguments.
func (o *UnpeerOptions) Validate() error {
	if o.Name == "" || o.extraArgs > 0 {
		return errors.New("exactly one NAME is expected: kubectl offload unpeer NAME (kubectl get foreignclusters lists the peers)")
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be more than 0, got %s", o.Timeout)
	}
	return nil
}

// Run removes the peering with Name: as a consumer, the ForeignCluster, its
// virtual node and Secrets, after the provider removed this cluster's
// tenant; as a provider, the consumer's Tenant, which revokes its
// credentials. A cluster that is both does both.
func (o *UnpeerOptions) Run(ctx context.Context) error {
	var fc offloadv1alpha1.ForeignCluster
	fcErr := o.client.Get(ctx, types.NamespacedName{Name: o.Name}, &fc)
	if fcErr != nil && !apierrors.IsNotFound(fcErr) {
		return fmt.Errorf("reading ForeignCluster %s: %w", o.Name, fcErr)
	}
	var tenant offloadv1alpha1.Tenant
	tenantErr := o.client.Get(ctx, types.NamespacedName{Name: o.Name}, &tenant)
	if tenantErr != nil && !apierrors.IsNotFound(tenantErr) && !meta.IsNoMatchError(tenantErr) {
		return fmt.Errorf("reading Tenant %s: %w", o.Name, tenantErr)
	}
	if meta.IsNoMatchError(fcErr) {
		return errors.New("the ForeignCluster CRD is missing: kubectl-offload is not installed on this cluster (kubectl offload install)")
	}
	// A ForeignCluster the provider's agent made to record a consumer goes
	// with its Tenant.
	incomingOnly := fcErr == nil && fc.Labels[offloadv1alpha1.LabelIncomingOnly] == "true"
	consumer := fcErr == nil && !incomingOnly
	provider := tenantErr == nil
	if !consumer && !provider && !incomingOnly {
		return fmt.Errorf("no peer %q: neither a ForeignCluster nor a Tenant has that name; kubectl get foreignclusters lists the peers", o.Name)
	}
	steps := output.NewSteps(o.ErrOut)
	if consumer {
		if err := o.unpeerConsumer(ctx, steps, &fc); err != nil {
			return err
		}
	}
	if provider {
		if err := o.unpeerProvider(ctx, steps, &tenant); err != nil {
			return err
		}
	}
	if incomingOnly {
		if err := o.client.Delete(ctx, &fc); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting ForeignCluster %s: %w", o.Name, err)
		}
	}
	fmt.Fprintf(o.Out, "unpeered %s\n", o.Name)
	return nil
}

// unpeerConsumer deletes the ForeignCluster and waits while the agent gets
// the provider to remove the tenant and deletes the virtual node and the
// Secrets.
func (o *UnpeerOptions) unpeerConsumer(ctx context.Context, steps *output.Steps, fc *offloadv1alpha1.ForeignCluster) error {
	if o.Force && fc.Annotations[offloadv1alpha1.AnnotationForceUnpeer] != "true" {
		patch := client.MergeFrom(fc.DeepCopy())
		if fc.Annotations == nil {
			fc.Annotations = map[string]string{}
		}
		fc.Annotations[offloadv1alpha1.AnnotationForceUnpeer] = "true"
		if err := o.client.Patch(ctx, fc, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("marking ForeignCluster %s for a forced unpeering: %w", o.Name, err)
		}
	}
	if err := o.client.Delete(ctx, fc); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting ForeignCluster %s: %w", o.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if o.Force {
		return o.forceConsumer(ctx, steps, fc)
	}
	err := steps.Run("The provider removed this cluster's tenant", func() error {
		var failed error
		err := waitForeignCluster(ctx, o.client, o.Name, o.pollInterval, func(fc *offloadv1alpha1.ForeignCluster) (bool, error) {
			if fc == nil || !controllerutil.ContainsFinalizer(fc, offloadv1alpha1.FinalizerUnpeer) {
				return true, nil
			}
			if c := meta.FindStatusCondition(fc.Status.Conditions, offloadv1alpha1.ConditionUnpeered); c != nil && c.Status == metav1.ConditionFalse {
				failed = errors.New(c.Message)
				return true, nil
			}
			return false, nil
		})
		if failed != nil {
			return failed
		}
		if err != nil {
			return fmt.Errorf("the agent did not finish within %s (--timeout): is offload-controller-manager running? kubectl offload status shows it; --force removes the peering on this side only", o.Timeout)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("unpeering %s: %w", o.Name, err)
	}
	return o.waitGone(ctx, steps)
}

// waitGone waits until the virtual node and the ForeignCluster are gone.
func (o *UnpeerOptions) waitGone(ctx context.Context, steps *output.Steps) error {
	node := offloadv1alpha1.VirtualNodeName(o.Name)
	if err := steps.Run("Virtual node "+node+" removed", func() error {
		return o.poll(ctx, func(ctx context.Context) (bool, error) {
			err := o.client.Get(ctx, types.NamespacedName{Name: node}, &corev1.Node{})
			return apierrors.IsNotFound(err), nil
		})
	}); err != nil {
		return fmt.Errorf("unpeering %s: %w", o.Name, err)
	}
	if err := steps.Run("ForeignCluster "+o.Name+" deleted", func() error {
		err := waitForeignCluster(ctx, o.client, o.Name, o.pollInterval, func(fc *offloadv1alpha1.ForeignCluster) (bool, error) {
			return fc == nil, nil
		})
		if err != nil {
			return fmt.Errorf("is still there after %s (--timeout): kubectl get foreignclusters %s -o yaml shows what holds it", o.Timeout, o.Name)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("unpeering %s: %w", o.Name, err)
	}
	return nil
}

// forceConsumer lets the agent remove the peering without calling the
// provider, and removes what is left itself when the agent does not.
func (o *UnpeerOptions) forceConsumer(ctx context.Context, steps *output.Steps, fc *offloadv1alpha1.ForeignCluster) error {
	steps.Warn("skipped the provider (--force): its tenant for this cluster, and the credentials it issued, stay until it is unpeered there too (kubectl offload unpeer CONSUMER-NAME on the provider) or the credentials expire")
	agentCtx, cancel := context.WithTimeout(ctx, min(o.Timeout, o.agentWait))
	defer cancel()
	err := waitForeignCluster(agentCtx, o.client, o.Name, o.pollInterval, func(fc *offloadv1alpha1.ForeignCluster) (bool, error) {
		return fc == nil, nil
	})
	if err == nil {
		return o.waitGone(ctx, steps)
	}
	// The agent is not doing it: remove the node, its Lease, the Secrets
	// and the finalizers here.
	return steps.Run("Removed the peering without the agent", func() error {
		node := offloadv1alpha1.VirtualNodeName(o.Name)
		objs := []client.Object{
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: peering.PeerKubeconfigSecretName(o.Name), Namespace: o.namespace}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: peering.PeerTokenSecretName(o.Name), Namespace: o.namespace}},
		}
		for _, obj := range objs {
			if err := o.client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err)
			}
		}
		var cur offloadv1alpha1.ForeignCluster
		if err := o.client.Get(ctx, types.NamespacedName{Name: o.Name}, &cur); err == nil {
			patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
			controllerutil.RemoveFinalizer(&cur, offloadv1alpha1.FinalizerUnpeer)
			controllerutil.RemoveFinalizer(&cur, offloadv1alpha1.FinalizerVirtualNode)
			if err := o.client.Patch(ctx, &cur, patch); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("removing the finalizers of ForeignCluster %s: %w", o.Name, err)
			}
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading ForeignCluster %s: %w", o.Name, err)
		}
		return o.poll(ctx, func(ctx context.Context) (bool, error) {
			err := o.client.Get(ctx, types.NamespacedName{Name: o.Name}, &offloadv1alpha1.ForeignCluster{})
			return apierrors.IsNotFound(err), nil
		})
	})
}

// unpeerProvider removes the Tenant of consumer Name: its RoleBinding first,
// which revokes the consumer's credentials at once, then its
// ServiceAccount, its namespace and the Tenant, like the auth service does
// on /v1/unpeer.
func (o *UnpeerOptions) unpeerProvider(ctx context.Context, steps *output.Steps, t *offloadv1alpha1.Tenant) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	ns := t.Spec.TenantNamespace
	return steps.Run("Removed the tenant of consumer "+o.Name+" and revoked its credentials", func() error {
		var objs []client.Object
		if ns != "" {
			objs = append(objs,
				&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.TenantRole, Namespace: ns}},
				&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: ns}},
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		}
		for _, obj := range append(objs, t) {
			if err := o.client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err)
			}
		}
		err := o.poll(ctx, func(ctx context.Context) (bool, error) {
			nsErr := o.client.Get(ctx, types.NamespacedName{Name: ns}, &corev1.Namespace{})
			tErr := o.client.Get(ctx, types.NamespacedName{Name: t.Name}, &offloadv1alpha1.Tenant{})
			return (ns == "" || apierrors.IsNotFound(nsErr)) && apierrors.IsNotFound(tErr), nil
		})
		if err != nil {
			return fmt.Errorf("namespace %s is still terminating after %s (--timeout): kubectl get namespace %s -o yaml shows what holds it", ns, o.Timeout, ns)
		}
		return nil
	})
}

// poll calls cond every poll interval until it holds or ctx ends.
func (o *UnpeerOptions) poll(ctx context.Context, cond wait.ConditionWithContextFunc) error {
	return wait.PollUntilContextCancel(ctx, min(o.pollInterval, 250*time.Millisecond), true, cond)
}
