package reflection_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// Both clusters use 10.244.0.0/16: the consumer sees the provider's pods in
// 10.64.0.0/16, the provider the consumer's in 10.80.0.0/16.
var fabric = reflection.AddressesOf(&offloadv1alpha1.Tunnel{Spec: offloadv1alpha1.TunnelSpec{
	Mappings:  []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.64.0.0/16"}},
	PeerViews: []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.80.0.0/16"}},
}})

func TestAnOffloadedPodShowsItsProviderIPInTheConsumersView(t *testing.T) {
	remote := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.6", PodIPs: []corev1.PodIP{{IP: "10.244.1.6"}}}}
	local := &corev1.Pod{}
	st := reflection.ConsumerStatus(remote, local, "", fabric)
	if st.PodIP != "10.64.1.6" || len(st.PodIPs) != 1 || st.PodIPs[0].IP != "10.64.1.6" {
		t.Errorf("status IPs %q %v, want the view 10.64.1.6", st.PodIP, st.PodIPs)
	}
	if st := reflection.ConsumerStatus(remote, local, "", nil); st.PodIP != "10.244.1.6" {
		t.Errorf("without networking the IP is the provider's: %q", st.PodIP)
	}
	if remote.Status.PodIP != "10.244.1.6" {
		t.Error("the remote pod was changed")
	}
}

func TestAnOffloadedPodShowsNoAddressUntilItsViewIsKnown(t *testing.T) {
	// The provider's own address is also a consumer pod's: both clusters
	// use 10.244.0.0/16. Shown as it is, the consumer's Services would send
	// the offloaded pod's traffic to that other pod.
	remote := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.128.1", PodIPs: []corev1.PodIP{{IP: "10.244.128.1"}}}}
	local := &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.64.128.1", PodIPs: []corev1.PodIP{{IP: "10.64.128.1"}}}}
	for name, addrs := range map[string]*reflection.Addresses{
		"no tunnel or no mappings yet": {Withhold: true},
		"a tunnel that is down":        {Provider: fabric.Provider, Consumer: fabric.Consumer, Withhold: true},
	} {
		t.Run(name, func(t *testing.T) {
			st := reflection.ConsumerStatus(remote, local, "", addrs)
			if st.PodIP != "" || len(st.PodIPs) != 0 {
				t.Errorf("status IPs %q %v, want none", st.PodIP, st.PodIPs)
			}
			if st.Phase != corev1.PodRunning {
				t.Errorf("phase %s, want the remote pod's Running", st.Phase)
			}
			if got := addrs.ConsumerIP("10.244.128.1"); got != "" {
				t.Errorf("ConsumerIP = %q, want none", got)
			}
		})
	}
	t.Run("a consumer address is not sent to the provider untranslated", func(t *testing.T) {
		if got, ok := (&reflection.Addresses{Withhold: true}).ProviderIP("10.244.2.7"); ok {
			t.Errorf("ProviderIP = %q, want none without the provider's view of the consumer", got)
		}
	})
}

func TestAReflectedEndpointSliceHoldsWhatTheProviderReaches(t *testing.T) {
	local := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-abc", Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.2.7"}}, // a consumer pod
			{Addresses: []string{"10.64.1.6"}},  // a pod offloaded to this provider, in the consumer's view
			{Addresses: []string{"10.65.3.3"}},  // another provider's pod
			{Addresses: []string{"10.99.2.1"}},  // a node
		},
	}
	got, ok := reflection.RemoteEndpointSlice(local, reflection.Origin{ClusterID: "c", TwinNamespace: "shop-c-123456", Addresses: fabric})
	if !ok {
		t.Fatal("not reflected")
	}
	var addrs []string
	for _, e := range got.Endpoints {
		addrs = append(addrs, e.Addresses...)
	}
	if want := []string{"10.80.2.7", "10.244.1.6"}; !slices.Equal(addrs, want) {
		t.Errorf("reflected addresses %v, want %v", addrs, want)
	}
	plain, _ := reflection.RemoteEndpointSlice(local, reflection.Origin{ClusterID: "c", TwinNamespace: "shop-c-123456"})
	if len(plain.Endpoints) != 4 || plain.Endpoints[0].Addresses[0] != "10.244.2.7" {
		t.Errorf("without networking the slice is copied as it is: %+v", plain.Endpoints)
	}
}

func TestTranslationKeepsTheHostPartForAnyPrefixLength(t *testing.T) {
	a := reflection.AddressesOf(&offloadv1alpha1.Tunnel{Spec: offloadv1alpha1.TunnelSpec{
		Mappings: []offloadv1alpha1.CIDRMapping{{Real: "10.42.0.0/15", View: "10.66.0.0/15"}, {Real: "192.168.5.0/26", View: "10.70.0.64/26"}},
	}})
	for in, want := range map[string]string{"10.43.200.7": "10.67.200.7", "10.42.0.1": "10.66.0.1", "192.168.5.63": "10.70.0.127", "10.1.1.1": ""} {
		if got := a.ConsumerIP(in); got != want {
			t.Errorf("ConsumerIP(%s) = %s, want %s", in, got, want)
		}
	}
}

// The provider writes the remote pod's status: an address outside its pod
// CIDRs (a consumer node's, a consumer Service's) is not shown, so the
// consumer's Services are never pointed at it.
func TestAnAddressOutsideTheProvidersPodCIDRsIsNotShown(t *testing.T) {
	addrs := reflection.AddressesOf(&offloadv1alpha1.Tunnel{Spec: offloadv1alpha1.TunnelSpec{
		Mappings: []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.64.0.0/16"}},
	}})
	for _, tc := range []struct {
		name   string
		ips    []string
		wantIP string
		want   []string
	}{
		{"an address of the pod CIDR", []string{"10.244.3.4"}, "10.64.3.4", []string{"10.64.3.4"}},
		{"a consumer Service's address", []string{"10.96.0.10"}, "", nil},
		{"a made-up first address and a real second one", []string{"10.96.0.1", "10.244.3.4"}, "10.64.3.4", []string{"10.64.3.4"}},
	} {
		remote := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: tc.ips[0]}}
		for _, ip := range tc.ips {
			remote.Status.PodIPs = append(remote.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		st := reflection.ConsumerStatus(remote, &corev1.Pod{}, "10.99.1.2", addrs)
		var got []string
		for _, ip := range st.PodIPs {
			got = append(got, ip.IP)
		}
		if st.PodIP != tc.wantIP || !slices.Equal(got, tc.want) {
			t.Errorf("%s: podIP %q, podIPs %v; want %q, %v", tc.name, st.PodIP, got, tc.wantIP, tc.want)
		}
	}
}
