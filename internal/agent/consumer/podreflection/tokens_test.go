package podreflection

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// tokenPod creates a consumer pod on the virtual node that mounts the
// service-account token volume the ServiceAccount admission plugin adds.
func tokenPod(t *testing.T, e *env, name string) *corev1.Pod {
	t.Helper()
	if _, err := e.kube.CoreV1().ServiceAccounts(e.consumer).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "runner"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.consumer},
		Spec: corev1.PodSpec{
			NodeName:           e.node,
			ServiceAccountName: "runner",
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1", VolumeMounts: []corev1.VolumeMount{{
				Name: "kube-api-access-abcde", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true,
			}}}},
			Volumes: []corev1.Volume{{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				},
			}}}},
		},
	}
	p, err := e.kube.CoreV1().Pods(e.consumer).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCreatePodReflectsABoundTokenAndDeletePodRemovesIt(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	local := tokenPod(t, e, "api-client")
	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	s, err := e.kube.CoreV1().Secrets(e.twin).Get(ctx, reflection.TokenSecretName(local.Name), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no token Secret in the twin namespace: %v", err)
	}
	if len(s.Data[reflection.TokenSecretKeyToken]) == 0 || string(s.Data[reflection.TokenSecretKeyNamespace]) != e.consumer ||
		s.Labels[offloadv1alpha1.LabelOriginPodUID] != string(local.UID) {
		t.Errorf("token Secret: labels %v, keys %d, namespace %q", s.Labels, len(s.Data), s.Data[reflection.TokenSecretKeyNamespace])
	}
	expiry, err := time.Parse(time.RFC3339, s.Annotations[annotationTokenExpiry])
	if err != nil || time.Until(expiry) < 50*time.Minute {
		t.Errorf("token expiry %q (%v), want about an hour from now", s.Annotations[annotationTokenExpiry], err)
	}
	remote := e.getRemote(ctx, t, local.Name)
	if !hasTokenVolume(remote) {
		t.Errorf("the remote pod does not mount the token Secret: %+v", remote.Spec.Volumes)
	}
	// Not due: the same token stays.
	if err := e.h.RenewTokens(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.h.reflectToken(ctx, local, e.h.podOrigin(e.twin, local), false); err != nil {
		t.Fatal(err)
	}
	again, err := e.kube.CoreV1().Secrets(e.twin).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil || string(again.Data[reflection.TokenSecretKeyToken]) != string(s.Data[reflection.TokenSecretKeyToken]) {
		t.Errorf("a token that is not due was replaced (err=%v)", err)
	}

	if err := e.h.DeletePod(ctx, local); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.CoreV1().Secrets(e.twin).Get(ctx, s.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the token Secret of a deleted pod is left (err=%v)", err)
	}
}

func TestTokenDueWhenOfAnotherPodOrNearItsExpiry(t *testing.T) {
	now := time.Now()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}}
	secret := func(uid string, expiry time.Time) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			Labels:      map[string]string{offloadv1alpha1.LabelOriginPodUID: uid},
			Annotations: map[string]string{annotationTokenExpiry: expiry.Format(time.RFC3339)},
		}}
	}
	for _, tc := range []struct {
		name string
		s    *corev1.Secret
		want bool
	}{
		{"fresh", secret("u1", now.Add(time.Hour)), false},
		{"in its last minutes", secret("u1", now.Add(10*time.Minute)), true},
		{"of another pod", secret("u0", now.Add(time.Hour)), true},
		{"without an expiry", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{offloadv1alpha1.LabelOriginPodUID: "u1"}}}, true},
	} {
		if got := tokenDue(tc.s, pod, now); got != tc.want {
			t.Errorf("%s: tokenDue = %t, want %t", tc.name, got, tc.want)
		}
	}
}

// RenewTokens reads no token Secret whose token the handler wrote and
// knows is not due, and still renews the ones that are.
func TestRenewTokensReadsOnlyTheSecretsThatAreDue(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	reads := &readsOf{of: "/secrets/"}
	e.providerThrough(t, func(rt http.RoundTripper) http.RoundTripper { reads.next = rt; return reads })
	local := tokenPod(t, e, "api-client")
	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	name := reflection.TokenSecretName(local.Name)
	first, err := e.kube.CoreV1().Secrets(e.twin).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reads.n.Store(0)
	if err := e.h.RenewTokens(ctx); err != nil {
		t.Fatal(err)
	}
	if n := reads.n.Load(); n != 0 {
		t.Errorf("RenewTokens read %d token Secrets, want none: the one token is fresh", n)
	}

	// Time passes: the token the handler wrote is now in its last minutes.
	e.h.mu.Lock()
	e.h.tokens[local.UID] = time.Now().Add(tokenRenewBefore / 2)
	e.h.mu.Unlock()
	if err := e.h.RenewTokens(ctx); err != nil {
		t.Fatal(err)
	}
	if n := reads.n.Load(); n != 1 {
		t.Errorf("RenewTokens read %d token Secrets, want the one that is due", n)
	}
	// The Secret says the token is fresh, so it stays, and the handler
	// knows its expiry again.
	again, err := e.kube.CoreV1().Secrets(e.twin).Get(ctx, name, metav1.GetOptions{})
	if err != nil || string(again.Data[reflection.TokenSecretKeyToken]) != string(first.Data[reflection.TokenSecretKeyToken]) {
		t.Errorf("a fresh token was replaced (err=%v)", err)
	}
	if !e.h.knownNotDue(local.UID, time.Now()) {
		t.Error("the handler does not know the expiry it read")
	}

	// A token that is really due is renewed.
	again.Annotations[annotationTokenExpiry] = time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	if _, err := e.kube.CoreV1().Secrets(e.twin).Update(ctx, again, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.h.mu.Lock()
	e.h.tokens[local.UID] = time.Now().Add(time.Minute)
	e.h.mu.Unlock()
	if err := e.h.RenewTokens(ctx); err != nil {
		t.Fatal(err)
	}
	renewed, err := e.kube.CoreV1().Secrets(e.twin).Get(ctx, name, metav1.GetOptions{})
	if err != nil || string(renewed.Data[reflection.TokenSecretKeyToken]) == string(first.Data[reflection.TokenSecretKeyToken]) {
		t.Errorf("a due token was not renewed (err=%v)", err)
	}

	// A pod that is gone is forgotten.
	if err := e.kube.CoreV1().Pods(e.consumer).Delete(ctx, local.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the deleted pod's token forgotten", func(ctx context.Context) bool {
		if err := e.h.RenewTokens(ctx); err != nil {
			return false
		}
		e.h.mu.Lock()
		defer e.h.mu.Unlock()
		_, known := e.h.tokens[local.UID]
		return !known
	})
}
