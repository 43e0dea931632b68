package podreflection

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// debug adds ephemeral container name to consumer pod p through the
// consumer's pods/ephemeralcontainers subresource, as kubectl debug does.
func (e *env) debug(t *testing.T, p *corev1.Pod, name string, sc *corev1.SecurityContext) *corev1.Pod {
	t.Helper()
	p = p.DeepCopy()
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: name, Image: "registry.example/debug:1",
			TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent, SecurityContext: sc},
		TargetContainerName: "app",
	})
	got, err := e.kube.CoreV1().Pods(p.Namespace).UpdateEphemeralContainers(t.Context(), p.Name, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// view is the handler's view of consumer pod name, as GetPod returns it.
func (e *env) view(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := e.h.GetPod(t.Context(), e.consumer, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitView polls GetPod until ok holds of the view of pod name.
func (e *env) waitView(t *testing.T, name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	if _, err := framework.Poll(t.Context(), 50*time.Millisecond, waitTimeout, func(ctx context.Context) (bool, string) {
		p, err := e.h.GetPod(ctx, e.consumer, name)
		if err != nil {
			return false, err.Error()
		}
		last = p
		return ok(p), "not yet"
	}); err != nil {
		t.Fatalf("the view of pod %s never showed %s: %v\n%+v", name, what, err, last)
	}
	return last
}

func TestKubectlDebugAddsTheEphemeralContainerToTheRemotePodAndItsStatusComesBack(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	local := e.localPod(t, "web")
	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatal(err)
	}
	local = e.debug(t, local, "debugger", nil)
	// Until the remote pod has it, the view lacks it: the PodController
	// sees a difference and calls UpdatePod.
	e.waitView(t, "web", "the remote pod", func(p *corev1.Pod) bool { return p != nil })
	if v := e.view(t, "web"); len(v.Spec.EphemeralContainers) != 0 {
		t.Fatalf("the view shows ephemeral containers %v the remote pod lacks", v.Spec.EphemeralContainers)
	}
	if err := e.h.UpdatePod(ctx, local); err != nil {
		t.Fatalf("UpdatePod: %v", err)
	}
	remote := e.getRemote(ctx, t, "web")
	if len(remote.Spec.EphemeralContainers) != 1 || remote.Spec.EphemeralContainers[0].Name != "debugger" ||
		remote.Spec.EphemeralContainers[0].Image != "registry.example/debug:1" || remote.Spec.EphemeralContainers[0].TargetContainerName != "app" {
		t.Fatalf("remote ephemeral containers %+v, want the debugger targeting app", remote.Spec.EphemeralContainers)
	}
	if sc := remote.Spec.EphemeralContainers[0].SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "NET_RAW") {
		t.Errorf("the remote debugger keeps NET_RAW, which the provider refuses: %+v", sc)
	}
	// Idempotent: a second update adds nothing.
	if err := e.h.UpdatePod(ctx, local); err != nil {
		t.Fatalf("UpdatePod again: %v", err)
	}
	if again := e.getRemote(ctx, t, "web"); len(again.Spec.EphemeralContainers) != 1 {
		t.Errorf("a second UpdatePod left ephemeral containers %v", again.Spec.EphemeralContainers)
	}

	// The provider's kubelet starts it; the consumer sees its status.
	remote = e.getRemote(ctx, t, "web")
	remote.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{{Name: "debugger", Image: "registry.example/debug:1",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	if _, err := e.kube.CoreV1().Pods(e.twin).UpdateStatus(ctx, remote, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v := e.waitView(t, "web", "the debugger running", func(p *corev1.Pod) bool {
		return len(p.Status.EphemeralContainerStatuses) == 1 && p.Status.EphemeralContainerStatuses[0].State.Running != nil
	})
	if len(v.Spec.EphemeralContainers) != 1 || v.Spec.EphemeralContainers[0].Name != "debugger" {
		t.Errorf("the view's ephemeral containers %v, want the consumer pod's debugger", v.Spec.EphemeralContainers)
	}
}

func TestAnEphemeralContainerTheProviderRefusesIsReportedAndThePodKeepsRunning(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	twin, err := e.kube.CoreV1().Namespaces().Get(ctx, e.twin, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	twin.Labels[offloadv1alpha1.LabelPodSecurityEnforce] = string(offloadv1alpha1.PodSecurityBaseline)
	if _, err := e.kube.CoreV1().Namespaces().Update(ctx, twin, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	local := e.localPod(t, "web")
	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatal(err)
	}
	// kubectl debug --profile=sysadmin: privileged, which baseline refuses.
	local = e.debug(t, local, "root", &corev1.SecurityContext{Privileged: ptr.To(true)})
	if err := e.h.UpdatePod(ctx, local); err != nil {
		t.Fatalf("UpdatePod = %v, want the refusal reported on the pod, not an error (which would fail the running pod)", err)
	}
	if remote := e.getRemote(ctx, t, "web"); len(remote.Spec.EphemeralContainers) != 0 {
		t.Fatalf("the provider admitted %v", remote.Spec.EphemeralContainers)
	}
	v := e.view(t, "web")
	if len(v.Status.EphemeralContainerStatuses) != 1 {
		t.Fatalf("ephemeral container statuses %+v, want the refused one", v.Status.EphemeralContainerStatuses)
	}
	w := v.Status.EphemeralContainerStatuses[0].State.Waiting
	if w == nil || w.Reason != ReasonProviderRefused || !strings.Contains(w.Message, "privileged") {
		t.Errorf("the refused container's state %+v, want waiting %s with the provider's reason", v.Status.EphemeralContainerStatuses[0].State, ReasonProviderRefused)
	}
	if len(v.Spec.EphemeralContainers) != 1 {
		t.Errorf("the view's ephemeral containers %v, want the refused one, so the PodController does not ask again until the pod changes", v.Spec.EphemeralContainers)
	}
	expectEvent(t, e, ReasonProviderRefused)
}

// resources are what the test pods ask for.
func resources(cpu string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
}

// resizedPod creates consumer pod name asking for cpu, reflects it, then
// resizes the consumer pod to ask for resizeTo, as kubectl patch
// --subresource resize does.
func (e *env) resizedPod(t *testing.T, name, cpu, resizeTo string) *corev1.Pod {
	t.Helper()
	ctx := t.Context()
	// The API server checks a resize against the allocatable resources of
	// the pod's node: the virtual node's are the offer's.
	node, err := e.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.node}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("10")}
	node.Status.Allocatable = node.Status.Capacity
	if _, err := e.kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.consumer},
		Spec: corev1.PodSpec{NodeName: e.node, Containers: []corev1.Container{{
			Name: "app", Image: "registry.example/app:1", Resources: resources(cpu)}}},
	}
	p, err = e.kube.CoreV1().Pods(e.consumer).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	e.waitView(t, name, "the remote pod", func(v *corev1.Pod) bool { return v != nil })
	p.Spec.Containers[0].Resources = resources(resizeTo)
	if p, err = e.kube.CoreV1().Pods(e.consumer).UpdateResize(ctx, name, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAnInPlaceResizeReachesTheRemotePod(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	local := e.resizedPod(t, "web", "100m", "250m")
	// Until the remote pod is resized, the view shows its resources.
	if v := e.view(t, "web"); v.Spec.Containers[0].Resources.Requests.Cpu().Cmp(resource.MustParse("100m")) != 0 {
		t.Fatalf("the view asks for %v before the resize reached the provider, want the remote pod's 100m", v.Spec.Containers[0].Resources.Requests)
	}
	if err := e.h.UpdatePod(ctx, local); err != nil {
		t.Fatalf("UpdatePod: %v", err)
	}
	remote := e.getRemote(ctx, t, "web")
	for _, l := range []corev1.ResourceList{remote.Spec.Containers[0].Resources.Requests, remote.Spec.Containers[0].Resources.Limits} {
		if l.Cpu().Cmp(resource.MustParse("250m")) != 0 || l.Memory().Cmp(resource.MustParse("64Mi")) != 0 {
			t.Errorf("remote resources %+v, want cpu 250m and memory 64Mi", remote.Spec.Containers[0].Resources)
		}
	}
	e.waitView(t, "web", "the consumer pod's resources", func(v *corev1.Pod) bool {
		return v.Spec.Containers[0].Resources.Requests.Cpu().Cmp(resource.MustParse("250m")) == 0
	})

	// The provider's kubelet resizes it and says so; the consumer sees it.
	remote.Status.Conditions = append(remote.Status.Conditions, corev1.PodCondition{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue})
	remote.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "registry.example/app:1",
		AllocatedResources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}}
	remote, err := e.kube.CoreV1().Pods(e.twin).UpdateStatus(ctx, remote, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.waitView(t, "web", "the allocated resources and the resize in progress", func(v *corev1.Pod) bool {
		return len(v.Status.ContainerStatuses) == 1 && v.Status.ContainerStatuses[0].AllocatedResources.Cpu().Cmp(resource.MustParse("250m")) == 0 &&
			resizeInProgress(v)
	})
	// Once it is done the kubelet removes the condition; so does the view.
	remote.Status.Conditions = nil
	if _, err := e.kube.CoreV1().Pods(e.twin).UpdateStatus(ctx, remote, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitView(t, "web", "no resize in progress once the provider's kubelet removed the condition", func(v *corev1.Pod) bool {
		return !resizeInProgress(v)
	})
}

// resizeInProgress says whether pod p has condition PodResizeInProgress.
func resizeInProgress(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodResizeInProgress })
}

func TestAResizeTheProvidersQuotaRefusesIsReportedAndThePodKeepsRunning(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	hard := corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("150m")}
	q, err := e.kube.CoreV1().ResourceQuotas(e.twin).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "budget"},
		Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What the quota controller would record (the test API server runs none).
	q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("0")}}
	if _, err := e.kube.CoreV1().ResourceQuotas(e.twin).UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	local := e.resizedPod(t, "web", "100m", "500m")
	if err := e.h.UpdatePod(ctx, local); err != nil {
		t.Fatalf("UpdatePod = %v, want the refusal reported on the pod, not an error (which would fail the running pod)", err)
	}
	if remote := e.getRemote(ctx, t, "web"); remote.Spec.Containers[0].Resources.Requests.Cpu().Cmp(resource.MustParse("100m")) != 0 {
		t.Fatalf("the remote pod was resized past the quota: %+v", remote.Spec.Containers[0].Resources)
	}
	v := e.view(t, "web")
	var pending *corev1.PodCondition
	for i, c := range v.Status.Conditions {
		if c.Type == corev1.PodResizePending {
			pending = &v.Status.Conditions[i]
		}
	}
	if pending == nil || pending.Reason != corev1.PodReasonInfeasible || !strings.Contains(pending.Message, "exceeded quota") {
		t.Errorf("condition %s = %+v, want reason %s with the provider's quota message", corev1.PodResizePending, pending, corev1.PodReasonInfeasible)
	}
	expectEvent(t, e, ReasonProviderRefused)

	// Resized back within the quota, the refusal goes.
	local.Spec.Containers[0].Resources = resources("120m")
	if local, err = e.kube.CoreV1().Pods(e.consumer).UpdateResize(ctx, "web", local, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.h.UpdatePod(ctx, local); err != nil {
		t.Fatal(err)
	}
	for _, c := range e.view(t, "web").Status.Conditions {
		if c.Type == corev1.PodResizePending {
			t.Errorf("condition %+v stays after a resize the provider admitted", c)
		}
	}
}

// expectEvent checks that the handler recorded an event with reason.
func expectEvent(t *testing.T, e *env, reason string) {
	t.Helper()
	for {
		select {
		case ev := <-e.events.Events:
			if strings.Contains(ev, reason) {
				return
			}
		default:
			t.Errorf("no %s event recorded", reason)
			return
		}
	}
}
