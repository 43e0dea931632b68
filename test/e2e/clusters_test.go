package e2e

import (
	"context"
	"net/netip"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

func TestTwoLocalClustersRunDeploymentsOnFakeNodesIndependently(t *testing.T) {
	clusters := localcluster.StartClusters(t,
		localcluster.ClusterOptions{Name: "consumer", FakeNodes: 2},
		localcluster.ClusterOptions{Name: "provider", FakeNodes: 2},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	for _, c := range clusters {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "only-in-" + c.Name}}
		if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: creating namespace: %v", c.Name, err)
		}
		if _, err := c.Kube.AppsV1().Deployments(ns.Name).Create(ctx, webDeployment(3), metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: creating deployment: %v", c.Name, err)
		}
	}

	// The chapters, each a subtest that reports on its own.
	t.Run("each cluster runs its pods on its fake nodes", func(t *testing.T) {
		for _, c := range clusters {
			pods := waitPodsRunning(ctx, t, c, "only-in-"+c.Name, "app=web", 3)
			for _, p := range pods {
				node, err := c.Kube.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
				if err != nil {
					t.Fatalf("%s: pod %s is on node %q: %v", c.Name, p.Name, p.Spec.NodeName, err)
				}
				if node.Annotations[localcluster.FakeNodeAnnotation] != localcluster.FakeNodeAnnotationValue {
					t.Errorf("%s: pod %s runs on %s, which is not a kwok fake node", c.Name, p.Name, node.Name)
				}
				// Fake pods get addresses in the cluster's pod range, never
				// in its Service range.
				ip, err := netip.ParseAddr(p.Status.PodIP)
				if err != nil || !netip.MustParsePrefix(localcluster.FakePodCIDR).Contains(ip) || netip.MustParsePrefix(localcluster.ServiceCIDR).Contains(ip) {
					t.Errorf("%s: pod %s has IP %q; want one in %s, outside the Service range %s", c.Name, p.Name, p.Status.PodIP, localcluster.FakePodCIDR, localcluster.ServiceCIDR)
				}
			}
		}
	})

	// Objects created in one cluster are absent from the other.
	t.Run("objects of one cluster are absent from the other", func(t *testing.T) {
		for i, c := range clusters {
			other := clusters[1-i]
			_, err := other.Kube.CoreV1().Namespaces().Get(ctx, "only-in-"+c.Name, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				t.Errorf("namespace only-in-%s exists in %s too (err=%v): the clusters share state", c.Name, other.Name, err)
			}
			nodes, err := other.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range nodes.Items {
				if n.Name == localcluster.FakeNodeName(c.Name, 0) {
					t.Errorf("node %s of %s is registered in %s", n.Name, c.Name, other.Name)
				}
			}
		}
	})
}

func webDeployment(replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web:1"}}},
			},
		},
	}
}
