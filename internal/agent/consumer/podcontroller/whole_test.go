package podcontroller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// wholePod creates, on e's node, a pod with what the informer's slim copy
// lacks: a volume and an environment variable.
func (e *env) wholePod(t *testing.T, name string) {
	t.Helper()
	_, err := e.kube.CoreV1().Pods(e.ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: e.node,
			Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				Env: []corev1.EnvVar{{Name: "GREETING", Value: "hello"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// wholePodIsCreated creates wholePod name and waits for its remote pod,
// which must have what the informer's slim copy lacks.
func (e *env) wholePodIsCreated(t *testing.T, name string) {
	t.Helper()
	e.wholePod(t, name)
	framework.Eventually(t, waitTimeout, "the remote pod exists", func(context.Context) bool { return e.remote(name) != nil })
	if got := e.remote(name); !isWhole(got) {
		t.Errorf("CreatePod got volumes %v and environment %v, want the pod's own", got.Spec.Volumes, got.Spec.Containers[0].Env)
	}
}

// remote returns the Provider's remote pod of name, nil if there is none.
func (e *env) remote(name string) *corev1.Pod {
	e.p.mu.Lock()
	defer e.p.mu.Unlock()
	return e.p.pods[e.ns+"/"+name]
}

// isWhole reports whether p has what wholePod gave it.
func isWhole(p *corev1.Pod) bool {
	return len(p.Spec.Volumes) == 1 && len(p.Spec.Containers[0].Env) == 1
}

func TestANewPodKeptWholeGetsItsRemotePodWithoutBeingReadBack(t *testing.T) {
	whole := NewWholePods(0)
	e := newEnvWith(t, whole)
	e.wholePodIsCreated(t, "kept")
	if n := e.reads.count(); n != 0 {
		t.Errorf("the controller read the pod %d times from the API server, want 0: the informer kept it whole", n)
	}
	if pods, bytes := whole.Len(); pods != 0 || bytes != 0 {
		t.Errorf("%d pods (%d bytes) still kept after their remote pods' creation, want none", pods, bytes)
	}

	// While the provider keeps the remote pod Pending, the pod is new, but
	// a change of its status, which no sync follows, does not keep it.
	p, err := e.get(t.Context(), "kept")
	if err != nil {
		t.Fatal(err)
	}
	e.p.send(p, corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}})
	framework.Eventually(t, waitTimeout, "the informer has the pod Unschedulable", func(context.Context) bool {
		got, err := e.lister.Pods(e.ns).Get("kept")
		return err == nil && len(got.Status.Conditions) == 1 && got.Status.Conditions[0].Reason == corev1.PodReasonUnschedulable
	})
	framework.Eventually(t, waitTimeout, "the Pending pod is not kept whole", func(context.Context) bool {
		pods, _ := whole.Len()
		return pods == 0
	})

	// Once the remote pod runs, the pod is not new: an update of its image
	// reads it whole from the API server.
	e.p.send(p, runningStatus())
	framework.Eventually(t, waitTimeout, "the pod is Running", func(ctx context.Context) bool {
		p, err = e.get(ctx, "kept")
		return err == nil && p.Status.Phase == corev1.PodRunning
	})
	p.Spec.Containers[0].Image = "registry.k8s.io/pause:3.9"
	if _, err := e.kube.CoreV1().Pods(e.ns).Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the new image reaches the remote pod", func(context.Context) bool {
		return e.remote("kept").Spec.Containers[0].Image == "registry.k8s.io/pause:3.9"
	})
	if got := e.remote("kept"); !isWhole(got) {
		t.Errorf("UpdatePod got volumes %v and environment %v, want the pod's own", got.Spec.Volumes, got.Spec.Containers[0].Env)
	}
	if n := e.reads.count(); n != 1 {
		t.Errorf("the controller read the pod %d times from the API server, want 1: for the update of a running pod", n)
	}
	if pods, _ := whole.Len(); pods != 0 {
		t.Errorf("%d pods still kept, want none: the running pod is not new", pods)
	}
}

func TestANewPodBeyondTheBudgetIsReadWholeFromTheAPIServer(t *testing.T) {
	whole := NewWholePods(1)
	e := newEnvWith(t, whole)
	e.wholePodIsCreated(t, "too-big")
	if n := e.reads.count(); n != 1 {
		t.Errorf("the controller read the pod %d times from the API server, want 1: it did not fit the budget", n)
	}
}

