package reflection_test

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// debugged is offloadedPod with ephemeral container name, which mounts the
// pod's service-account token as kubectl debug --copy-to would not, but a
// user's manifest may.
func debugged(name string) *corev1.Pod {
	p := offloadedPod()
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: name, Image: "busybox",
			VolumeMounts: []corev1.VolumeMount{{Name: saVolume, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}},
		TargetContainerName: "web",
	})
	return p
}

func TestEphemeralContainersAreAddedTranslatedAndOnlyOnce(t *testing.T) {
	local := debugged("debugger")
	remote := mustRemote(t, local, origin())
	if len(remote.Spec.EphemeralContainers) != 0 {
		t.Fatalf("RemotePod keeps ephemeral containers %v, which the API server refuses on create", remote.Spec.EphemeralContainers)
	}
	want, added, err := reflection.AddEphemeralContainers(remote, local, origin())
	if err != nil || len(added) != 1 || added[0] != "debugger" || len(want.Spec.EphemeralContainers) != 1 {
		t.Fatalf("AddEphemeralContainers = %v, %v, %v; want the debugger added", want.Spec.EphemeralContainers, added, err)
	}
	e := want.Spec.EphemeralContainers[0]
	if e.TargetContainerName != "web" || e.Image != "busybox" {
		t.Errorf("the remote debugger %+v lost its target or image", e)
	}
	// Translated as containers are: the token volume is gone without a
	// token Secret, and NET_RAW is dropped.
	if len(e.VolumeMounts) != 0 {
		t.Errorf("the remote debugger mounts %v, a volume the remote pod does not have", e.VolumeMounts)
	}
	if e.SecurityContext == nil || e.SecurityContext.Capabilities == nil || len(e.SecurityContext.Capabilities.Drop) != 1 || e.SecurityContext.Capabilities.Drop[0] != "NET_RAW" {
		t.Errorf("the remote debugger's security context %+v, want NET_RAW dropped", e.SecurityContext)
	}
	if remote.Spec.EphemeralContainers != nil {
		t.Error("AddEphemeralContainers changed the remote pod it was given")
	}
	again, added, err := reflection.AddEphemeralContainers(want, local, origin())
	if err != nil || len(added) != 0 || len(again.Spec.EphemeralContainers) != 1 {
		t.Errorf("adding again = %v, %v, %v; want nothing added", again.Spec.EphemeralContainers, added, err)
	}
}

