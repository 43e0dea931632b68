package install

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
)

// apply writes to the cluster: namespace, CRDs, the release, then waits for
// the control plane.
func (o *Options) apply(ctx context.Context, steps *output.Steps, ch *chart.Chart, vals map[string]any, existing *helmclient.Release) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	if err := steps.Run(fmt.Sprintf("Namespace %s", o.namespace), func() error { return o.ensureNamespace(ctx) }); err != nil {
		return err
	}
	if err := steps.Run("CRDs established", func() error { return ApplyCRDs(ctx, o.client, o.Timeout) }); err != nil {
		return err
	}

	var rel *helmclient.Release
	switch {
	case existing == nil:
		err := steps.Run(fmt.Sprintf("Installed release %s (chart %s)", offloadv1alpha1.ReleaseName, ch.Metadata.Version), func() error {
			var err error
			rel, err = o.helm.Install(ctx, offloadv1alpha1.ReleaseName, ch, vals, false)
			return err
		})
		if err != nil {
			return fmt.Errorf("installing the chart: %w", err)
		}
	case upToDate(existing, ch, vals):
		rel = existing
		steps.Done(fmt.Sprintf("Release %s is up to date (chart %s, revision %d)", offloadv1alpha1.ReleaseName, ch.Metadata.Version, existing.Revision))
	default:
		err := steps.Run(fmt.Sprintf("Upgraded release %s from chart %s to %s", offloadv1alpha1.ReleaseName, existing.ChartVersion, ch.Metadata.Version), func() error {
			var err error
			rel, err = o.helm.Upgrade(ctx, offloadv1alpha1.ReleaseName, ch, vals, false)
			return err
		})
		if err != nil {
			return fmt.Errorf("upgrading the release: %w", err)
		}
	}

	if o.Wait {
		if err := steps.Run("Control plane available", func() error { return o.waitDeployments(ctx, rel) }); err != nil {
			return err
		}
	}
	identity, err := o.readIdentity(ctx)
	if err != nil {
		return err
	}
	if identity == nil {
		return fmt.Errorf("the release is installed but the identity ConfigMap %s is missing", offloadv1alpha1.IdentityConfigMap)
	}
	_, err = fmt.Fprintf(o.Out, "kubectl-offload %s is installed on cluster %q (ID %s) in namespace %s.\nNext: kubectl offload status\n",
		ch.Metadata.AppVersion, identity.Data["clusterName"], identity.Data["clusterID"], o.namespace)
	return err
}

// upToDate reports whether the deployed release already has this chart
// version and these values, so a repeated install changes nothing.
func upToDate(rel *helmclient.Release, ch *chart.Chart, vals map[string]any) bool {
	if rel.Status != helmclient.StatusDeployed || rel.ChartVersion != ch.Metadata.Version {
		return false
	}
	return reflect.DeepEqual(canonical(rel.Config), canonical(vals))
}

// canonical round-trips values through JSON, as Helm's release storage
// does, so that values typed in compare equal to values read back.
func canonical(v map[string]any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil
	}
	return out
}

// ensureNamespace creates the install namespace, labelled as created by the
// CLI so that only a namespace it created is removed by uninstall --purge.
func (o *Options) ensureNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   o.namespace,
		Labels: map[string]string{ManagedByLabel: ManagedByValue},
	}}
	_, err := o.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// waitDeployments polls until every Deployment of the release is available
// with all its replicas updated.
func (o *Options) waitDeployments(ctx context.Context, rel *helmclient.Release) error {
	selector := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/instance": rel.Name, "app.kubernetes.io/name": "offload"})
	var pending []string
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := o.kube.AppsV1().Deployments(o.namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
		if err != nil {
			return false, nil
		}
		pending = pending[:0]
		for i := range list.Items {
			if !deploymentAvailable(&list.Items[i]) {
				pending = append(pending, list.Items[i].Name)
			}
		}
		return len(list.Items) > 0 && len(pending) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("deployments not available after %s: %v (see kubectl -n %s describe deployments)", o.Timeout, pending, o.namespace)
	}
	return nil
}

func deploymentAvailable(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want
}
