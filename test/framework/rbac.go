package framework

import (
	"context"
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// WaitAuthorized waits until the identity of cfg may do each of attrs. The
// API server's RBAC authorizer learns a new binding from its informers a
// moment after the write: a test that has just granted a right, and then
// checks what the identity is refused beyond it, starts once the grant is
// in force, or it reads RBAC's refusal for the one it is testing.
func WaitAuthorized(t testing.TB, cfg *rest.Config, attrs ...authorizationv1.ResourceAttributes) {
	t.Helper()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range attrs {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a}}
		Eventually(t, 30*time.Second, fmt.Sprintf("%s %s/%s in %q is not authorized", a.Verb, a.Group, a.Resource, a.Namespace), func(ctx context.Context) bool {
			got, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			return err == nil && got.Status.Allowed
		})
	}
}
