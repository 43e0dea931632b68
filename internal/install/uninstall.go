package install

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// UninstallOptions are the options of `kubectl offload uninstall`.
type UninstallOptions struct {
	genericiooptions.IOStreams

	Force   bool
	Purge   bool
	Timeout time.Duration

	clients
}

// NewUninstallOptions returns UninstallOptions with defaults.
func NewUninstallOptions(streams genericiooptions.IOStreams) *UninstallOptions {
	return &UninstallOptions{IOStreams: streams, Timeout: 5 * time.Minute}
}

// Complete builds the clients from the factory.
func (o *UninstallOptions) Complete(f factory.Factory) error {
	var err error
	o.clients, err = newClients(f)
	return err
}

// Validate checks the options.
func (o *UninstallOptions) Validate() error {
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", o.Timeout)
	}
	return nil
}

// clients are what install, upgrade and uninstall talk to the cluster with.
type clients struct {
	namespace string
	kube      kubernetes.Interface
	client    client.Client
	helm      helmclient.Client
}

func newClients(f factory.Factory) (clients, error) {
	c := clients{namespace: f.Namespace()}
	var err error
	if c.kube, err = f.KubeClient(); err != nil {
		return c, err
	}
	if c.client, err = f.Client(); err != nil {
		return c, err
	}
	hc, err := f.HelmConfig(c.namespace)
	if err != nil {
		return c, err
	}
	c.helm = helmclient.New(hc, c.namespace)
	return c, nil
}

// ErrInUse is returned when peers or offloaded namespaces exist and --force is not given.
var ErrInUse = errors.New("kubectl-offload is in use")

// Run uninstalls the release, and with --purge the CRDs, the identity and the namespace.
func (o *UninstallOptions) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	steps := output.NewSteps(o.ErrOut)

	if _, err := o.kube.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("cannot reach the cluster: %w (check --kubeconfig and --context)", err)
	}
	inUse, err := o.inUse(ctx)
	if err != nil {
		return err
	}
	if len(inUse) > 0 {
		if !o.Force {
			return fmt.Errorf("%w: %s; end them first, or pass --force to end them all", ErrInUse, strings.Join(inUse, "; "))
		}
		steps.Warn("ending every peering and offloaded namespace (--force): %s", strings.Join(inUse, "; "))
		if err := o.startCleanup(ctx); err != nil {
			return err
		}
	}
	// The agent finishes what it started before it goes: what it still
	// holds would stay Terminating for good once it is removed.
	held, err := o.heldByTheAgent(ctx)
	if err != nil {
		return err
	}
	if len(held) > 0 {
		if err := steps.Run("Waited for the agent to finish its cleanup", func() error { return o.waitForTheAgent(ctx, o.Timeout) }); err != nil {
			return err
		}
	}

	rel, err := o.helm.Release(offloadv1alpha1.ReleaseName)
	if err != nil {
		return err
	}
	if rel != nil {
		if err := steps.Run(fmt.Sprintf("Uninstalled release %s", offloadv1alpha1.ReleaseName), func() error {
			return o.helm.Uninstall(offloadv1alpha1.ReleaseName, o.Timeout)
		}); err != nil {
			return err
		}
	} else {
		steps.Done(fmt.Sprintf("Release %s is not installed", offloadv1alpha1.ReleaseName))
	}

	// Tokens of a provider that is gone peer nobody: they go with it.
	if err := o.kube.CoreV1().ConfigMaps(o.namespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: peering.TokenIDLabel}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the peering tokens of namespace %s: %w", o.namespace, err)
	}
	if !o.Purge {
		_, err := fmt.Fprintf(o.Out, "kubectl-offload is uninstalled. The CRDs, the cluster identity (ConfigMap %s/%s) and the auth CA that peers pin (Secret %s) are kept; --purge removes them.\n", o.namespace, offloadv1alpha1.IdentityConfigMap, offloadv1alpha1.AuthCASecret)
		return err
	}
	if err := steps.Run("Deleted the CRDs", func() error { return deleteCRDs(ctx, o.client, o.Timeout) }); err != nil {
		return err
	}
	if err := steps.Run("Deleted the cluster identity and the agent's certificates", func() error {
		err := o.kube.CoreV1().ConfigMaps(o.namespace).Delete(ctx, offloadv1alpha1.IdentityConfigMap, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		// The agent makes these Secrets itself, so Helm does not remove them.
		for _, s := range []string{offloadv1alpha1.AuthCASecret, offloadv1alpha1.WebhookCertSecret} {
			err := o.kube.CoreV1().Secrets(o.namespace).Delete(ctx, s, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := steps.Run(fmt.Sprintf("Deleted namespace %s", o.namespace), func() error { return o.deleteNamespace(ctx) }); err != nil {
		return err
	}
	_, err = fmt.Fprintln(o.Out, "kubectl-offload is uninstalled and purged.")
	return err
}

// inUse lists the peerings and offloaded namespaces, which uninstall would
// break, each with the command that ends it.
func (o *UninstallOptions) inUse(ctx context.Context) ([]string, error) {
	var out []string
	fcs := &offloadv1alpha1.ForeignClusterList{}
	if err := o.client.List(ctx, fcs); err != nil && !isMissingCRD(err) {
		return nil, fmt.Errorf("listing peers: %w", err)
	}
	var outgoing []string
	for _, fc := range fcs.Items {
		if fc.Labels[offloadv1alpha1.LabelIncomingOnly] != "true" {
			outgoing = append(outgoing, fc.Name)
		}
	}
	if len(outgoing) > 0 {
		out = append(out, fmt.Sprintf("peers this cluster consumes: %s (kubectl offload unpeer NAME)", strings.Join(outgoing, ", ")))
	}
	tenants := &offloadv1alpha1.TenantList{}
	if err := o.client.List(ctx, tenants); err != nil && !isMissingCRD(err) {
		return nil, fmt.Errorf("listing consumers: %w", err)
	}
	if len(tenants.Items) > 0 {
		var names []string
		for _, t := range tenants.Items {
			names = append(names, t.Name)
		}
		out = append(out, fmt.Sprintf("consumers of this cluster: %s (kubectl offload unpeer NAME --incoming)", strings.Join(names, ", ")))
	}
	nos := &offloadv1alpha1.NamespaceOffloadingList{}
	if err := o.client.List(ctx, nos); err != nil && !isMissingCRD(err) {
		return nil, fmt.Errorf("listing offloaded namespaces: %w", err)
	}
	if len(nos.Items) > 0 {
		var ns []string
		for _, no := range nos.Items {
			ns = append(ns, no.Namespace)
		}
		out = append(out, fmt.Sprintf("offloaded namespaces: %s (kubectl offload unoffload namespace NS)", strings.Join(ns, ", ")))
	}
	return out, nil
}

func isMissingCRD(err error) bool {
	return meta.IsNoMatchError(err) || apierrors.IsNotFound(err)
}

// deleteNamespace deletes the install namespace if the CLI created it, and
// waits until it is gone.
func (o *UninstallOptions) deleteNamespace(ctx context.Context) error {
	ns, err := o.kube.CoreV1().Namespaces().Get(ctx, o.namespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns.Labels[ManagedByLabel] != ManagedByValue {
		return nil
	}
	if err := o.kube.CoreV1().Namespaces().Delete(ctx, o.namespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := o.kube.CoreV1().Namespaces().Get(ctx, o.namespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
