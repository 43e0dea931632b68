package slim

import (
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// fresh is s in memory of its own, as a decoder gives it.
func fresh(s string) string { return strings.Clone(s) }

func sameString(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestEqualStringsAreOneString(t *testing.T) {
	first := String(fresh("registry.example/web:1.2"))
	if got := String(fresh("registry.example/web:1.2")); got != first || !sameString(got, first) {
		t.Error("two equal strings are two strings")
	}
	if got := String(fresh("registry.example/web:1.3")); got != "registry.example/web:1.3" {
		t.Errorf("another string was answered with the first: %q", got)
	}
	if String("") != "" {
		t.Error("the empty string is not answered as it is")
	}
}

// podOf is a running pod of workload web as its API server gives it.
func podOf(name, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fresh("web-" + name), Namespace: fresh("shop"), GenerateName: fresh("web-")},
		Spec:       corev1.PodSpec{NodeName: fresh("node-1"), ServiceAccountName: fresh("web")},
		Status: corev1.PodStatus{
			Phase: corev1.PodPhase(fresh("Running")), QOSClass: corev1.PodQOSClass(fresh("Burstable")), HostIP: fresh("10.0.0.1"),
			HostIPs:    []corev1.HostIP{{IP: fresh("10.0.0.1")}},
			PodIP:      fresh("10.244.0." + name),
			Conditions: []corev1.PodCondition{{Type: corev1.PodConditionType(fresh("Ready")), Status: corev1.ConditionStatus(fresh("False")), Reason: fresh("ContainersNotReady"), Message: fresh("containers with unready status: [" + name + "]")}},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: fresh("app"), Image: fresh(image), ImageID: fresh("sha256:0123"), ContainerID: fresh("containerd://" + name),
				State:        corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: fresh("CrashLoopBackOff"), Message: fresh("back-off restarting " + name)}},
				VolumeMounts: []corev1.VolumeMountStatus{{Name: fresh("data"), MountPath: fresh("/data")}},
			}},
		},
	}
}

func TestPodStringsShareWhatAWorkloadsPodsHaveInCommon(t *testing.T) {
	a, b := podOf("1", "web:1"), podOf("2", "web:1")
	PodStrings(a)
	PodStrings(b)
	for what, pair := range map[string][2]string{
		"namespace":          {a.Namespace, b.Namespace},
		"generated name":     {a.GenerateName, b.GenerateName},
		"node":               {a.Spec.NodeName, b.Spec.NodeName},
		"service account":    {a.Spec.ServiceAccountName, b.Spec.ServiceAccountName},
		"phase":              {string(a.Status.Phase), string(b.Status.Phase)},
		"QoS class":          {string(a.Status.QOSClass), string(b.Status.QOSClass)},
		"host IP":            {a.Status.HostIP, b.Status.HostIP},
		"host IPs":           {a.Status.HostIPs[0].IP, b.Status.HostIPs[0].IP},
		"condition type":     {string(a.Status.Conditions[0].Type), string(b.Status.Conditions[0].Type)},
		"condition reason":   {a.Status.Conditions[0].Reason, b.Status.Conditions[0].Reason},
		"container name":     {a.Status.ContainerStatuses[0].Name, b.Status.ContainerStatuses[0].Name},
		"container image":    {a.Status.ContainerStatuses[0].Image, b.Status.ContainerStatuses[0].Image},
		"container image ID": {a.Status.ContainerStatuses[0].ImageID, b.Status.ContainerStatuses[0].ImageID},
		"waiting reason":     {a.Status.ContainerStatuses[0].State.Waiting.Reason, b.Status.ContainerStatuses[0].State.Waiting.Reason},
		"volume mount path":  {a.Status.ContainerStatuses[0].VolumeMounts[0].MountPath, b.Status.ContainerStatuses[0].VolumeMounts[0].MountPath},
	} {
		if !sameString(pair[0], pair[1]) {
			t.Errorf("the two pods' %s (%q) are two strings", what, pair[0])
		}
	}
	// What is each pod's own stays its own, and the messages, which can be
	// long, are left as they are.
	if a.Name == b.Name || a.Status.PodIP == b.Status.PodIP || a.Status.ContainerStatuses[0].ContainerID == b.Status.ContainerStatuses[0].ContainerID {
		t.Error("the pods' own names, addresses or container IDs were confused")
	}
	if a.Status.Conditions[0].Message != "containers with unready status: [1]" || b.Status.ContainerStatuses[0].State.Waiting.Message != "back-off restarting 2" {
		t.Errorf("a message changed: %q, %q", a.Status.Conditions[0].Message, b.Status.ContainerStatuses[0].State.Waiting.Message)
	}
}

func TestEqualContainersAreOneList(t *testing.T) {
	containers := func(image, cpu string, policy *corev1.ContainerRestartPolicy) []corev1.Container {
		return append(make([]corev1.Container, 0, 4), corev1.Container{Name: "app", Image: image, RestartPolicy: policy,
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}})
	}
	first := Containers(containers("web:1", "100m", nil))
	if got := Containers(containers("web:1", "100m", nil)); &got[0] != &first[0] {
		t.Error("two equal lists of containers are two lists")
	}
	for what, other := range map[string][]corev1.Container{
		"another image":          containers("web:2", "100m", nil),
		"other requests":         containers("web:1", "200m", nil),
		"another restart policy": containers("web:1", "100m", ptr.To(corev1.ContainerRestartPolicyAlways)),
		"one more container":     append(containers("web:1", "100m", nil), corev1.Container{Name: "sidecar"}),
	} {
		if got := Containers(other); &got[0] == &first[0] || len(got) != len(other) || got[0].Image != other[0].Image {
			t.Errorf("a list with %s was answered with the first one: %v", what, got)
		}
	}
	if cap(first) != len(first) {
		t.Errorf("a shared list has spare capacity (%d of %d): an append would write into it", cap(first), len(first))
	}
	if Containers(nil) != nil {
		t.Error("no containers are not answered as they are")
	}
}
