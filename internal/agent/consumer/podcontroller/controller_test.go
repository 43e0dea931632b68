package podcontroller

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestMain(m *testing.M) { os.Exit(envtest.RunWithAPIServer(m)) }

const waitTimeout = 30 * time.Second

// provider plays the Provider: its remote pods are a map, and it fails
// CreatePod with refuse when that is set.
type provider struct {
	mu      sync.Mutex
	pods    map[string]*corev1.Pod // by namespace/name
	creates int
	refuse  error
	notify  func(*corev1.Pod)
}

func (p *provider) CreatePod(_ context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.creates++
	if p.refuse != nil {
		return p.refuse
	}
	p.pods[pod.Namespace+"/"+pod.Name] = pod.DeepCopy()
	return nil
}

func (p *provider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods[pod.Namespace+"/"+pod.Name] = pod.DeepCopy()
	return nil
}

func (p *provider) DeletePod(_ context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := pod.Namespace + "/" + pod.Name
	if _, ok := p.pods[key]; !ok {
		return errdefs.NotFound("no such pod")
	}
	delete(p.pods, key)
	return nil
}

func (p *provider) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pod, ok := p.pods[ns+"/"+name]; ok {
		// As the consumer sees it: compared with the informer's slim pod.
		return slim(pod.DeepCopy()), nil
	}
	return nil, errdefs.NotFound("no such pod")
}

func (p *provider) NotifyPods(_ context.Context, f func(*corev1.Pod)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = f
}

func (p *provider) has(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.pods[key]
	return ok
}

// send notifies status for pod, as the Provider does when its remote pod
// changes.
func (p *provider) send(pod *corev1.Pod, status corev1.PodStatus) {
	p.mu.Lock()
	f := p.notify
	p.mu.Unlock()
	out := pod.DeepCopy()
	out.Status = status
	f(out)
}

type env struct {
	kube   kubernetes.Interface
	ns     string
	node   string
	p      *provider
	events *record.FakeRecorder
	reads  *countingPods
	lister corelisters.PodLister
}

// countingPods counts the pod reads made through it.
type countingPods struct {
	typedcorev1.PodsGetter
	mu    sync.Mutex
	reads int
}

func (c *countingPods) Pods(ns string) typedcorev1.PodInterface {
	return countingPodInterface{PodInterface: c.PodsGetter.Pods(ns), c: c}
}

func (c *countingPods) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

type countingPodInterface struct {
	typedcorev1.PodInterface
	c *countingPods
}

func (p countingPodInterface) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error) {
	p.c.mu.Lock()
	p.c.reads++
	p.c.mu.Unlock()
	return p.PodInterface.Get(ctx, name, opts)
}

// newEnv starts a controller over an API server's pods on a node of its
// own.
func newEnv(t *testing.T) *env { return newEnvWith(t, nil) }

// newEnvWith starts a controller whose informer keeps the new pods whole
// in whole.
func newEnvWith(t *testing.T, whole *WholePods) *env {
	t.Helper()
	cfg := envtest.APIServer(t)
	admin := envtest.NewClient(t, cfg)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{kube: kube, ns: envtest.NewNamespace(t, admin, "consumer"), node: "offload-" + rand.String(6),
		p: &provider{pods: map[string]*corev1.Pod{}}, events: record.NewFakeRecorder(100), reads: &countingPods{PodsGetter: kube.CoreV1()}}
	ctx, cancel := context.WithCancel(t.Context())
	onNode := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", e.node).String()
	}), informers.WithTransform(func(obj any) (any, error) {
		whole.Keep(obj)
		return slim(obj.(*corev1.Pod)), nil
	}))
	pods := onNode.Core().V1().Pods()
	e.lister = pods.Lister()
	c, err := New(Config{Pods: pods.Informer(), Lister: pods.Lister(), Client: e.reads, Whole: whole, Provider: e.p, Events: e.events,
		RateLimiter: func() workqueue.TypedRateLimiter[string] {
			return workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second)
		},
		Logger: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	onNode.Start(ctx.Done())
	go func() { _ = c.Run(ctx, 2, 2) }()
	t.Cleanup(func() {
		cancel()
		<-c.Done()
		onNode.Shutdown()
	})
	select {
	case <-c.Ready():
	case <-c.Done():
		t.Fatalf("the controller stopped: %v", c.Err())
	}
	return e
}

// slim is what the informer keeps of pod, as podreflection's transform
// does: no volumes, no environment.
func slim(pod *corev1.Pod) *corev1.Pod {
	pod.Spec.Volumes = nil
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Env = nil
	}
	return pod
}

// pod creates a pod bound to the node.
func (e *env) pod(t *testing.T, name string, restart corev1.RestartPolicy) *corev1.Pod {
	t.Helper()
	p, err := e.kube.CoreV1().Pods(e.ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: e.node, RestartPolicy: restart,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) get(ctx context.Context, name string) (*corev1.Pod, error) {
	return e.kube.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
}

func runningStatus() corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.2.3",
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Image: "registry.k8s.io/pause:3.10", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
}

