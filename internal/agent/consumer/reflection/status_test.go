package reflection_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(time.Minute))
	t2 = metav1.NewTime(t0.Add(2 * time.Minute))
)

func cond(typ corev1.PodConditionType, s corev1.ConditionStatus, at metav1.Time) corev1.PodCondition {
	return corev1.PodCondition{Type: typ, Status: s, LastTransitionTime: at}
}

// runningRemote is the remote pod of offloadedPod, running and ready.
func runningRemote() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-7d9f-abcde", Namespace: twinNS, Generation: 3},
		Status: corev1.PodStatus{
			Phase:              corev1.PodRunning,
			ObservedGeneration: 3,
			Conditions: []corev1.PodCondition{
				cond(corev1.PodScheduled, corev1.ConditionTrue, t0),
				cond(corev1.PodInitialized, corev1.ConditionTrue, t0),
				cond(corev1.ContainersReady, corev1.ConditionTrue, t1),
				cond(corev1.PodReady, corev1.ConditionTrue, t1),
			},
			HostIP:    "192.168.5.7",
			HostIPs:   []corev1.HostIP{{IP: "192.168.5.7"}},
			PodIP:     "10.200.1.9",
			PodIPs:    []corev1.PodIP{{IP: "10.200.1.9"}},
			StartTime: &t0,
			QOSClass:  corev1.PodQOSBurstable,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "migrate", ImageID: "docker.io/shop/migrate@sha256:aa",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true, RestartCount: 2, Image: "shop/web:1",
				ImageID: "docker.io/shop/web@sha256:bb", ContainerID: "containerd://1234",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t1}}}},
		},
	}
}

func TestLocalStatus(t *testing.T) {
	local := offloadedPod()
	local.Spec.ReadinessGates = nil
	local.Generation = 5
	local.Status = corev1.PodStatus{
		Phase:      corev1.PodPending,
		QOSClass:   corev1.PodQOSBurstable,
		Conditions: []corev1.PodCondition{cond(corev1.PodScheduled, corev1.ConditionTrue, t0), cond("example.com/custom", corev1.ConditionTrue, t0)},
	}
	remote := runningRemote()
	before, remoteBefore := local.DeepCopy(), remote.DeepCopy()
	got := reflection.LocalStatus(remote, local, "10.0.0.4")
	assertEqual(t, "local pod", before, local)
	assertEqual(t, "remote pod", remoteBefore, remote)

	t.Run("phase, containers, IPs and start time come from the remote pod", func(t *testing.T) {
		if got.Phase != corev1.PodRunning || got.PodIP != "10.200.1.9" || got.StartTime == nil || !got.StartTime.Equal(&t0) {
			t.Errorf("status = %+v", got)
		}
		assertEqual(t, "container statuses", remote.Status.ContainerStatuses, got.ContainerStatuses)
		assertEqual(t, "init container statuses", remote.Status.InitContainerStatuses, got.InitContainerStatuses)
		assertEqual(t, "pod IPs", remote.Status.PodIPs, got.PodIPs)
	})
	t.Run("the host IP is the virtual node's, not the provider node's", func(t *testing.T) {
		if got.HostIP != "10.0.0.4" || len(got.HostIPs) != 1 || got.HostIPs[0].IP != "10.0.0.4" {
			t.Errorf("host IP = %q %v", got.HostIP, got.HostIPs)
		}
		kept := reflection.LocalStatus(remote, &corev1.Pod{Status: corev1.PodStatus{HostIP: "10.0.0.9"}}, "")
		if kept.HostIP != "10.0.0.9" {
			t.Errorf("without a node address the host IP = %q, want local's", kept.HostIP)
		}
	})
	t.Run("remote conditions replace local ones in place, local-only ones are kept", func(t *testing.T) {
		want := []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t0},
			cond("example.com/custom", corev1.ConditionTrue, t0),
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: t0},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: t1},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t1},
		}
		assertEqual(t, "conditions", want, got.Conditions)
	})
	t.Run("an up-to-date remote observed generation is reported as local's generation", func(t *testing.T) {
		if got.ObservedGeneration != 5 {
			t.Errorf("observedGeneration = %d, want 5", got.ObservedGeneration)
		}
		stale := runningRemote()
		stale.Status.ObservedGeneration = 2
		l := local.DeepCopy()
		l.Status.ObservedGeneration = 4
		if g := reflection.LocalStatus(stale, l, "").ObservedGeneration; g != 4 {
			t.Errorf("stale observedGeneration = %d, want local's 4", g)
		}
	})
}

