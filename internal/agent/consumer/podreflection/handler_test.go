package podreflection

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

func TestCreatePodReflectsTheConfigMapThenThePodIntoTheTwinNamespace(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if _, err := e.kube.CoreV1().ConfigMaps(e.consumer).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "config"}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	local := e.localPod(t, "web")

	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	remote := e.getRemote(ctx, t, "web")
	if remote == nil {
		t.Fatal("no remote pod in the twin namespace")
	}
	if got := remote.Labels[offloadv1alpha1.LabelOriginClusterID]; got != e.h.opts.ConsumerClusterID {
		t.Errorf("origin cluster label = %q, want %q", got, e.h.opts.ConsumerClusterID)
	}
	if got := remote.Labels[offloadv1alpha1.LabelOriginPodUID]; got != string(local.UID) {
		t.Errorf("origin pod UID label = %q, want %q", got, local.UID)
	}
	if remote.Spec.NodeName != "" {
		t.Errorf("remote nodeName = %q, want it left to the provider's scheduler", remote.Spec.NodeName)
	}
	cm, err := e.kube.CoreV1().ConfigMaps(e.twin).Get(ctx, "config", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the referenced ConfigMap was not reflected: %v", err)
	}
	if cm.Data["k"] != "v" || cm.Labels[offloadv1alpha1.LabelOriginClusterID] != e.h.opts.ConsumerClusterID {
		t.Errorf("reflected ConfigMap = %v %v, want data k=v and the origin label", cm.Data, cm.Labels)
	}

	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatalf("CreatePod a second time: %v, want success", err)
	}
	if again := e.getRemote(ctx, t, "web"); again == nil || again.UID != remote.UID {
		t.Error("CreatePod a second time replaced the remote pod")
	}
}

func TestCreatePodReplacesTheRemotePodOfAnEarlierPodOfTheSameName(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	stale := e.remotePod(t, "web", e.h.opts.ConsumerClusterID, string(uuid.NewUUID()))
	local := e.localPod(t, "web")

	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	remote := e.getRemote(ctx, t, "web")
	if remote == nil || remote.UID == stale.UID || remote.Labels[offloadv1alpha1.LabelOriginPodUID] != string(local.UID) {
		t.Fatalf("remote pod = %v, want a new one reflecting %s", remote, local.UID)
	}
}

func TestCreatePodLeavesAPodItDidNotCreateAlone(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	foreign := e.remotePod(t, "web", "another-consumer", string(uuid.NewUUID()))
	local := e.localPod(t, "web")

	err := e.h.CreatePod(ctx, local)
	if !errdefs.IsInvalidInput(err) {
		t.Fatalf("CreatePod = %v, want an InvalidInput error", err)
	}
	if remote := e.getRemote(ctx, t, "web"); remote == nil || remote.UID != foreign.UID {
		t.Error("CreatePod touched a pod of another consumer")
	}
}

func TestCreatePodFailsWhenTheNamespaceIsNotOffloaded(t *testing.T) {
	e := newEnv(t)
	local := e.localPod(t, "web")
	local.Namespace = "not-offloaded"

	if err := e.h.CreatePod(t.Context(), local); !errors.Is(err, ErrNotOffloaded) {
		t.Fatalf("CreatePod = %v, want ErrNotOffloaded", err)
	}
}

func TestNotifyPodsReportsTheRemoteStatusAsTheConsumerSeesIt(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.notify(t)
	local := e.localPod(t, "web")
	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatal(err)
	}

	remote := e.getRemote(ctx, t, "web")
	remote.Status.Phase = corev1.PodRunning
	remote.Status.PodIP = "10.1.2.3"
	remote.Status.PodIPs = []corev1.PodIP{{IP: "10.1.2.3"}}
	if _, err := e.kube.CoreV1().Pods(e.twin).UpdateStatus(ctx, remote, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	got := e.waitNotified(t, "the pod is Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if got.Namespace != e.consumer || got.Name != "web" || got.UID != local.UID {
		t.Errorf("notified pod %s/%s (UID %s), want the consumer pod %s/web (UID %s)", got.Namespace, got.Name, got.UID, e.consumer, local.UID)
	}
	if got.Status.PodIP != "10.1.2.3" || got.Status.HostIP != nodeIP {
		t.Errorf("notified podIP %q hostIP %q, want 10.1.2.3 and the virtual node's %s", got.Status.PodIP, got.Status.HostIP, nodeIP)
	}
	if got.Labels[offloadv1alpha1.LabelOriginPodUID] != "" {
		t.Error("the notified pod carries the remote pod's origin labels; it must carry the consumer pod's metadata")
	}
}

