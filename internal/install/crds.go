package install

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kubectl-offload/kubectl-offload/charts"
)

// fieldOwner is the server-side apply field manager of everything the CLI applies.
const fieldOwner = client.FieldOwner("kubectl-offload")

// CRDs returns the CustomResourceDefinitions of the embedded chart.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	fsys := charts.Offload()
	paths, err := fs.Glob(fsys, "crds/*.yaml")
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, p := range paths {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", p, err)
		}
		crd.APIVersion, crd.Kind = "apiextensions.k8s.io/v1", "CustomResourceDefinition"
		out = append(out, crd)
	}
	return out, nil
}

// crdManifest returns the CRDs as one YAML stream, for --dry-run.
func crdManifest() (string, error) {
	crds, err := CRDs()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, crd := range crds {
		y, err := yaml.Marshal(crd)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "---\n%s", y)
	}
	return b.String(), nil
}

// ApplyCRDs creates or updates the CRDs with server-side apply and waits
// until the API server serves them. Helm never upgrades CRDs, so the CLI
// does it on install and upgrade alike.
func ApplyCRDs(ctx context.Context, c client.Client, timeout time.Duration) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	for _, crd := range crds {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{Object: obj}
		unstructured.RemoveNestedField(u.Object, "status")
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), fieldOwner, client.ForceOwnership); err != nil {
			return fmt.Errorf("applying CRD %s: %w", crd.Name, err)
		}
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, crd := range crds {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: crd.Name}, got); err != nil {
				return false, nil
			}
			if !crdEstablished(got) {
				return false, nil
			}
		}
		return true, nil
	})
}

func crdEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// deleteCRDs deletes the CRDs, and so every offload.io object, and waits until they are gone.
func deleteCRDs(ctx context.Context, c client.Client, timeout time.Duration) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	for _, crd := range crds {
		err := c.Delete(ctx, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crd.Name}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting CRD %s: %w", crd.Name, err)
		}
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, crd := range crds {
			err := c.Get(ctx, client.ObjectKey{Name: crd.Name}, &apiextensionsv1.CustomResourceDefinition{})
			if !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
}
