package e2e

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// The chapter of this file runs in
// TestPeeringSurvivesAnOutageRotatesCredentialsAndUnpeersCleanly
// (lifecycle_test.go).

// doctorBlocker is the webhook expectDoctor adds: it intercepts pods with
// failurePolicy Fail, served by a Service that does not exist. Its
// namespace selector matches no namespace, so it never fires; it does not
// rule out offloaded namespaces either, so doctor names it.
const doctorBlocker = "doctor-e2e-blocker"

// expectDoctor checks, on a healthy peered pair, that kubectl offload
// doctor passes on both clusters (warnings allowed), and that on the
// consumer it names a webhook that could block offloaded pods, and stops
// once the webhook is gone.
func expectDoctor(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster) {
	t.Helper()
	for _, c := range []*localcluster.Cluster{consumer, provider} {
		r, code := offloadDoctor(t, c)
		if code != 0 || !r.Healthy || len(r.failures()) > 0 {
			t.Errorf("doctor on %s: exit code %d, healthy %t, failed checks %q; want 0, true, none", c.Name, code, r.Healthy, r.failures())
		}
		if got := r.checkStatus("interference", "webhooks"); got != "ok" {
			t.Errorf("doctor on %s: webhooks check is %q (%s), want ok before any foreign webhook exists", c.Name, got, r.checkMessage("interference", "webhooks"))
		}
	}

	webhooks := consumer.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	blocker := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: doctorBlocker},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "pods." + doctorBlocker + ".example.com",
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			FailurePolicy:     ptr.To(admissionregistrationv1.Fail),
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"doctor.offload.io/e2e": "never"}},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Namespace: "default", Name: "doctor-e2e-missing", Path: ptr.To("/mutate")}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := webhooks.Create(ctx, blocker, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating MutatingWebhookConfiguration %s: %v", doctorBlocker, err)
	}
	deleted := false
	remove := func() {
		if err := webhooks.Delete(context.Background(), doctorBlocker, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting MutatingWebhookConfiguration %s: %v", doctorBlocker, err)
		}
		deleted = true
	}
	t.Cleanup(func() {
		if !deleted {
			remove()
		}
	})

	// A warning names it, and warnings do not fail.
	r, code := offloadDoctor(t, consumer)
	status, msg := r.check("interference", "webhooks")
	if code != 0 || status != "warning" || !strings.Contains(msg, doctorBlocker) {
		t.Errorf("doctor with webhook %s: exit code %d, webhooks check %s %q; want 0 and a warning naming it", doctorBlocker, code, status, msg)
	}

	remove()
	r, code = offloadDoctor(t, consumer)
	if status, msg := r.check("interference", "webhooks"); code != 0 || status != "ok" {
		t.Errorf("doctor after deleting webhook %s: exit code %d, webhooks check %s %q; want 0 and ok", doctorBlocker, code, status, msg)
	}
}
