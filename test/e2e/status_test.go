package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

func TestStatusBeforeInstallFailsTheNamespaceSection(t *testing.T) {
	c := localcluster.StartClusters(t, localcluster.ClusterOptions{Name: "status", FakeNodes: 2})[0]
	r, code := offloadStatus(t, c)
	if code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	if r.Healthy {
		t.Errorf("an empty cluster is reported healthy: %+v", r)
	}
	if got := r.sectionStatus("namespace"); got != "failed" {
		t.Errorf("namespace section is %q, want failed", got)
	}
}

func TestStatusFollowsTheHealthOfAnInstall(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	c := localcluster.StartClusters(t, localcluster.ClusterOptions{Name: "status", FakeNodes: 2, RealNode: true})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	installAgent(t, c)

	// The chapters, each a subtest that reports on its own. Each breaks one
	// more part of the install, and expects the parts broken before it to
	// be reported too: each stops the test when it fails.
	if !t.Run("healthy after install", func(t *testing.T) {
		r, code := offloadStatus(t, c, "--wait", "--timeout", "3m")
		if code != 0 || !r.Healthy || len(r.failedSections()) > 0 {
			t.Fatalf("after install: exit code %d, healthy %t, failed checks %q; want 0, true, none", code, r.Healthy, r.failures())
		}
		for _, s := range r.Sections {
			if s.Status != "ok" {
				t.Logf("section %s is %s: %+v", s.Name, s.Status, s.Checks)
			}
		}
	}) {
		t.FailNow()
	}

	// Scaling offload-auth to 0 replicas breaks the control plane, and only it.
	if !t.Run("offload-auth at 0 replicas fails the control plane only", func(t *testing.T) {
		scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "offload-auth", Namespace: "offload-system"}}
		if _, err := c.Kube.AppsV1().Deployments("offload-system").UpdateScale(ctx, "offload-auth", scale, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("scaling offload-auth to 0: %v", err)
		}
		r, code := offloadStatus(t, c)
		if code != 1 || strings.Join(r.failedSections(), ",") != "controlPlane" {
			t.Errorf("offload-auth at 0 replicas: exit code %d, failed checks %q; want 1 and controlPlane only", code, r.failures())
		}
		if got := r.checkStatus("controlPlane", "deployment/offload-auth"); got != "failed" {
			t.Errorf("check deployment/offload-auth is %q, want failed", got)
		}
	}) {
		t.FailNow()
	}

	// Deleting a CRD fails the CRDs section as well.
	t.Run("a deleted CRD fails the CRDs too", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(c.Config)
		if err != nil {
			t.Fatal(err)
		}
		crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
		if err := dyn.Resource(crds).Delete(ctx, "remotenamespaces.offload.io", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting CRD remotenamespaces.offload.io: %v", err)
		}
		r, code := offloadStatus(t, c)
		if code != 1 || strings.Join(r.failedSections(), ",") != "controlPlane,crds" {
			t.Errorf("without a CRD: exit code %d, failed checks %q; want 1 and controlPlane,crds only", code, r.failures())
		}
		if got := r.checkStatus("crds", "crd/remotenamespaces.offload.io"); got != "failed" {
			t.Errorf("check crd/remotenamespaces.offload.io is %q, want failed", got)
		}
	})
}
