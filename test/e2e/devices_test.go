package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/provider/remotenamespace"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// The chapter of this file runs in
// TestANamespaceSpansItsProviderAndUnoffloadRemovesTheTwin
// (namespace_test.go), whose provider lends nvidia.com/gpu
// (peer generate --extended-resource nvidia.com/gpu).

// Fake devices: the provider lends the first, not the second.
const (
	lentGPU      corev1.ResourceName = "nvidia.com/gpu"
	notLentFPGA  corev1.ResourceName = "example.com/fpga"
	providerGPUs                     = 4
)

// expectLentDevices gives the provider a node with providerGPUs fake GPUs
// and two fake FPGAs, then checks what a consumer relies on: its virtual
// node, its twin namespace's quota and status show half the GPUs (the
// default share) and no FPGA; a pod that asks for a GPU runs on the
// virtual node, as a pod of the provider's GPU node; pods that ask for
// more GPUs than lent, or for an FPGA, are never scheduled on the
// virtual node, and never reach the provider.
func expectLentDevices(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, ns, twin string) {
	t.Helper()
	existing, err := provider.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: localcluster.FakeNodeLabel + "=" + localcluster.FakeNodeLabelValue})
	if err != nil {
		t.Fatal(err)
	}
	gpuNode := localcluster.FakeNodeName(provider.Name, len(existing.Items))
	if err := provider.AddFakeNodes(ctx, 1, localcluster.Capacity{Extended: map[corev1.ResourceName]string{lentGPU: fmt.Sprint(providerGPUs), notLentFPGA: "2"}}); err != nil {
		t.Fatal(err)
	}
	lent := resource.MustParse(fmt.Sprint(providerGPUs / 2))
	node := offloadv1alpha1.VirtualNodeName("provider")
	took := waitFor(ctx, t, time.Minute, "the virtual node to offer half the GPUs and no FPGA", func(ctx context.Context) (bool, string) {
		n, err := consumer.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		gpus, fpgas := n.Status.Allocatable[lentGPU], n.Status.Allocatable[notLentFPGA]
		_, listed := n.Status.Allocatable[notLentFPGA]
		return gpus.Cmp(lent) == 0 && listed && fpgas.IsZero(), fmt.Sprintf("allocatable %v", n.Status.Allocatable)
	})
	t.Logf("the virtual node offers %s %s %s after the GPU node joined the provider", lent.String(), lentGPU, took.Round(time.Millisecond))
	pc := ctrlClient(t, provider)
	waitFor(ctx, t, time.Minute, "the twin namespace's quota to hold the lent GPUs and no FPGA", func(ctx context.Context) (bool, string) {
		var q corev1.ResourceQuota
		if err := pc.Get(ctx, client.ObjectKey{Namespace: twin, Name: remotenamespace.QuotaName}, &q); err != nil {
			return false, err.Error()
		}
		gpus, okGPU := q.Spec.Hard["requests."+lentGPU]
		fpgas, okFPGA := q.Spec.Hard["requests."+notLentFPGA]
		return okGPU && gpus.Cmp(lent) == 0 && okFPGA && fpgas.IsZero(), fmt.Sprintf("hard %v", q.Spec.Hard)
	})
	if got := peerFields(t, consumer, "provider"); !strings.Contains(got["allocatableExtendedResources"], string(lentGPU)+"="+lent.String()) ||
		got["extendedResources"] != string(lentGPU) {
		t.Errorf("status peer provider shows devices %q, lent %q; want %s=%s lent", got["allocatableExtendedResources"], got["extendedResources"], lentGPU, lent.String())
	}

	asking := func(name string, r corev1.ResourceName, n int) *corev1.Pod {
		p := harmlessPod(name, ns)
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{r: resource.MustParse(fmt.Sprint(n))}
		if _, err := consumer.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = consumer.Kube.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
		return p
	}
	gpu := asking("gpu", lentGPU, 1)
	waitFor(ctx, t, 2*time.Minute, "the GPU pod to run on the virtual node, on the provider's GPU node", func(ctx context.Context) (bool, string) {
		p, err := consumer.Kube.CoreV1().Pods(ns).Get(ctx, gpu.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Spec.NodeName != node || p.Status.Phase != corev1.PodRunning {
			return false, fmt.Sprintf("on node %q, phase %s", p.Spec.NodeName, p.Status.Phase)
		}
		remote, err := provider.Kube.CoreV1().Pods(twin).Get(ctx, gpu.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return remote.Spec.NodeName == gpuNode, fmt.Sprintf("the remote pod is on node %q, want %s", remote.Spec.NodeName, gpuNode)
	})

	// More than lent, and a device not lent: the consumer's scheduler
	// finds no room on the virtual node, and the provider sees no pod.
	for _, ask := range []struct {
		name string
		r    corev1.ResourceName
		n    int
	}{{"gpus", lentGPU, providerGPUs/2 + 1}, {"fpga", notLentFPGA, 1}} {
		asking(ask.name, ask.r, ask.n)
		waitFor(ctx, t, time.Minute, "pod "+ask.name+" to be unschedulable for want of "+string(ask.r), func(ctx context.Context) (bool, string) {
			got, err := consumer.Kube.CoreV1().Pods(ns).Get(ctx, ask.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, c := range got.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable &&
					strings.Contains(c.Message, "Insufficient "+string(ask.r)) {
					return got.Spec.NodeName == "", fmt.Sprintf("on node %q", got.Spec.NodeName)
				}
			}
			return false, fmt.Sprintf("node %q, conditions %v", got.Spec.NodeName, got.Status.Conditions)
		})
		if _, err := provider.Kube.CoreV1().Pods(twin).Get(ctx, ask.name, metav1.GetOptions{}); err == nil {
			t.Errorf("pod %s, which the virtual node has no room for, exists on the provider", ask.name)
		}
	}
}
