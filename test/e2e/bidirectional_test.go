package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// The chapters of this file run in
// TestOffloadedPodsRunInTheProvidersTwinNamespace (offload_test.go).

// condition returns the condition t of ForeignCluster name on c, or nil.
func condition(ctx context.Context, t *testing.T, c *localcluster.Cluster, name, typ string) (*offloadv1alpha1.ForeignCluster, *metav1.Condition) {
	t.Helper()
	var fc offloadv1alpha1.ForeignCluster
	if err := ctrlClient(t, c).Get(ctx, client.ObjectKey{Name: name}, &fc); err != nil {
		return nil, nil
	}
	return &fc, meta.FindStatusCondition(fc.Status.Conditions, typ)
}

// expectUnpeerEndsOneDirection peers the provider back with the consumer,
// so that each consumes the other, and ends the provider's outgoing
// peering: the consumer's own peering, with its offloaded pods in twin
// namespace twin, keeps working and carrying traffic.
func expectUnpeerEndsOneDirection(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, twin, consumerID string) {
	t.Helper()
	waitCASecret(ctx, t, consumer)
	if errOut, err := outOfBand(t, provider, generate(t, consumer), "--timeout", "2m"); err != nil {
		t.Fatalf("peering the provider back with the consumer: %v\n%s", err, errOut)
	}
	back := offloadv1alpha1.VirtualNodeName(consumer.Name)
	waitNodeReady(ctx, t, provider, back, corev1.ConditionTrue, time.Minute)

	// On the provider, unpeer NAME ends its outgoing peering only.
	stdout, stderr, err := offload(t, provider, "unpeer", consumer.Name)
	if err != nil || !strings.Contains(stdout, "outgoing") || !strings.Contains(stderr, "unpeer "+consumer.Name+" --incoming") {
		t.Fatalf("unpeer %s on the provider: err=%v, stdout %q, stderr %q; want the outgoing peering ended and a note on --incoming", consumer.Name, err, stdout, stderr)
	}
	if _, err := provider.Kube.CoreV1().Nodes().Get(ctx, back, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the provider's virtual node %s is left (err=%v)", back, err)
	}
	waitFor(ctx, t, time.Minute, "the provider's tenant on the consumer to go", func(ctx context.Context) (bool, string) {
		err := ctrlClient(t, consumer).Get(ctx, client.ObjectKey{Name: provider.Name}, &offloadv1alpha1.Tenant{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	waitFor(ctx, t, time.Minute, "the provider to record the consumer as an incoming peer only", func(ctx context.Context) (bool, string) {
		fc, c := condition(ctx, t, provider, consumer.Name, offloadv1alpha1.ConditionIncomingPeering)
		if fc == nil || c == nil {
			return false, "no ForeignCluster or no IncomingPeering yet"
		}
		return fc.Labels[offloadv1alpha1.LabelIncomingOnly] == "true" && c.Status == metav1.ConditionTrue, fmt.Sprintf("labels %v, %s", fc.Labels, c.Status)
	})
	if err := ctrlClient(t, provider).Get(ctx, client.ObjectKey{Name: consumer.Name}, &offloadv1alpha1.Tenant{}); err != nil {
		t.Errorf("the consumer's Tenant on the provider: %v; want it kept", err)
	}

	// The consumer's peering is untouched and carries traffic.
	if _, c := condition(ctx, t, consumer, provider.Name, offloadv1alpha1.ConditionAuthenticated); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("the consumer's ForeignCluster %s: Authenticated %+v, want True", provider.Name, c)
	}
	if got := nodeReady(ctx, consumer, offloadv1alpha1.VirtualNodeName(provider.Name)); got != corev1.ConditionTrue {
		t.Errorf("the consumer's virtual node is Ready=%s, want True", got)
	}
	// expectWorkloads left one replica of web.
	expectReflected(ctx, t, consumer, provider, twin, consumerID, "app=web", 1)
	list, err := consumer.Kube.CoreV1().Pods("work").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	local := onVirtualNode(list.Items)
	if len(local) == 0 {
		t.Fatal("no pod of web on the virtual node")
	}
	for _, p := range local {
		out, err := kubectl(t, consumer, "-n", "work", "exec", p.Name, "--", "/testapp", "get", "http://127.0.0.1:8080/hostname")
		if err != nil || strings.TrimSpace(out) != p.Name {
			t.Errorf("kubectl exec in offloaded pod %s after the other direction ended: err=%v, output %q", p.Name, err, out)
		}
	}
	if err := consumer.Kube.CoreV1().Pods("work").Delete(ctx, local[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectReflected(ctx, t, consumer, provider, twin, consumerID, "app=web", 1)

	// Without --incoming, a cluster that only consumes this one is refused,
	// and nothing changes.
	if _, _, err := offload(t, provider, "unpeer", consumer.Name); err == nil {
		t.Errorf("unpeer %s on the provider with only the incoming peering left succeeded; want a refusal naming --incoming", consumer.Name)
	}
	if err := ctrlClient(t, provider).Get(ctx, client.ObjectKey{Name: consumer.Name}, &offloadv1alpha1.Tenant{}); err != nil {
		t.Errorf("a refused unpeer removed the consumer's Tenant: %v", err)
	}
}

// expectRevokedConsumerSaysUnauthorized ends the incoming peering on the
// provider and checks that the consumer's ForeignCluster then says its
// credentials are refused, with what to do.
func expectRevokedConsumerSaysUnauthorized(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster) {
	t.Helper()
	if out := mustOffload(t, provider, "unpeer", consumer.Name, "--incoming", "--timeout", "2m"); !strings.Contains(out, "incoming") {
		t.Errorf("unpeer --incoming printed %q", out)
	}
	ns := offloadv1alpha1.TenantNamespace(consumer.Name)
	if _, err := provider.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("tenant namespace %s is left after unpeer --incoming returned (err=%v)", ns, err)
	}
	took := waitFor(ctx, t, 2*time.Minute, "the consumer's ForeignCluster to say Authenticated=False Unauthorized", func(ctx context.Context) (bool, string) {
		_, c := condition(ctx, t, consumer, provider.Name, offloadv1alpha1.ConditionAuthenticated)
		if c == nil {
			return false, "no condition"
		}
		return c.Status == metav1.ConditionFalse && c.Reason == offloadv1alpha1.ReasonUnauthorized, c.Reason + ": " + c.Message
	})
	t.Logf("the consumer reported its revoked credentials %s after unpeer --incoming", took.Round(time.Millisecond))
	if _, c := condition(ctx, t, consumer, provider.Name, offloadv1alpha1.ConditionAuthenticated); c != nil && !strings.Contains(c.Message, "kubectl offload unpeer "+provider.Name) {
		t.Errorf("Authenticated message %q does not say what to do", c.Message)
	}
}