func TestARemotePodNoKubeletReportedOnCostsTheConsumerNoStatusWrite(t *testing.T) {
	var localPods cache.SharedIndexInformer
	e := newEnv(t, func(o *Options) {
		f := informers.NewSharedInformerFactory(o.Consumer, 0)
		o.LocalPods = f.Core().V1().Pods().Lister()
		localPods = f.Core().V1().Pods().Informer()
		f.Start(t.Context().Done())
	})
	ctx := t.Context()
	e.notify(t)
	local := e.localPod(t, "web")
	framework.Eventually(t, waitTimeout, "the consumer pod in LocalPods", func(context.Context) bool {
		_, ok, _ := localPods.GetStore().GetByKey(e.consumer + "/web")
		return ok
	})
	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatal(err)
	}
	// Created, then bound on the provider: nothing a kubelet would report.
	remote := e.getRemote(ctx, t, "web")
	remote.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	remote, err := e.kube.CoreV1().Pods(e.twin).UpdateStatus(ctx, remote, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The provider cannot schedule it after all: that the consumer hears.
	remote.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available"}}
	if _, err := e.kube.CoreV1().Pods(e.twin).UpdateStatus(ctx, remote, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The handler sees the remote pod's events in order, so the first
	// notification tells whether the earlier ones cost one.
	select {
	case got := <-e.notified:
		if c := condition(got.Status, corev1.PodScheduled); c == nil || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable {
			t.Errorf("first notified status %+v; want the provider's Unschedulable, and none before it", got.Status)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the provider's Unschedulable condition was not notified")
	}
}

// localPodsOf makes the handler list consumer pods from an informer of
// the consumer, as the virtual node's PodController has; start starts it.
func localPodsOf(t *testing.T) (tweak func(*Options), informer *cache.SharedIndexInformer, start func()) {
	var f informers.SharedInformerFactory
	informer = new(cache.SharedIndexInformer)
	return func(o *Options) {
		f = informers.NewSharedInformerFactory(o.Consumer, 0)
		o.LocalPods = f.Core().V1().Pods().Lister()
		*informer = f.Core().V1().Pods().Informer()
		o.LocalPodsSynced = (*informer).HasSynced
	}, informer, func() { f.Start(t.Context().Done()) }
}

// In a mass deletion, the remote pods' last changes and deletions come
// after their consumer pods are gone: once LocalPods has synced, the
// handler knows they are gone without asking the consumer's API server,
// and sends nothing for them.
func TestTheChangesOfARemotePodWhoseConsumerPodIsGoneCostTheConsumerNoRead(t *testing.T) {
	tweak, informer, start := localPodsOf(t)
	e := newEnv(t, tweak)
	start()
	ctx := t.Context()
	reads := &readsOf{of: "/pods/"}
	e.consumerThrough(t, func(rt http.RoundTripper) http.RoundTripper { reads.next = rt; return reads })
	e.notify(t)
	inLocalPods := func(name string, want bool) {
		framework.Eventually(t, waitTimeout, fmt.Sprintf("LocalPods knowing of %s: %v", name, want), func(context.Context) bool {
			_, ok, _ := (*informer).GetStore().GetByKey(e.consumer + "/" + name)
			return ok == want
		})
	}
	for _, name := range []string{"web", "marker"} {
		local := e.localPod(t, name)
		inLocalPods(name, true)
		if err := e.h.CreatePod(ctx, local); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.kube.CoreV1().Pods(e.consumer).Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	inLocalPods("web", false)
	reads.n.Store(0)
	// The provider's kubelet reports on the remote pod, then it goes.
	remote := e.getRemote(ctx, t, "web")
	remote.Status.Phase = corev1.PodRunning
	if _, err := e.kube.CoreV1().Pods(e.twin).UpdateStatus(ctx, remote, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.kube.CoreV1().Pods(e.twin).Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	// The handler takes a twin namespace's events in order: once the
	// marker's status is notified, web's were handled.
	marker := e.getRemote(ctx, t, "marker")
	marker.Status.Phase = corev1.PodRunning
	if _, err := e.kube.CoreV1().Pods(e.twin).UpdateStatus(ctx, marker, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		got := e.waitNotified(t, "a status", func(*corev1.Pod) bool { return true })
		if got.Name == "web" {
			t.Errorf("a status was notified for pod web, which is gone: %+v", got.Status)
		}
		if got.Name == "marker" && got.Status.Phase == corev1.PodRunning {
			break
		}
	}
	if n := reads.n.Load(); n != 0 {
		t.Errorf("the handler read %d pods from the consumer's API server for a remote pod whose consumer pod LocalPods no longer has", n)
	}
}

// Before LocalPods has synced, a remote pod's change would cost a read of
// its consumer pod, which LocalPods does not know yet: the handler leaves
// it to the replay that follows the sync, which finds the pod there. A
// restarted agent has every remote pod to go through at once.
func TestRemotePodsChangedBeforeLocalPodsSyncedAreSentByTheReplayAfter(t *testing.T) {
	tweak, _, start := localPodsOf(t)
	e := newEnv(t, tweak)
	ctx := t.Context()
	reads := &readsOf{of: "/pods/"}
	e.consumerThrough(t, func(rt http.RoundTripper) http.RoundTripper { reads.next = rt; return reads })
	e.notify(t)
	local := e.localPod(t, "web")
	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatal(err)
	}
	reads.n.Store(0)
	remote := e.getRemote(ctx, t, "web")
	remote.Status.Phase = corev1.PodRunning
	if _, err := e.kube.CoreV1().Pods(e.twin).UpdateStatus(ctx, remote, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start()
	got := e.waitNotified(t, "the pod is Running, replayed once LocalPods synced", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if got.UID != local.UID {
		t.Errorf("notified pod UID %s, want the consumer pod's %s", got.UID, local.UID)
	}
	if n := reads.n.Load(); n != 0 {
		t.Errorf("the handler read %d pods from the consumer's API server before LocalPods synced", n)
	}
}

// condition returns the condition of type ct of st, or nil.
func condition(st corev1.PodStatus, ct corev1.PodConditionType) *corev1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == ct {
			return &st.Conditions[i]
		}
	}
	return nil
}

func TestUpdatePodPropagatesAnImageChange(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	local := e.localPod(t, "web")
	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatal(err)
	}
	local.Spec.Containers[0].Image = "registry.example/app:2"

	if err := e.h.UpdatePod(ctx, local); err != nil {
		t.Fatalf("UpdatePod: %v", err)
	}
	if got := e.getRemote(ctx, t, "web").Spec.Containers[0].Image; got != "registry.example/app:2" {
		t.Errorf("remote image = %q, want registry.example/app:2", got)
	}
	framework.Eventually(t, waitTimeout, "GetPod shows the new image", func(ctx context.Context) bool {
		p, err := e.h.GetPod(ctx, e.consumer, "web")
		return err == nil && p.Spec.Containers[0].Image == "registry.example/app:2"
	})
}

func TestUpdatePodThatChangesNothingRemoteStillReportsTheNewGeneration(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.notify(t)
	local := e.localPod(t, "web")
	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatal(err)
	}
	// The provider's kubelet has seen the remote pod's spec.
	remote := e.getRemote(ctx, t, "web")
	remote.Status.Phase = corev1.PodRunning
	remote.Status.ObservedGeneration = remote.Generation
	if _, err := e.kube.CoreV1().Pods(e.twin).UpdateStatus(ctx, remote, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitNotified(t, "the pod is Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

	// A scheduling toleration bumps the consumer pod's generation, and
	// reflection leaves it out of the remote pod.
	local, err := e.kube.CoreV1().Pods(e.consumer).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	local.Spec.Tolerations = append(local.Spec.Tolerations, corev1.Toleration{Key: "example.com/foo", Operator: corev1.TolerationOpEqual, Value: "bar", Effect: corev1.TaintEffectNoSchedule})
	if local, err = e.kube.CoreV1().Pods(e.consumer).Update(ctx, local, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if local.Generation < 2 {
		t.Fatalf("the toleration did not bump the consumer pod's generation (%d)", local.Generation)
	}
	if err := e.h.UpdatePod(ctx, local); err != nil {
		t.Fatalf("UpdatePod: %v", err)
	}
	if got := e.getRemote(ctx, t, "web"); got.Generation != remote.Generation {
		t.Fatalf("the remote pod changed (generation %d, was %d); the test needs an update reflection leaves out", got.Generation, remote.Generation)
	}
	e.waitNotified(t, "the status observes the new generation", func(p *corev1.Pod) bool {
		return p.Status.ObservedGeneration == local.Generation
	})
}

func TestDeletePodRemovesTheRemotePodAndReportsATerminalStatus(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.notify(t)
	local := e.localPod(t, "web")
	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the informer knows the remote pod", func(ctx context.Context) bool {
		_, err := e.h.GetPod(ctx, e.consumer, "web")
		return err == nil
	})
	local.DeletionGracePeriodSeconds = new(int64(0))

	if err := e.h.DeletePod(ctx, local); err != nil {
		t.Fatalf("DeletePod: %v", err)
	}
	if _, err := e.kube.CoreV1().Pods(e.twin).Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("reading the remote pod after DeletePod = %v, want NotFound", err)
	}
	got := e.waitNotified(t, "a terminal status", func(p *corev1.Pod) bool { return p.Status.Reason == reflection.ReasonRemotePodDeleted })
	if got.Status.Phase != corev1.PodFailed {
		t.Errorf("terminal phase = %s, want Failed", got.Status.Phase)
	}
	if err := e.h.DeletePod(ctx, local); err != nil {
		t.Errorf("DeletePod a second time = %v, want success", err)
	}
	framework.Eventually(t, waitTimeout, "GetPod says NotFound", func(ctx context.Context) bool {
		_, err := e.h.GetPod(ctx, e.consumer, "web")
		return errdefs.IsNotFound(err)
	})
}

func TestGetPodShowsOnlyThePodsOfThisConsumer(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	// Made first: the informer sees events in order, so if it took this pod
	// in, it has it by the time it has the consumer's.
	e.remotePod(t, "other", "another-consumer", string(uuid.NewUUID()))
	local := e.localPod(t, "web")
	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatal(err)
	}

	framework.Eventually(t, waitTimeout, "GetPod shows the consumer's pod", func(ctx context.Context) bool {
		p, err := e.h.GetPod(ctx, e.consumer, "web")
		return err == nil && p.UID == local.UID
	})
	if p, err := e.h.GetPod(ctx, e.consumer, "other"); !errdefs.IsNotFound(err) {
		t.Errorf("GetPod of another consumer's pod = %v, %v; want NotFound", p, err)
	}
}

