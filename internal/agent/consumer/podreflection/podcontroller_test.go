package podreflection

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/podcontroller"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// runPodController runs the agent's pod controller for the virtual node
// with e's handler, wired as the agent wires it, until the test ends.
func runPodController(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	onNode := informers.NewSharedInformerFactoryWithOptions(e.kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", e.node).String()
	}), informers.WithTransform(SlimConsumerPod))
	pods := onNode.Core().V1().Pods()
	pc, err := podcontroller.New(podcontroller.Config{
		Pods:     pods.Informer(),
		Lister:   pods.Lister(),
		Client:   e.kube.CoreV1(),
		Provider: e.h,
		Events:   &record.FakeRecorder{},
		RateLimiter: func() workqueue.TypedRateLimiter[string] {
			return workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second)
		},
		Logger: testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	onNode.Start(ctx.Done())
	go func() { _ = pc.Run(ctx, 2, 2) }()
	t.Cleanup(func() {
		cancel()
		<-pc.Done()
		onNode.Shutdown()
	})
	select {
	case <-pc.Ready():
	case <-pc.Done():
		t.Fatalf("the pod controller stopped: %v", pc.Err())
	}
}

func TestThePodControllerRunsPodsOfTheVirtualNodeOnTheProvider(t *testing.T) {
	e := newEnv(t)
	runPodController(t, e)
	e.localPod(t, "web")

	var remote *corev1.Pod
	framework.Eventually(t, waitTimeout, "the remote pod exists", func(ctx context.Context) bool {
		remote = e.getRemote(ctx, t, "web")
		return remote != nil
	})
	remote.Status.Phase = corev1.PodRunning
	remote.Status.PodIP = "10.1.2.3"
	if _, err := e.kube.CoreV1().Pods(e.twin).UpdateStatus(t.Context(), remote, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the consumer pod is Running on the virtual node's address", func(ctx context.Context) bool {
		p, err := e.kube.CoreV1().Pods(e.consumer).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP == "10.1.2.3" && p.Status.HostIP == nodeIP
	})

	if err := e.kube.CoreV1().Pods(e.consumer).Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the consumer and remote pods are gone", func(ctx context.Context) bool {
		_, err := e.kube.CoreV1().Pods(e.consumer).Get(ctx, "web", metav1.GetOptions{})
		return err != nil && e.getRemote(ctx, t, "web") == nil
	})
}

func TestThePodControllerReportsTheGenerationOfAnUpdateThatNeverReachesTheRemotePod(t *testing.T) {
	e := newEnv(t)
	runPodController(t, e)
	e.localPod(t, "web")
	var remote *corev1.Pod
	framework.Eventually(t, waitTimeout, "the remote pod exists", func(ctx context.Context) bool {
		remote = e.getRemote(ctx, t, "web")
		return remote != nil
	})
	// The provider's kubelet runs the remote pod and has seen its spec.
	remote.Status.Phase = corev1.PodRunning
	remote.Status.ObservedGeneration = remote.Generation
	if _, err := e.kube.CoreV1().Pods(e.twin).UpdateStatus(t.Context(), remote, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	observes := func(generation int64) func(context.Context) bool {
		return func(ctx context.Context) bool {
			p, err := e.kube.CoreV1().Pods(e.consumer).Get(ctx, "web", metav1.GetOptions{})
			return err == nil && p.Generation == generation && p.Status.ObservedGeneration == generation
		}
	}
	framework.Eventually(t, waitTimeout, "the consumer pod's status observes generation 1", observes(1))

	// A scheduling toleration: the consumer pod's generation goes to 2, and
	// reflection leaves it out of the remote pod, as the provider places pods.
	local, err := e.kube.CoreV1().Pods(e.consumer).Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	local.Spec.Tolerations = append(local.Spec.Tolerations, corev1.Toleration{Key: "example.com/foo", Operator: corev1.TolerationOpEqual, Value: "bar", Effect: corev1.TaintEffectNoSchedule})
	if _, err := e.kube.CoreV1().Pods(e.consumer).Update(t.Context(), local, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the consumer pod's status observes generation 2", observes(2))
	if got := e.getRemote(t.Context(), t, "web"); got.Generation != remote.Generation {
		t.Errorf("the remote pod changed (generation %d, was %d); the toleration should have been left out", got.Generation, remote.Generation)
	}
}
