package reflection_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

func TestOffloadedContainersSeeTheirConsumerPodThroughTheDownwardAPI(t *testing.T) {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	local := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u-1"},
		Spec: corev1.PodSpec{NodeName: vnName, ServiceAccountName: "payments",
			Containers: []corev1.Container{{Name: "app", Image: "app:1", Env: []corev1.EnvVar{
				field("POD_NAMESPACE", "metadata.namespace"), field("POD_UID", "metadata.uid"),
				field("NODE_NAME", "spec.nodeName"), field("SA", "spec.serviceAccountName"),
				field("HOST_IP", "status.hostIP"), field("POD_NAME", "metadata.name"), field("POD_IP", "status.podIP"),
				{Name: "PLAIN", Value: "v"},
			}}}},
	}
	remote, err := reflection.RemotePod(local, reflection.Origin{ClusterID: consumerID, TwinNamespace: twinNS, HostIP: "172.18.0.2"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"POD_NAMESPACE": "shop", "POD_UID": "u-1", "NODE_NAME": vnName, "SA": "payments", "HOST_IP": "172.18.0.2", "PLAIN": "v",
		// The same on both sides, or known only on the provider: left to its kubelet.
		"POD_NAME": "fieldRef metadata.name", "POD_IP": "fieldRef status.podIP",
	}
	for _, e := range remote.Spec.Containers[0].Env {
		got := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			got = "fieldRef " + e.ValueFrom.FieldRef.FieldPath
		}
		if got != want[e.Name] {
			t.Errorf("%s = %q, want %q", e.Name, got, want[e.Name])
		}
	}
	if local.Spec.Containers[0].Env[0].ValueFrom == nil {
		t.Error("RemotePod changed the consumer pod's env")
	}
}
