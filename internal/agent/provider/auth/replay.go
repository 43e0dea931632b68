package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// maxTokenLength bounds the tokens detectReplay decodes; bound service
// account tokens are a few kilobytes at most.
const maxTokenLength = 16 << 10

// boundClaims are the private claims of a bound ServiceAccount token that
// name the object it is bound to.
type boundClaims struct {
	Kubernetes struct {
		Namespace string `json:"namespace"`
		Secret    *struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"secret"`
	} `json:"kubernetes.io"`
}

// unverifiedBinding returns the tenant namespace and the Secret UID a token
// claims to be bound to, without verifying its signature: only a token
// that held a real credential can name a retired Secret's UID, which no
// one else ever sees, so the claims are only trusted to that extent.
func unverifiedBinding(token string) (namespace, secretUID string, ok bool) {
	if len(token) > maxTokenLength {
		return "", "", false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", "", false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", "", false
	}
	var c boundClaims
	if err := json.Unmarshal(payload, &c); err != nil || c.Kubernetes.Secret == nil || c.Kubernetes.Secret.UID == "" {
		return "", "", false
	}
	return c.Kubernetes.Namespace, c.Kubernetes.Secret.UID, true
}

// detectReplay looks whether a token the API server refused is a retired
// credential of a tenant: someone kept a copy of it, and either they or
// the consumer refreshed with it after the other. Then every credential of
// that tenant is revoked: CredentialReplayed makes the tenant controller
// delete every credential Secret at once, and the consumer has to peer
// again. It reports nothing to the caller, who gets the same Unauthorized.
func (p *Peering) detectReplay(ctx context.Context, token string) {
	ns, uid, ok := unverifiedBinding(token)
	if !ok {
		return
	}
	name, ok := strings.CutPrefix(ns, offloadv1alpha1.TenantNamespacePrefix)
	if !ok || name == "" {
		return
	}
	var t offloadv1alpha1.Tenant
	if err := p.client.Get(ctx, client.ObjectKey{Name: name}, &t); err != nil ||
		t.Spec.TenantNamespace != ns || !slices.Contains(t.Status.RetiredCredentials, uid) {
		return
	}
	if meta.IsStatusConditionTrue(t.Status.Conditions, offloadv1alpha1.ConditionCredentialReplayed) {
		return
	}
	patch := client.MergeFrom(t.DeepCopy())
	t.Status.CurrentCredential = ""
	meta.SetStatusCondition(&t.Status.Conditions, metav1.Condition{
		Type: offloadv1alpha1.ConditionCredentialReplayed, Status: metav1.ConditionTrue,
		Reason: offloadv1alpha1.ReasonRetiredCredentialUsed, ObservedGeneration: t.Generation,
		Message: fmt.Sprintf("a replaced credential of consumer %s was presented to the auth service: someone kept a copy of it; "+
			"every credential of the consumer is revoked: check who can read its kubeconfig Secret, then peer it again with a token bound to it (kubectl offload peer generate --consumer %s)",
			t.Spec.ClusterName, t.Spec.ClusterName),
	})
	if err := p.client.Status().Patch(ctx, &t, patch); err != nil {
		p.opts.Logger.Error(err, "Recording a replayed credential", "tenant", klog.KObj(&t))
		return
	}
	p.opts.Logger.Info("A retired credential was replayed: revoking every credential of the tenant", "tenant", klog.KObj(&t))
}