func TestCollectOrphansDeletesOnlyRemotePodsWithoutAConsumerPod(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	local := e.localPod(t, "web")
	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatal(err)
	}
	orphan := e.remotePod(t, "gone", e.h.opts.ConsumerClusterID, string(uuid.NewUUID()))
	other := e.remotePod(t, "theirs", "another-consumer", string(uuid.NewUUID()))

	framework.Eventually(t, waitTimeout, "the orphan is collected", func(ctx context.Context) bool {
		if err := e.h.CollectOrphans(ctx, []*corev1.Pod{local}); err != nil {
			t.Logf("CollectOrphans: %v", err)
			return false
		}
		return e.getRemote(ctx, t, orphan.Name) == nil
	})
	if e.getRemote(ctx, t, "web") == nil {
		t.Error("CollectOrphans deleted the remote pod of an existing consumer pod")
	}
	if e.getRemote(ctx, t, other.Name) == nil {
		t.Error("CollectOrphans deleted a pod of another consumer")
	}
}

func TestCollectOrphansKeepsARemotePodWhoseConsumerPodIsMissingFromAnOldList(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	local := e.localPod(t, "web")
	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the informer knows the remote pod", func(ctx context.Context) bool {
		_, err := e.h.GetPod(ctx, e.consumer, "web")
		return err == nil
	})

	if err := e.h.CollectOrphans(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if e.getRemote(ctx, t, "web") == nil {
		t.Error("CollectOrphans deleted the remote pod of a consumer pod the list missed")
	}
}