func TestAPodIsCreatedOnTheProviderAndItsNotifiedStatusWritten(t *testing.T) {
	e := newEnv(t)
	local := e.pod(t, "web", corev1.RestartPolicyAlways)
	framework.Eventually(t, waitTimeout, "the remote pod exists", func(context.Context) bool { return e.p.has(e.ns + "/web") })

	e.p.send(local, runningStatus())
	var running *corev1.Pod
	framework.Eventually(t, waitTimeout, "the consumer pod is Running with the notified IP and its labels", func(ctx context.Context) bool {
		p, err := e.get(ctx, "web")
		running = p
		return err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP == "10.1.2.3" && p.Labels["app"] == "web"
	})
	// The same status again writes nothing, and nothing is created twice.
	e.p.send(local, running.Status)
	if again, err := e.get(t.Context(), "web"); err != nil || again.ResourceVersion != running.ResourceVersion {
		t.Errorf("the pod was written again for the status it has (%v)", err)
	}
	e.p.mu.Lock()
	creates := e.p.creates
	e.p.mu.Unlock()
	if creates != 1 {
		t.Errorf("CreatePod was called %d times, want 1", creates)
	}
}

func TestAPodTheProviderRefusesSaysWhyAndANeverRestartingOneFails(t *testing.T) {
	e := newEnv(t)
	e.p.mu.Lock()
	e.p.refuse = errors.New("exceeded quota: pods")
	e.p.mu.Unlock()
	e.pod(t, "always", corev1.RestartPolicyAlways)
	e.pod(t, "never", corev1.RestartPolicyNever)
	for name, phase := range map[string]corev1.PodPhase{"always": corev1.PodPending, "never": corev1.PodFailed} {
		framework.Eventually(t, waitTimeout, name+" is "+string(phase)+" with reason ProviderFailed", func(ctx context.Context) bool {
			p, err := e.get(ctx, name)
			return err == nil && p.Status.Phase == phase && p.Status.Reason == ReasonProviderFailed && strings.Contains(p.Status.Message, "exceeded quota")
		})
	}
	select {
	case ev := <-e.events.Events:
		if !strings.HasPrefix(ev, "Warning "+EventCreateFailed+" exceeded quota") {
			t.Errorf("event %q, want a %s warning", ev, EventCreateFailed)
		}
	default:
		t.Errorf("no %s event", EventCreateFailed)
	}
	// A pod that is not Failed is retried, and starts once there is room.
	e.p.mu.Lock()
	e.p.refuse = nil
	e.p.mu.Unlock()
	framework.Eventually(t, waitTimeout, "the refused pod is created once the provider accepts it", func(context.Context) bool { return e.p.has(e.ns + "/always") })
	if e.p.has(e.ns + "/never") {
		t.Error("the Failed pod was created on the provider")
	}
}

func TestADeletedPodGoesAfterItsRemotePodEndsOrItsGracePeriod(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{"graceful", "stopped"} {
		local := e.pod(t, name, corev1.RestartPolicyAlways)
		framework.Eventually(t, waitTimeout, "the remote pod exists", func(context.Context) bool { return e.p.has(e.ns + "/" + name) })
		e.p.send(local, runningStatus())
		framework.Eventually(t, waitTimeout, name+" is Running", func(ctx context.Context) bool {
			p, err := e.get(ctx, name)
			return err == nil && p.Status.Phase == corev1.PodRunning
		})
	}

	// A running pod: its remote pod is deleted, and the consumer pod stays
	// until its grace period is over (no status says its end here).
	start := time.Now()
	if err := e.kube.CoreV1().Pods(e.ns).Delete(t.Context(), "graceful", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](3)}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the remote pod is deleted", func(context.Context) bool { return !e.p.has(e.ns + "/graceful") })
	framework.Eventually(t, waitTimeout, "the consumer pod is gone", func(ctx context.Context) bool {
		_, err := e.get(ctx, "graceful")
		return apierrors.IsNotFound(err)
	})
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("the consumer pod went after %s, before its grace period of 3s", took)
	}

	// A pod whose containers all ended goes at once, long before its grace
	// period, and its remote pod with it.
	stopped, err := e.get(t.Context(), "stopped")
	if err != nil {
		t.Fatal(err)
	}
	ended := stopped.Status.DeepCopy()
	ended.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
	ended.ContainerStatuses[0].Ready = false
	e.p.send(stopped, *ended)
	framework.Eventually(t, waitTimeout, "the ended status is written", func(ctx context.Context) bool {
		p, err := e.get(ctx, "stopped")
		return err == nil && p.Status.ContainerStatuses[0].State.Terminated != nil
	})
	start = time.Now()
	if err := e.kube.CoreV1().Pods(e.ns).Delete(t.Context(), "stopped", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](600)}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the ended pod and its remote pod are gone", func(ctx context.Context) bool {
		_, err := e.get(ctx, "stopped")
		return apierrors.IsNotFound(err) && !e.p.has(e.ns+"/stopped")
	})
	if took := time.Since(start); took > waitTimeout {
		t.Errorf("the ended pod took %s to go", took)
	}
}

func TestTheProviderGetsTheWholePodThoughTheInformerKeepsItSlim(t *testing.T) {
	e := newEnv(t)
	e.wholePodIsCreated(t, "whole")
	remote := func() *corev1.Pod { return e.remote("whole") }

	// An update too: a new image reaches the Provider with the whole pod.
	p, err := e.get(t.Context(), "whole")
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Containers[0].Image = "registry.k8s.io/pause:3.9"
	if _, err := e.kube.CoreV1().Pods(e.ns).Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the new image reaches the remote pod", func(context.Context) bool {
		return remote().Spec.Containers[0].Image == "registry.k8s.io/pause:3.9"
	})
	if got := remote(); !isWhole(got) {
		t.Errorf("UpdatePod got volumes %v and environment %v, want the pod's own", got.Spec.Volumes, got.Spec.Containers[0].Env)
	}
	e.p.mu.Lock()
	creates := e.p.creates
	e.p.mu.Unlock()
	if creates != 1 {
		t.Errorf("CreatePod was called %d times, want 1", creates)
	}
}
