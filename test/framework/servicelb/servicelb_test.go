package servicelb

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestTheDaemonSetListensOnEachPortOfTheNodeAndForwardsToTheClusterIPs(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 60), Namespace: "offload-system", UID: types.UID("0123456789abcdef")},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIPs: []string{"10.43.0.20"},
			Ports: []corev1.ServicePort{{Port: 51820, Protocol: corev1.ProtocolUDP}, {Port: 8080}}},
	}
	ds := DaemonSet(svc, "registry.local/offload/servicelb:test", true)
	if want := "svclb-" + strings.Repeat("a", 48) + "-01234567"; ds.Name != want || ds.Namespace != Namespace {
		t.Errorf("DaemonSet %s/%s, want %s/%s", ds.Namespace, ds.Name, Namespace, want)
	}
	spec := ds.Spec.Template.Spec
	if spec.NodeSelector[LabelEnableLB] != "true" || len(spec.Containers) != 2 || spec.SecurityContext.Sysctls[0].Name != "net.ipv4.ip_forward" {
		t.Fatalf("pod spec %+v", spec)
	}
	for i, want := range []struct {
		name  string
		port  int32
		proto corev1.Protocol
	}{{"lb-udp-51820", 51820, corev1.ProtocolUDP}, {"lb-tcp-8080", 8080, corev1.ProtocolTCP}} {
		c := spec.Containers[i]
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		if c.Name != want.name || c.Ports[0].HostPort != want.port || c.Ports[0].Protocol != want.proto ||
			env["DEST_IPS"] != "10.43.0.20" || env["DEST_PROTO"] != string(want.proto) || env["SRC_RANGES"] != "0.0.0.0/0" {
			t.Errorf("container %d: %+v, env %v; want %+v to 10.43.0.20", i, c, env, want)
		}
	}
	if ds := DaemonSet(svc, "x", false); ds.Spec.Template.Spec.NodeSelector != nil {
		t.Errorf("without enablelb nodes, node selector %v", ds.Spec.Template.Spec.NodeSelector)
	}
}

func TestTheAddressesAreThoseOfNodesWithAReadySvclbPod(t *testing.T) {
	node := func(name string, addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
	}
	pod := func(node string, ready corev1.ConditionStatus) corev1.Pod {
		return corev1.Pod{Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}}}
	}
	nodes := map[string]*corev1.Node{
		"b":  node("b", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.99.2.1"}),
		"a":  node("a", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.99.1.1"}, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "192.0.2.7"}),
		"c":  node("c", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.99.3.1"}),
		"v6": node("v6", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00::1"}),
	}
	got := Ingress([]corev1.Pod{pod("b", corev1.ConditionTrue), pod("a", corev1.ConditionTrue), pod("c", corev1.ConditionFalse),
		pod("v6", corev1.ConditionTrue), pod("gone", corev1.ConditionTrue), pod("b", corev1.ConditionTrue)}, nodes)
	var ips []string
	for _, in := range got {
		ips = append(ips, in.IP)
	}
	if strings.Join(ips, " ") != "10.99.2.1 192.0.2.7" {
		t.Errorf("ingress %v; want the Ready pods' nodes, ExternalIP first, IPv4, sorted, once each", ips)
	}
}
