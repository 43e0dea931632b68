package virtualnode

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

func TestThePodControllersSuccessEventsAreNotRecorded(t *testing.T) {
	fake := record.NewFakeRecorder(10)
	r := warningsOnly{fake}
	pod := &corev1.Pod{}
	r.Event(pod, corev1.EventTypeNormal, "ProviderCreateSuccess", "Create pod in provider successfully")
	r.Eventf(pod, corev1.EventTypeNormal, "ProviderDeleteSuccess", "Delete pod in provider %s", "successfully")
	r.Event(pod, corev1.EventTypeWarning, "ProviderCreateFailed", "quota exceeded")
	r.AnnotatedEventf(pod, nil, corev1.EventTypeWarning, "ProviderUpdateFailed", "%s", "conflict")
	close(fake.Events)
	var got []string
	for e := range fake.Events {
		got = append(got, e)
	}
	want := []string{"Warning ProviderCreateFailed quota exceeded", "Warning ProviderUpdateFailed conflict"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("recorded %q, want only the failures %q", got, want)
	}
}