// newPod is a bound pod that the Provider has not started, at version rv.
func newPod(uid types.UID, rv string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: uid, ResourceVersion: rv,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}},
		Spec:   corev1.PodSpec{NodeName: "offload-peer", Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

func TestWholePodsKeepsOnlyTheLatestVersionOfANewPodWithinItsBudget(t *testing.T) {
	const key = "ns/p"
	w := NewWholePods(0)
	p := newPod("a", "1")
	w.Keep(p)
	if pods, bytes := w.Len(); pods != 1 || bytes <= 0 {
		t.Fatalf("kept %d pods (%d bytes), want the new pod", pods, bytes)
	}
	if len(p.ManagedFields) != 1 {
		t.Errorf("Keep left the informer's pod with managedFields %v, want its own", p.ManagedFields)
	}
	p.Spec.Containers[0].Image = "changed after Keep"
	if got := w.take(key, "a", "2"); got != nil {
		t.Errorf("another version of the pod was taken: %v", got.ResourceVersion)
	}
	got := w.take(key, "a", "1")
	switch {
	case got == nil:
		t.Fatal("the kept version was not taken")
	case got.Spec.Containers[0].Image != "pause":
		t.Errorf("the kept pod changed with the informer's: image %q", got.Spec.Containers[0].Image)
	case got.ManagedFields != nil:
		t.Errorf("the kept pod has managedFields %v, want none", got.ManagedFields)
	}
	if pods, bytes := w.Len(); pods != 0 || bytes != 0 {
		t.Errorf("%d pods (%d bytes) kept after the take, want none", pods, bytes)
	}

	// A version that is not new forgets the earlier one.
	w.Keep(newPod("a", "3"))
	started := newPod("a", "4")
	started.Status.HostIP = "10.0.0.1"
	w.Keep(started)
	if pods, bytes := w.Len(); pods != 0 || bytes != 0 {
		t.Errorf("%d pods (%d bytes) kept after a version whose remote pod started, want none", pods, bytes)
	}
	for name, mutate := range map[string]func(*corev1.Pod){
		"being deleted":         func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} },
		"not bound":             func(p *corev1.Pod) { p.Spec.NodeName = "" },
		"with container status": func(p *corev1.Pod) { p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c"}} },
		"Running":               func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning },
	} {
		p := newPod("a", "5")
		mutate(p)
		w.Keep(p)
		if pods, _ := w.Len(); pods != 0 {
			t.Errorf("a pod %s was kept", name)
		}
	}

	// A pod of the same name and another UID replaces it; the old UID's
	// version is not taken.
	w.Keep(newPod("a", "6"))
	w.Keep(newPod("b", "7"))
	if got := w.take(key, "a", "6"); got != nil {
		t.Error("the replaced pod's version was taken")
	}
	// Forgetting another version leaves it; forgetting its own removes it.
	w.forget(key, "6")
	if pods, _ := w.Len(); pods != 1 {
		t.Errorf("forgetting another version left %d pods, want 1", pods)
	}
	w.forget(key, "7")
	if pods, bytes := w.Len(); pods != 0 || bytes != 0 {
		t.Errorf("%d pods (%d bytes) kept after forgetting the version, want none", pods, bytes)
	}

	// The budget: one pod fits, a second does not.
	one := newPod("c", "8")
	one.ManagedFields = nil
	w = NewWholePods(one.Size())
	w.Keep(one)
	other := newPod("d", "9")
	other.Name = "q"
	w.Keep(other)
	if pods, bytes := w.Len(); pods != 1 || bytes != one.Size() {
		t.Errorf("kept %d pods (%d bytes) within a budget of one pod (%d bytes), want 1", pods, bytes, one.Size())
	}

	// What is not a pod is left alone, and a nil WholePods keeps nothing.
	w.Keep(cache.DeletedFinalStateUnknown{Key: key, Obj: newPod("e", "10")})
	var none *WholePods
	none.Keep(newPod("f", "11"))
	if got := none.take(key, "f", "11"); got != nil {
		t.Error("a nil WholePods gave a pod")
	}
	none.forget(key, "")
}
