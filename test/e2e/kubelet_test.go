package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/provider/remotenamespace"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

// The chapter of this file runs in
// TestOffloadedPodsRunInTheProvidersTwinNamespace (offload_test.go), whose
// provider runs every remote pod on its real node.

// expectKubectlDebug debugs an offloaded pod in namespace ns as a user
// would, kubectl debug with an image of its own: the
// ephemeral container runs beside the pod's on the provider, its status
// comes back, kubectl exec reaches it (and through it the app container,
// on the pod's own address), and kubectl attach streams what it writes.
func expectKubectlDebug(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, ns, twin string) {
	t.Helper()
	// A pod of its own: an ephemeral container stays for the pod's life,
	// and the later chapters use the Deployment's pods.
	p := harmlessPod("debugged", ns)
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	if _, err := consumer.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = consumer.Kube.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
	}()
	pod := waitPodsRunning(ctx, t, consumer, ns, "attack=debugged", 1)[0]
	// Its own port: it shares the pod's network with the app on 8080.
	// Restricted: the provider's Pod Security level (baseline) refuses
	// kubectl debug's default profile, which adds SYS_PTRACE.
	if out, err := kubectl(t, consumer, "-n", ns, "debug", pod.Name, "--image", testAppImage, "--image-pull-policy", "Never",
		"--profile", "restricted", "-c", "debugger", "--env", "PORT=9090"); err != nil {
		t.Fatalf("kubectl debug: %v\n%s", err, out)
	}
	took := waitFor(ctx, t, 2*time.Minute, "the debugger to run, as the consumer pod's status says", func(ctx context.Context) (bool, string) {
		p, err := consumer.Kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, s := range p.Status.EphemeralContainerStatuses {
			if s.Name == "debugger" && s.State.Running != nil {
				return true, ""
			}
		}
		return false, fmt.Sprintf("ephemeral container statuses %+v", p.Status.EphemeralContainerStatuses)
	})
	t.Logf("kubectl debug: the ephemeral container runs %s after it was added", took.Round(time.Millisecond))
	remote, err := provider.Kube.CoreV1().Pods(twin).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || len(remote.Spec.EphemeralContainers) != 1 || remote.Spec.EphemeralContainers[0].Name != "debugger" {
		t.Fatalf("the remote pod's ephemeral containers: %+v (err=%v), want the debugger", remote.Spec.EphemeralContainers, err)
	}

	if out, err := kubectl(t, consumer, "-n", ns, "exec", pod.Name, "-c", "debugger", "--", "/testapp", "get", "http://127.0.0.1:8080/hostname"); err != nil ||
		strings.TrimSpace(out) != pod.Name {
		t.Errorf("kubectl exec in the debugger, asking the app for its host name: %q (err=%v), want %s", out, err, pod.Name)
	}

	bin, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	attach := exec.CommandContext(actx, filepath.Join(bin, "kubectl"), "--kubeconfig", consumer.Kubeconfig, "-n", ns, "attach", pod.Name, "-c", "debugger")
	var streamed strings.Builder
	out := &lockedWriter{w: &streamed}
	attach.Stdout, attach.Stderr = out, out
	if err := attach.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = attach.Wait() }()
	waitFor(ctx, t, time.Minute, "kubectl attach to stream the debugger's log of a request", func(ctx context.Context) (bool, string) {
		_, _ = execIn(t, consumer, ns, pod.Name, "get", "http://127.0.0.1:9090/attached")
		return strings.Contains(out.String(), "GET /attached"), out.String()
	})
}

// expectInPlaceResize resizes an offloaded pod in place, as kubectl patch
// --subresource resize does: the remote pod is resized through the
// provider's pods/resize, the provider's kubelet carries it out and the
// consumer pod's status says so (the resources its container now has),
// and the twin namespace's quota counts the new requests.
func expectInPlaceResize(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, ns, twin string) {
	t.Helper()
	p := harmlessPod("resized", ns)
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	if _, err := consumer.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = consumer.Kube.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
	}()
	waitPodsRunning(ctx, t, consumer, ns, "attack=resized", 1)
	usedCPU := func(ctx context.Context) (resource.Quantity, error) {
		q, err := provider.Kube.CoreV1().ResourceQuotas(twin).Get(ctx, remotenamespace.QuotaName, metav1.GetOptions{})
		if err != nil {
			return resource.Quantity{}, err
		}
		return q.Status.Used[corev1.ResourceRequestsCPU], nil
	}
	// The baseline: the quota counts the twin namespace's pods as they
	// are, none of them going (the earlier chapters' pods, whose removal
	// would lower what it counts while this one watches it grow).
	var before resource.Quantity
	waitFor(ctx, t, 2*time.Minute, "the twin namespace's quota to count its pods, none of them terminating", func(ctx context.Context) (bool, string) {
		pods, err := provider.Kube.CoreV1().Pods(twin).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var sum resource.Quantity
		for i := range pods.Items {
			pod := &pods.Items[i]
			if pod.DeletionTimestamp != nil {
				return false, "pod " + pod.Name + " is terminating"
			}
			if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
				sum.Add(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[corev1.ResourceCPU])
			}
		}
		if before, err = usedCPU(ctx); err != nil {
			return false, err.Error()
		}
		return before.Cmp(sum) == 0, fmt.Sprintf("the quota counts %s, the pods request %s", before.String(), sum.String())
	})

	patch := `{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"150m"},"limits":{"cpu":"300m"}}}]}}`
	if out, err := kubectl(t, consumer, "-n", ns, "patch", "pod", p.Name, "--subresource", "resize", "-p", patch); err != nil {
		t.Fatalf("kubectl patch --subresource resize: %v\n%s", err, out)
	}
	want := resource.MustParse("150m")
	took := waitFor(ctx, t, 2*time.Minute, "the consumer pod's container to have the new cpu request, and no resize pending", func(ctx context.Context) (bool, string) {
		got, err := consumer.Kube.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || len(got.Status.ContainerStatuses) != 1 || got.Status.ContainerStatuses[0].Resources == nil {
			return false, fmt.Sprintf("err=%v, statuses %+v", err, got.Status.ContainerStatuses)
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress {
				return false, fmt.Sprintf("condition %s %s: %s", c.Type, c.Reason, c.Message)
			}
		}
		have := got.Status.ContainerStatuses[0].Resources.Requests[corev1.ResourceCPU]
		return have.Cmp(want) == 0, fmt.Sprintf("the container has %s", have.String())
	})
	t.Logf("in-place resize: the provider's kubelet gave the container 150m %s after the patch", took.Round(time.Millisecond))
	remote, err := provider.Kube.CoreV1().Pods(twin).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil || remote.Labels[offloadv1alpha1.LabelOriginPodUID] == "" {
		t.Fatalf("the remote pod: %v", err)
	}
	if got := remote.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU]; got.Cmp(resource.MustParse("300m")) != 0 {
		t.Errorf("the remote pod's cpu limit is %s, want 300m", got.String())
	}
	waitFor(ctx, t, time.Minute, "the twin namespace's quota to count the 50m more", func(ctx context.Context) (bool, string) {
		after, err := usedCPU(ctx)
		if err != nil {
			return false, err.Error()
		}
		after.Sub(before)
		return after.Cmp(resource.MustParse("50m")) == 0, "used grew by " + after.String()
	})
}
