package peer

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	// Incoming ends the incoming peering instead of the outgoing one: NAME
	// consumes this cluster's resources, and its Tenant is removed.
	Incoming bool
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
	if o.Incoming && o.Force {
		return errors.New("--force applies to the outgoing peering only: kubectl offload unpeer NAME --incoming removes a consumer's tenant on this cluster, which needs no other cluster")
	}
	return nil
}

// Run ends one direction of the peering with Name. By default it is the
// outgoing one, where this cluster consumes Name's resources: the
// ForeignCluster goes, and with it the virtual node, the Secrets and this
// cluster's tenant on Name. With Incoming it is the incoming one, where Name
// consumes this cluster: Name's Tenant goes, which revokes its credentials
// and removes its workloads here. The other direction is left as it is.
func (o *UnpeerOptions) Run(ctx context.Context) error {
	var fc offloadv1alpha1.ForeignCluster
	fcErr := o.client.Get(ctx, types.NamespacedName{Name: o.Name}, &fc)
	if meta.IsNoMatchError(fcErr) {
		return errors.New("the ForeignCluster CRD is missing: kubectl-offload is not installed on this cluster (kubectl offload install)")
	}
	if fcErr != nil && !apierrors.IsNotFound(fcErr) {
		return fmt.Errorf("reading ForeignCluster %s: %w", o.Name, fcErr)
	}
	var tenant offloadv1alpha1.Tenant
	tenantErr := o.client.Get(ctx, types.NamespacedName{Name: o.Name}, &tenant)
	if tenantErr != nil && !apierrors.IsNotFound(tenantErr) && !meta.IsNoMatchError(tenantErr) {
		return fmt.Errorf("reading Tenant %s: %w", o.Name, tenantErr)
	}
	// A ForeignCluster the provider's agent made to record a consumer
	// stands for the incoming peering only.
	outgoing := fcErr == nil && fc.Labels[offloadv1alpha1.LabelIncomingOnly] != "true"
	incoming := tenantErr == nil
	steps := output.NewSteps(o.ErrOut)
	switch {
	case o.Incoming && !incoming:
		return fmt.Errorf("%s does not consume this cluster's resources (no Tenant %s; kubectl get tenants lists the consumers)%s", o.Name, o.Name, outgoingHint(outgoing, o.Name))
	case o.Incoming:
		if err := o.unpeerProvider(ctx, steps, &tenant); err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "unpeered %s (incoming: it no longer consumes this cluster)\n", o.Name)
	case outgoing:
		if err := o.unpeerConsumer(ctx, steps, &fc); err != nil {
			return err
		}
		if incoming {
			steps.Warn("%s still consumes this cluster's resources (incoming peering): kubectl offload unpeer %s --incoming ends that too", o.Name, o.Name)
		}
		fmt.Fprintf(o.Out, "unpeered %s (outgoing: this cluster no longer consumes it)\n", o.Name)
	case incoming:
		return fmt.Errorf("this cluster does not consume %s's resources; %s consumes this cluster (incoming peering): kubectl offload unpeer %s --incoming ends that, revoking its credentials and removing its workloads here", o.Name, o.Name, o.Name)
	default:
		return fmt.Errorf("no peer %q: neither a ForeignCluster nor a Tenant has that name; kubectl get foreignclusters lists the peers", o.Name)
	}
	return nil
}

// outgoingHint points at plain unpeer when name is an outgoing peer.
func outgoingHint(outgoing bool, name string) string {
	if !outgoing {
		return ""
	}
	return fmt.Sprintf("; this cluster consumes %s: kubectl offload unpeer %s ends that", name, name)
}

// unpeerConsumer deletes the ForeignCluster and waits while the agent gets
// the provider to remove the tenant and deletes the virtual node and the
// Secrets.
func (o *UnpeerOptions) unpeerConsumer(ctx context.Context, steps *output.Steps, fc *offloadv1alpha1.ForeignCluster) error {
	if err := peering.DeleteForeignCluster(ctx, o.client, fc, o.Force); err != nil {
		return err
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
	return o.waitGone(ctx, steps, fc.UID)
}

// waitGone waits until the virtual node and the ForeignCluster uid are gone.
func (o *UnpeerOptions) waitGone(ctx context.Context, steps *output.Steps, uid types.UID) error {
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
		// When Name also consumes this cluster, the agent records that
		// incoming peering in a new ForeignCluster of the same name.
		err := waitForeignCluster(ctx, o.client, o.Name, o.pollInterval, func(fc *offloadv1alpha1.ForeignCluster) (bool, error) {
			return fc == nil || fc.UID != uid, nil
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
		return o.waitGone(ctx, steps, fc.UID)
	}
	// The agent is not doing it: remove its finalizers. The peering's
	// parts are the ForeignCluster's (owner references): the garbage
	// collector takes them, the virtual node, its Lease, the Secrets, the
	// PeeringCredentials, the VirtualNode and the Tunnel.
	if err := steps.Run("Removed the agent's finalizers (the garbage collector removes the rest)", func() error {
		var cur offloadv1alpha1.ForeignCluster
		err := o.client.Get(ctx, types.NamespacedName{Name: o.Name}, &cur)
		if apierrors.IsNotFound(err) || err == nil && cur.UID != fc.UID {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading ForeignCluster %s: %w", o.Name, err)
		}
		patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(&cur, offloadv1alpha1.FinalizerUnpeer)
		controllerutil.RemoveFinalizer(&cur, offloadv1alpha1.FinalizerVirtualNode)
		if err := o.client.Patch(ctx, &cur, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("removing the finalizers of ForeignCluster %s: %w", o.Name, err)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("unpeering %s: %w", o.Name, err)
	}
	return o.waitGone(ctx, steps, fc.UID)
}

// unpeerProvider deletes the Tenant of consumer Name and waits until it and
// its tenant namespace are gone. The agent's tenant controller does the
// work: it revokes the consumer's credentials, then deletes the namespace,
// whose twin namespaces and pods go with it.
func (o *UnpeerOptions) unpeerProvider(ctx context.Context, steps *output.Steps, t *offloadv1alpha1.Tenant) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := o.client.Delete(ctx, t); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting Tenant %s: %w", o.Name, err)
	}
	if err := steps.Run("Revoked the credentials of consumer "+o.Name, func() error {
		err := o.poll(ctx, func(ctx context.Context) (bool, error) {
			err := o.client.Get(ctx, types.NamespacedName{Name: t.Name}, &offloadv1alpha1.Tenant{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			return fmt.Errorf("tenant %s is still there after %s (--timeout): is offload-controller-manager running? kubectl offload status shows it", o.Name, o.Timeout)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("unpeering %s: %w", o.Name, err)
	}
	ns := t.Spec.TenantNamespace
	if ns == "" {
		return nil
	}
	return steps.Run("Removed its tenant namespace "+ns+" and its workloads", func() error {
		err := o.poll(ctx, func(ctx context.Context) (bool, error) {
			err := o.client.Get(ctx, types.NamespacedName{Name: ns}, &corev1.Namespace{})
			return apierrors.IsNotFound(err), nil
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
