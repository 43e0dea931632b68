package reflection_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

func remotePod(name, cluster, uid string) corev1.Pod {
	labels := map[string]string{}
	if cluster != "" {
		labels[offloadv1alpha1.LabelOriginClusterID] = cluster
	}
	if uid != "" {
		labels[offloadv1alpha1.LabelOriginPodUID] = uid
	}
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: twinNS, Labels: labels}}
}

func TestIsRemoteOf(t *testing.T) {
	tests := []struct {
		name    string
		pod     corev1.Pod
		wantUID types.UID
		wantOK  bool
	}{
		{"a pod reflected by the cluster yields its origin UID", remotePod("a", consumerID, "uid-a"), "uid-a", true},
		{"a pod of another consumer is not ours", remotePod("a", "other", "uid-a"), "", false},
		{"a pod without the UID label is not claimed", remotePod("a", consumerID, ""), "", false},
		{"a pod without labels is not ours", remotePod("a", "", ""), "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uid, ok := reflection.IsRemoteOf(&tt.pod, consumerID)
			if uid != tt.wantUID || ok != tt.wantOK {
				t.Errorf("IsRemoteOf = %q, %v; want %q, %v", uid, ok, tt.wantUID, tt.wantOK)
			}
		})
	}
	if p := remotePod("a", "", ""); reflection.IsReflection(&p, "") {
		t.Error("an empty cluster ID claims unlabelled objects")
	}
}

func TestOrphans(t *testing.T) {
	terminating := remotePod("gone-terminating", consumerID, "uid-t")
	terminating.DeletionTimestamp = &t0
	pods := []corev1.Pod{
		remotePod("zeta-orphan", consumerID, "uid-z"),
		remotePod("alive", consumerID, "uid-alive"),
		remotePod("other-consumer", "other", "uid-o"),
		remotePod("unlabelled", "", ""),
		remotePod("alpha-orphan", consumerID, "uid-a"),
		terminating,
	}
	remotes := make([]*corev1.Pod, len(pods))
	before := make([]corev1.Pod, len(pods))
	for i := range pods {
		remotes[i] = &pods[i]
		pods[i].DeepCopyInto(&before[i])
	}
	got := reflection.Orphans(remotes, sets.New[types.UID]("uid-alive"), consumerID)
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
	}
	assertEqual(t, "orphans", []string{"alpha-orphan", "zeta-orphan"}, names)
	assertEqual(t, "input", before, pods)

	if got := reflection.Orphans(remotes, sets.New[types.UID]("uid-alive", "uid-z", "uid-a"), consumerID); len(got) != 0 {
		t.Errorf("with every consumer pod present, orphans = %v", got)
	}
}

func TestARemotePodIsRecognisedAfterARestart(t *testing.T) {
	local := offloadedPod()
	remote := mustRemote(t, local, origin())
	uid, ok := reflection.IsRemoteOf(remote, consumerID)
	if !ok || uid != local.UID {
		t.Fatalf("IsRemoteOf(RemotePod(local)) = %q, %v", uid, ok)
	}
	if o := reflection.Orphans([]*corev1.Pod{remote}, sets.New(local.UID), consumerID); len(o) != 0 {
		t.Errorf("the reflection of a live pod is an orphan: %v", o)
	}
}
