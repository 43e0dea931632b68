package auth

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// Expired tokens go by themselves, an hour after they expired; valid ones,
// recently expired ones and ConfigMaps that are not tokens stay.
func TestExpiredTokensAreRemovedAnHourAfterTheyExpire(t *testing.T) {
	e := newPeeringEnv(t)
	ctx := context.Background()
	now := time.Now()
	longExpired := e.newToken(t, now.Add(-2*time.Hour), false)
	spentLongAgo := e.newTokenConfigMap(t, func(tok peering.Token) *corev1.ConfigMap {
		s := peering.NewTokenConfigMap(e.namespace, tok, peering.TokenOptions{Expires: now.Add(-90 * time.Minute)})
		s.Data[peering.UsedAtKey] = now.Add(-2 * time.Hour).UTC().Format(time.RFC3339)
		return s
	})
	justExpired := e.newToken(t, now.Add(-10*time.Minute), false)
	valid := e.newToken(t, now.Add(time.Hour), true)
	broken := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "not-a-token", Namespace: e.namespace, Labels: map[string]string{peering.TokenIDLabel: "x"}}}
	mustCreate(t, e.admin, broken)

	p, err := NewPeering(envtest.NewClient(t, e.authSAConfig(t)), PeeringOptions{Namespace: e.namespace, APIServerURL: "https://x", CredentialExpiration: DefaultCredentialExpiration})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cleanTokens(ctx); err != nil {
		t.Fatal(err)
	}
	var list corev1.ConfigMapList
	if err := e.admin.List(ctx, &list, client.InNamespace(e.namespace), client.HasLabels{peering.TokenIDLabel}); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, s := range list.Items {
		left = append(left, s.Name)
	}
	slices.Sort(left)
	want := []string{"not-a-token", peering.TokenConfigMapName(justExpired.ID), peering.TokenConfigMapName(valid.ID)}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("tokens left %v, want %v (gone: %s and %s)", left, want, longExpired.ID, spentLongAgo.ID)
	}
}
