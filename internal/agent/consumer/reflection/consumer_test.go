package reflection_test

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

func TestAPodWhoseRemotePodWasDeletedOnTheProviderIsFailed(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name                 string
		remoteGone, consumer bool
		phase, want          corev1.PodPhase
	}{
		{"deleted on the provider, ended Succeeded", true, false, corev1.PodSucceeded, corev1.PodFailed},
		{"deleted on the provider, still running", true, false, corev1.PodRunning, corev1.PodRunning},
		{"deleted by the consumer", true, true, corev1.PodSucceeded, corev1.PodSucceeded},
		{"completed on its own", false, false, corev1.PodSucceeded, corev1.PodSucceeded},
	} {
		remote, local := &corev1.Pod{Status: corev1.PodStatus{Phase: tc.phase}}, &corev1.Pod{}
		if tc.remoteGone {
			remote.DeletionTimestamp = &now
		}
		if tc.consumer {
			local.DeletionTimestamp = &now
		}
		st := reflection.ConsumerStatus(remote, local, "", nil)
		if st.Phase != tc.want {
			t.Errorf("%s: phase %s, want %s", tc.name, st.Phase, tc.want)
		}
		if deleted := st.Reason == reflection.ReasonRemotePodDeleted; deleted != (tc.want != tc.phase) {
			t.Errorf("%s: reason %q", tc.name, st.Reason)
		}
	}
}

func TestConsumerView(t *testing.T) {
	remote := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: twinNS,
			Labels: map[string]string{
				"app": "web", offloadv1alpha1.LabelOriginClusterID: consumerID, offloadv1alpha1.LabelOriginPodUID: "u-1",
			},
			Annotations: map[string]string{
				"team": "payments", "provider.example/injected": "x", reflection.AnnotationReflectedAnnotations: "team",
			}},
		Spec: corev1.PodSpec{
			NodeName:              "provider-node-1",
			ActiveDeadlineSeconds: ptr.To[int64](60),
			InitContainers:        []corev1.Container{{Name: "init", Image: "init:2"}},
			Containers:            []corev1.Container{{Name: "app", Image: "app:2"}, {Name: "sidecar", Image: "sidecar:1"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.8.0.5", HostIP: "192.168.1.20"},
	}
	local := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u-1",
			Labels: map[string]string{"app": "old"}, Annotations: map[string]string{"team": "old"}},
		Spec: corev1.PodSpec{
			NodeName:       vnName,
			InitContainers: []corev1.Container{{Name: "init", Image: "init:1"}},
			Containers:     []corev1.Container{{Name: "app", Image: "app:1"}, {Name: "sidecar", Image: "sidecar:1"}},
		},
	}
	for _, tc := range []struct {
		name  string
		local *corev1.Pod
	}{
		{"of an existing consumer pod", local},
		{"of a consumer pod that is gone", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := reflection.ConsumerView(remote, tc.local, reflection.Origin{}, "shop", vnName, "172.18.0.2", nil)
			assertEqual(t, "identity", []string{"web", "shop", "u-1", vnName}, []string{got.Name, got.Namespace, string(got.UID), got.Spec.NodeName})
			assertEqual(t, "labels", map[string]string{"app": "web"}, got.Labels)
			assertEqual(t, "annotations", map[string]string{"team": "payments"}, got.Annotations)
			assertEqual(t, "images", []string{"init:2", "app:2", "sidecar:1"},
				[]string{got.Spec.InitContainers[0].Image, got.Spec.Containers[0].Image, got.Spec.Containers[1].Image})
			assertEqual(t, "activeDeadlineSeconds", ptr.To[int64](60), got.Spec.ActiveDeadlineSeconds)
			assertEqual(t, "status", []string{"Running", "10.8.0.5", "172.18.0.2"},
				[]string{string(got.Status.Phase), got.Status.PodIP, got.Status.HostIP})
		})
	}
	if local.Labels["app"] != "old" || local.Spec.Containers[0].Image != "app:1" {
		t.Error("ConsumerView changed the consumer pod it was given")
	}
}