func TestLocalStatusReadinessGates(t *testing.T) {
	gate := corev1.PodConditionType("example.com/lb-ready")
	tests := []struct {
		name      string
		local     []corev1.PodCondition
		wantReady corev1.PodCondition
	}{{
		name:      "a missing gate condition holds Ready back",
		wantReady: corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ReadinessGatesNotReady", LastTransitionTime: t1, Message: `corresponding condition of pod readiness gate "example.com/lb-ready" does not exist.`},
	}, {
		name:      "a False gate holds Ready back from its transition on",
		local:     []corev1.PodCondition{cond(gate, corev1.ConditionFalse, t2)},
		wantReady: corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ReadinessGatesNotReady", LastTransitionTime: t2, Message: `the status of pod readiness gate "example.com/lb-ready" is not "True", but False`},
	}, {
		name:      "a local Ready that was already False keeps its transition time",
		local:     []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionFalse, t0), cond(gate, corev1.ConditionFalse, t2)},
		wantReady: corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ReadinessGatesNotReady", LastTransitionTime: t0, Message: `the status of pod readiness gate "example.com/lb-ready" is not "True", but False`},
	}, {
		name:      "a True gate lets the remote Ready through",
		local:     []corev1.PodCondition{cond(gate, corev1.ConditionTrue, t0)},
		wantReady: cond(corev1.PodReady, corev1.ConditionTrue, t1),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			local := offloadedPod()
			local.Status.Conditions = tt.local
			st := reflection.LocalStatus(runningRemote(), local, "")
			for _, c := range st.Conditions {
				if c.Type == corev1.PodReady {
					assertEqual(t, "Ready", tt.wantReady, c)
					return
				}
			}
			t.Fatal("no Ready condition")
		})
	}
}

func TestLocalStatusOfAPendingRemote(t *testing.T) {
	remote := &corev1.Pod{Status: corev1.PodStatus{
		Phase: corev1.PodPending,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: "0/3 nodes are available: 3 Insufficient cpu."}},
	}}
	local := offloadedPod()
	local.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{cond(corev1.PodScheduled, corev1.ConditionTrue, t0)}}
	st := reflection.LocalStatus(remote, local, "")
	if st.Phase != corev1.PodPending || len(st.Conditions) != 1 || st.Conditions[0].Reason != "Unschedulable" {
		t.Errorf("the provider's scheduling failure is not shown: %+v", st)
	}
}

func TestLocalStatusShowsOnlyTheResourcesTheConsumerAskedFor(t *testing.T) {
	local := offloadedPod()
	remote := runningRemote()
	// The twin namespace's LimitRange gave the web container, which asks
	// for cpu and memory and limits memory, an ephemeral-storage request
	// and the lent capacity as its cpu and ephemeral-storage limits; the
	// migrate container, which asks for nothing, got every default.
	q := resource.MustParse
	remote.Status.ContainerStatuses[0].AllocatedResources = corev1.ResourceList{
		corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("128Mi"), corev1.ResourceEphemeralStorage: q("0")}
	remote.Status.ContainerStatuses[0].Resources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("128Mi"), corev1.ResourceEphemeralStorage: q("0")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: q("1870m"), corev1.ResourceMemory: q("256Mi"), corev1.ResourceEphemeralStorage: q("250Gi")},
	}
	remote.Status.InitContainerStatuses[0].AllocatedResources = corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("128Mi")}
	remote.Status.InitContainerStatuses[0].Resources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: q("1870m"), corev1.ResourceMemory: q("16Gi")},
	}
	before := remote.DeepCopy()

	st := reflection.LocalStatus(remote, local, "")

	web := st.ContainerStatuses[0]
	wantRequests := corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("128Mi")}
	if !apiequality.Semantic.DeepEqual(web.AllocatedResources, wantRequests) {
		t.Errorf("web allocatedResources = %v, want %v", web.AllocatedResources, wantRequests)
	}
	want := corev1.ResourceRequirements{Requests: wantRequests, Limits: corev1.ResourceList{corev1.ResourceMemory: q("256Mi")}}
	if web.Resources == nil || !apiequality.Semantic.DeepEqual(*web.Resources, want) {
		t.Errorf("web resources = %v, want %v", web.Resources, want)
	}
	migrate := st.InitContainerStatuses[0]
	if migrate.AllocatedResources != nil || migrate.Resources == nil || migrate.Resources.Requests != nil || migrate.Resources.Limits != nil {
		t.Errorf("migrate allocatedResources = %v, resources = %v; want none: it asks for nothing", migrate.AllocatedResources, migrate.Resources)
	}
	if !apiequality.Semantic.DeepEqual(remote, before) {
		t.Error("LocalStatus changed the remote pod")
	}
}
