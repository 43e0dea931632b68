package charts_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

func TestTheObjectSizePolicyCapsTheTenantsSecretsAndConfigMaps(t *testing.T) {
	kube := enforcedPolicy(t, "offload-tenant-object-size")
	tenant := newNamespace(t, kube, map[string]string{offloadv1alpha1.LabelTenant: "x"})
	other := newNamespace(t, kube, nil)
	const max = 262144 // the chart's default
	big, small := strings.Repeat("x", max/2+1), strings.Repeat("x", max/2-1)
	secret := func(a, b string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: "s-"}, Data: map[string][]byte{"a": []byte(a), "b": []byte(b)}}
	}
	// A ConfigMap counts its strings in bytes (é is two) and its binary data.
	configMap := func(a, b string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "c-"}, Data: map[string]string{"a": a}, BinaryData: map[string][]byte{"b": []byte(b)}}
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	framework.Eventually(t, 30*time.Second, "the object size policy is not enforced", func(ctx context.Context) bool {
		_, err := kube.CoreV1().Secrets(tenant).Create(ctx, secret(big, big), dryRun)
		return apierrors.IsRequestEntityTooLargeError(err)
	})
	ctx := t.Context()
	for name, err := range map[string]error{
		"a Secret of more than the cap": func() error {
			_, err := kube.CoreV1().Secrets(tenant).Create(ctx, secret(big, big), dryRun)
			return err
		}(),
		"a ConfigMap of more than the cap": func() error {
			_, err := kube.CoreV1().ConfigMaps(tenant).Create(ctx, configMap(strings.Repeat("é", max/4+1), small), dryRun)
			return err
		}(),
	} {
		if !apierrors.IsRequestEntityTooLargeError(err) || !strings.Contains(err.Error(), "twinNamespaces.maxObjectBytes") {
			t.Errorf("%s in a tenant namespace: err = %v, want RequestEntityTooLarge naming the chart value", name, err)
		}
	}
	for name, err := range map[string]error{
		"a Secret under the cap": func() error {
			_, err := kube.CoreV1().Secrets(tenant).Create(ctx, secret(small, small), dryRun)
			return err
		}(),
		"a ConfigMap under the cap": func() error {
			_, err := kube.CoreV1().ConfigMaps(tenant).Create(ctx, configMap(small, small), dryRun)
			return err
		}(),
		"a Secret over the cap outside tenant namespaces": func() error {
			_, err := kube.CoreV1().Secrets(other).Create(ctx, secret(big, big), dryRun)
			return err
		}(),
	} {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