func TestTheConsumerViewShowsTheEphemeralContainersTheRemotePodHas(t *testing.T) {
	local := debugged("debugger")
	remote := mustRemote(t, local, origin())
	if v := reflection.ConsumerView(remote, local, origin(), "shop", vnName, "", nil); len(v.Spec.EphemeralContainers) != 0 {
		t.Errorf("the view shows %v, which the remote pod lacks: the PodController would never add it", v.Spec.EphemeralContainers)
	}
	remote, _, _ = reflection.AddEphemeralContainers(remote, local, origin())
	remote.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{{Name: "debugger",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	v := reflection.ConsumerView(remote, local, origin(), "shop", vnName, "", nil)
	assertEqual(t, "the view's ephemeral containers", local.Spec.EphemeralContainers, v.Spec.EphemeralContainers)
	if len(v.Status.EphemeralContainerStatuses) != 1 || v.Status.EphemeralContainerStatuses[0].State.Running == nil {
		t.Errorf("ephemeral container statuses %+v, want the remote pod's", v.Status.EphemeralContainerStatuses)
	}
}

func TestAResizeReachesTheRemotePodWithTheQuantitiesTheConsumerSets(t *testing.T) {
	local := offloadedPod()
	remote := mustRemote(t, local, origin())
	// The provider's LimitRange gave the remote pod a cpu limit the
	// consumer pod does not set.
	remote.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("2")
	if _, changed := reflection.ResizeRemote(remote, local); changed {
		t.Fatal("a remote pod with the consumer's quantities and a default of the provider's needs a resize")
	}
	if v := reflection.ConsumerView(remote, local, origin(), "shop", vnName, "", nil); !apiequality.Semantic.DeepEqual(v.Spec.Containers[0].Resources, local.Spec.Containers[0].Resources) {
		t.Errorf("the view asks for %+v, want the consumer pod's resources while nothing lags", v.Spec.Containers[0].Resources)
	}

	local.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("300m")
	local.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("512Mi")
	if v := reflection.ConsumerView(remote, local, origin(), "shop", vnName, "", nil); apiequality.Semantic.DeepEqual(v.Spec.Containers[0].Resources, local.Spec.Containers[0].Resources) {
		t.Error("the view asks for the consumer pod's resources before the resize reached the remote pod: the PodController would never resize it")
	}
	resized, changed := reflection.ResizeRemote(remote, local)
	if !changed {
		t.Fatal("ResizeRemote found nothing to resize")
	}
	r := resized.Spec.Containers[0].Resources
	for name, want := range map[string][2]any{
		"cpu request": {r.Requests[corev1.ResourceCPU], "300m"}, "memory request": {r.Requests[corev1.ResourceMemory], "128Mi"},
		"memory limit": {r.Limits[corev1.ResourceMemory], "512Mi"}, "cpu limit": {r.Limits[corev1.ResourceCPU], "2"},
	} {
		if q := want[0].(resource.Quantity); q.Cmp(resource.MustParse(want[1].(string))) != 0 {
			t.Errorf("remote %s = %s, want %s", name, q.String(), want[1])
		}
	}
	if q := remote.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse("100m")) != 0 {
		t.Error("ResizeRemote changed the remote pod it was given")
	}
}

func TestResizeConditionsComeAndGoWithTheRemotePods(t *testing.T) {
	local := offloadedPod()
	remote := mustRemote(t, local, origin())
	remote.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue}}
	st := reflection.LocalStatus(remote, local, "")
	if !hasCondition(st, corev1.PodResizeInProgress) {
		t.Fatalf("conditions %+v, want the provider kubelet's %s", st.Conditions, corev1.PodResizeInProgress)
	}
	local.Status = st
	remote.Status.Conditions = nil
	if st := reflection.LocalStatus(remote, local, ""); hasCondition(st, corev1.PodResizeInProgress) {
		t.Errorf("conditions %+v keep %s after the provider's kubelet removed it", st.Conditions, corev1.PodResizeInProgress)
	}
}

func hasCondition(st corev1.PodStatus, c corev1.PodConditionType) bool {
	for _, have := range st.Conditions {
		if have.Type == c {
			return true
		}
	}
	return false
}

func TestProbesAndHooksThatTargetPodAddressesReachThemOnTheProvider(t *testing.T) {
	local := offloadedPod()
	c := &local.Spec.Containers[0]
	c.Lifecycle = &corev1.Lifecycle{
		// An offloaded pod, as the consumer sees it (remapped).
		PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Host: "10.64.0.7", Path: "/echo", Port: intstr.FromInt32(8080)}},
		// A consumer pod.
		PreStop: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Host: "10.244.1.9", Port: intstr.FromInt32(80)}},
	}
	// Neither: a name, left as it is.
	c.ReadinessProbe.HTTPGet.Host = "db.example"
	o := origin()
	o.Addresses = &reflection.Addresses{
		Provider: []reflection.Mapping{{Real: netip.MustParsePrefix("10.244.0.0/16"), View: netip.MustParsePrefix("10.64.0.0/16")}},
		Consumer: []reflection.Mapping{{Real: netip.MustParsePrefix("10.244.0.0/16"), View: netip.MustParsePrefix("10.80.0.0/16")}},
	}
	r := mustRemote(t, local, o).Spec.Containers[0]
	if got := r.Lifecycle.PostStart.HTTPGet.Host; got != "10.244.0.7" {
		t.Errorf("the postStart hook targets %s, want the offloaded pod's address on the provider, 10.244.0.7", got)
	}
	if got := r.Lifecycle.PreStop.TCPSocket.Host; got != "10.80.1.9" {
		t.Errorf("the preStop hook targets %s, want the provider's view of the consumer pod, 10.80.1.9", got)
	}
	if got := r.ReadinessProbe.HTTPGet.Host; got != "db.example" {
		t.Errorf("the readiness probe targets %s, want db.example unchanged", got)
	}
	if local.Spec.Containers[0].Lifecycle.PostStart.HTTPGet.Host != "10.64.0.7" {
		t.Error("RemotePod changed the consumer pod")
	}
}
