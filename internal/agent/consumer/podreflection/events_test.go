package podreflection

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

func TestTheEventsOfARemotePodShowOnItsConsumerPod(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	local := e.localPod(t, "app-"+rand.String(5))
	remote := e.remotePod(t, local.Name, e.h.opts.ConsumerClusterID, string(local.UID))
	ti, err := e.h.resolve(e.consumer)
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the handler seeing the remote pod", func(context.Context) bool {
		_, err := ti.lister.Pods(e.twin).Get(remote.Name)
		return err == nil
	})
	event := func(reason string, uid types.UID, at time.Time) {
		t.Helper()
		eventType := corev1.EventTypeWarning
		if reason == "Scheduled" {
			eventType = corev1.EventTypeNormal
		}
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: remote.Name + ".", Namespace: e.twin},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: e.twin, Name: remote.Name, UID: uid, APIVersion: "v1"},
			Type:           eventType, Reason: reason,
			Message:        fmt.Sprintf("%s: the image is not there", reason),
			Source:         corev1.EventSource{Component: "kubelet", Host: "provider-node"},
			FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at), Count: 1,
		}
		if _, err := e.kube.CoreV1().Events(e.twin).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// In watch order: an event from before the handler started, one of an
	// older pod of the same name, the provider scheduler's binding (the
	// consumer has its own), then one to show.
	event("Scheduled", remote.UID, time.Now().Add(-time.Hour))
	event("Killing", "another-pod", time.Now().Add(time.Minute))
	event("Scheduled", remote.UID, time.Now().Add(time.Minute))
	event("ErrImageNeverPull", remote.UID, time.Now().Add(time.Minute))
	select {
	case got := <-e.events.Events:
		if want := "Warning ErrImageNeverPull ErrImageNeverPull: the image is not there"; got != want {
			t.Errorf("recorded %q on the consumer pod; want %q, and nothing of events from before the start, of other pods or of the provider's scheduling", got, want)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the remote pod's event was not recorded on the consumer pod")
	}
}