func TestTerminate(t *testing.T) {
	running := func() corev1.PodStatus {
		return corev1.PodStatus{
			Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
				{Name: "done", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}},
			},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		}
	}
	allExited := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
		{Name: "app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}},
	}}
	for _, tc := range []struct {
		name            string
		st              corev1.PodStatus
		consumerDeleted bool
		want            corev1.PodPhase
	}{
		{"running, deleted by the consumer", running(), true, corev1.PodFailed},
		{"running, deleted on the provider", running(), false, corev1.PodFailed},
		{"all exited 0, deleted by the consumer", *allExited.DeepCopy(), true, corev1.PodSucceeded},
		{"all exited 0, deleted on the provider", *allExited.DeepCopy(), false, corev1.PodFailed},
		{"no container status", corev1.PodStatus{}, true, corev1.PodFailed},
	} {
		st := tc.st
		reflection.Terminate(&st, tc.consumerDeleted, metav1.Now())
		if st.Phase != tc.want || st.Reason != reflection.ReasonRemotePodDeleted {
			t.Errorf("%s: phase %s reason %q, want %s %s", tc.name, st.Phase, st.Reason, tc.want, reflection.ReasonRemotePodDeleted)
		}
		for _, cs := range st.ContainerStatuses {
			if cs.State.Terminated == nil || cs.Ready {
				t.Errorf("%s: container %s is not terminated: %+v", tc.name, cs.Name, cs)
			}
		}
		for _, c := range st.Conditions {
			if c.Status != corev1.ConditionFalse {
				t.Errorf("%s: condition %s is %s, want False", tc.name, c.Type, c.Status)
			}
		}
	}
}

func TestConsumerViewDiffersExactlyWhileAnUpdateHasNotReachedTheRemotePod(t *testing.T) {
	gpu := corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	virtual := corev1.Toleration{Key: offloadv1alpha1.TaintVirtualNode, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
	pod := func(deadline *int64, tolerations ...corev1.Toleration) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u-1"},
			Spec: corev1.PodSpec{NodeName: vnName, ActiveDeadlineSeconds: deadline, Tolerations: tolerations,
				Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
		}
	}
	remote := func(deadline *int64, tolerations ...corev1.Toleration) *corev1.Pod {
		p := pod(deadline, tolerations...)
		p.Namespace, p.Spec.NodeName = twinNS, "provider-node-1"
		p.Labels = map[string]string{offloadv1alpha1.LabelOriginClusterID: consumerID, offloadv1alpha1.LabelOriginPodUID: "u-1"}
		return p
	}
	observed := func(p *corev1.Pod, generation, observed int64) *corev1.Pod {
		p.Generation, p.Status.ObservedGeneration = generation, observed
		return p
	}
	placing := reflection.Origin{NodePlacement: true}
	tests := []struct {
		name          string
		local, remote *corev1.Pod
		o             reflection.Origin
		differs       bool
	}{
		{"a deadline set on the consumer pod only", pod(ptr.To[int64](30)), remote(nil), reflection.Origin{}, true},
		{"a deadline the remote pod has", pod(ptr.To[int64](30)), remote(ptr.To[int64](30)), reflection.Origin{}, false},
		{"a toleration the provider lets through, not yet on the remote pod", pod(nil, virtual, gpu), remote(nil), placing, true},
		{"a toleration the provider lets through, on the remote pod", pod(nil, virtual, gpu), remote(nil, gpu), placing, false},
		{"a toleration reflection leaves out under the provider's policy", pod(nil, virtual, gpu), remote(nil), reflection.Origin{}, false},
		{"a toleration reflection leaves out, added since the consumer pod's status observed its generation",
			observed(pod(nil, virtual, gpu), 2, 1), observed(remote(nil), 1, 1), reflection.Origin{}, true},
		{"a toleration reflection leaves out, once the consumer pod's status observed its generation",
			observed(pod(nil, virtual, gpu), 2, 2), observed(remote(nil), 1, 1), reflection.Origin{}, false},
		{"a toleration reflection leaves out, while the remote pod's status lags too",
			observed(pod(nil, virtual, gpu), 2, 1), observed(remote(nil), 2, 1), reflection.Origin{}, false},
		{"a toleration reflection leaves out, from a provider that reports no observed generation",
			observed(pod(nil, virtual, gpu), 2, 1), observed(remote(nil), 1, 0), reflection.Origin{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			view := reflection.ConsumerView(tt.remote, tt.local, tt.o, "shop", vnName, "", nil)
			same := apiequality.Semantic.DeepEqual(view.Spec.ActiveDeadlineSeconds, tt.local.Spec.ActiveDeadlineSeconds) &&
				reflect.DeepEqual(view.Spec.Tolerations, tt.local.Spec.Tolerations)
			if same == tt.differs {
				t.Errorf("view deadline %v tolerations %v; consumer pod %v %v: differs = %v, want %v",
					view.Spec.ActiveDeadlineSeconds, view.Spec.Tolerations, tt.local.Spec.ActiveDeadlineSeconds, tt.local.Spec.Tolerations, !same, tt.differs)
			}
		})
	}
}
