package reflection_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// The provider writes the remote pod's status; the consumer shows it in
// kubectl get and describe. Escape sequences and newlines never get there.
func TestTheProvidersStatusTextIsCleanedOnTheConsumer(t *testing.T) {
	evil := "\x1b[2J\x1b[Hpwned\nfake line"
	remote := &corev1.Pod{Status: corev1.PodStatus{
		Phase: corev1.PodFailed, Reason: evil, Message: evil,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: evil, Message: evil}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app",
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: evil, Message: evil}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: evil, Message: evil}}}},
	}}
	local := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady}}}}
	st := reflection.ConsumerStatus(remote, local, "", nil)
	texts := []string{st.Reason, st.Message, st.Conditions[0].Reason, st.Conditions[0].Message,
		st.ContainerStatuses[0].State.Waiting.Reason, st.ContainerStatuses[0].State.Waiting.Message,
		st.ContainerStatuses[0].LastTerminationState.Terminated.Reason, st.ContainerStatuses[0].LastTerminationState.Terminated.Message}
	for i, s := range texts {
		if strings.ContainsAny(s, "\x1b\n") || !strings.Contains(s, "pwned fake line") {
			t.Errorf("text %d reached the consumer as %q", i, s)
		}
	}
	if remote.Status.Message != evil {
		t.Errorf("the remote pod itself was changed: %q", remote.Status.Message)
	}
}