func TestRunCollectsOrphansFromTheConsumersPodsOnTheNode(t *testing.T) {
	e := newEnv(t)
	local := e.localPod(t, "web")
	if err := e.h.CreatePod(t.Context(), local); err != nil {
		t.Fatal(err)
	}
	orphan := e.remotePod(t, "gone", e.h.opts.ConsumerClusterID, string(uuid.NewUUID()))

	// Without LocalPods, Run lists the virtual node's pods from the consumer.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.h.Run(ctx) }()
	framework.Eventually(t, waitTimeout, "Run collects the orphan", func(ctx context.Context) bool {
		return e.getRemote(ctx, t, orphan.Name) == nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v after its context ended, want nil", err)
	}
	if e.getRemote(t.Context(), t, "web") == nil {
		t.Error("Run deleted the remote pod of an existing consumer pod")
	}
}

func TestCreatePodLeavesAConfigMapItDidNotCreateAlone(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if _, err := e.kube.CoreV1().ConfigMaps(e.consumer).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "config"}, Data: map[string]string{"mode": "consumer"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	foreign, err := e.kube.CoreV1().ConfigMaps(e.twin).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "config"}, Data: map[string]string{"mode": "provider's own"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	err = e.h.CreatePod(ctx, e.localPod(t, "web"))
	if !errdefs.IsInvalidInput(err) || !strings.Contains(err.Error(), "ConfigMap") {
		t.Fatalf("CreatePod = %v, want an InvalidInput error naming the ConfigMap", err)
	}
	got, err := e.kube.CoreV1().ConfigMaps(e.twin).Get(ctx, "config", metav1.GetOptions{})
	if err != nil || got.ResourceVersion != foreign.ResourceVersion || got.Data["mode"] != "provider's own" {
		t.Errorf("the provider's own ConfigMap changed: %v, %v", got, err)
	}
	if e.getRemote(ctx, t, "web") != nil {
		t.Error("the pod was created though its ConfigMap could not be reflected")
	}
}

// conflictOnce answers the first pod creation it sees with the 409 the
// provider's quota admission gives under concurrent writes, and passes
// everything else to the API server.
type conflictOnce struct {
	next http.RoundTripper
	done atomic.Bool
}

func (c *conflictOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/pods") && c.done.CompareAndSwap(false, true) {
		body := `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409,` +
			`"message":"Operation cannot be fulfilled on resourcequotas \"offload-quota\": the object has been modified; please apply your changes to the latest version and try again"}`
		return &http.Response{StatusCode: http.StatusConflict, Header: http.Header{"Content-Type": []string{"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	}
	return c.next.RoundTrip(r)
}

func TestCreatePodRidesOutATransientConflictOfTheProvidersQuota(t *testing.T) {
	e := newEnv(t)
	// The PodController would mark a restartPolicy Never pod Failed for
	// good on any error of CreatePod.
	faults := &conflictOnce{}
	e.providerThrough(t, func(rt http.RoundTripper) http.RoundTripper { faults.next = rt; return faults })
	local := e.localPod(t, "job")
	local.Spec.RestartPolicy = corev1.RestartPolicyNever
	if err := e.h.CreatePod(t.Context(), local); err != nil {
		t.Fatalf("CreatePod after one quota conflict: %v", err)
	}
	if !faults.done.Load() {
		t.Fatal("the provider never answered with a conflict: the test tested nothing")
	}
	if e.getRemote(t.Context(), t, "job") == nil {
		t.Error("no remote pod after the conflict")
	}
}
