package install

import (
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/kubectl-offload/kubectl-offload/charts"
)

func TestTheNetworkFabricRunsWhenThePodCIDRIsKnown(t *testing.T) {
	detected := setting{"10.244.0.0/16", "node podCIDRs (widened)"}
	unknown := setting{"", "not detected"}
	off := map[string]any{"network": map[string]any{"enabled": false}}
	on := map[string]any{"network": map[string]any{"enabled": true}}
	offWithCIDR := map[string]any{"network": map[string]any{"enabled": false, "podCIDR": "10.244.0.0/16"}}
	tests := []struct {
		name                string
		flag, flagSet       bool
		user, installed     map[string]any
		podCIDR             setting
		want, source, error string
	}{
		{name: "a known pod CIDR turns it on", podCIDR: detected, want: "on", source: "default"},
		{name: "an unknown pod CIDR leaves it off", podCIDR: unknown, want: "off", source: "the pod CIDR is not known"},
		{name: "--network=false keeps it off", flagSet: true, podCIDR: detected, want: "off", source: "--network"},
		{name: "the value wins over the flag", flag: true, flagSet: true, user: off, podCIDR: detected, want: "off", source: "network.enabled value"},
		{name: "an upgrade keeps the installed release's choice", installed: offWithCIDR, podCIDR: detected, want: "off", source: "installed release"},
		{name: "an install that was off for want of a pod CIDR turns on once it is given", installed: off, podCIDR: setting{"10.244.0.0/16", "--pod-cidr"}, want: "on", source: "default"},
		{name: "--network wins over the installed release", flag: true, flagSet: true, installed: offWithCIDR, podCIDR: detected, want: "on", source: "--network"},
		{name: "--network without a pod CIDR is refused", flag: true, flagSet: true, podCIDR: unknown, want: "on", source: "--network",
			error: "the network fabric (--network) needs this cluster's pod CIDR, which was not detected: pass --pod-cidr CIDR, or --network=false"},
		{name: "the value without a pod CIDR is refused", user: on, podCIDR: unknown, want: "on", source: "network.enabled value",
			error: "the network fabric (network.enabled value) needs this cluster's pod CIDR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &Options{Network: tt.flag, NetworkSet: tt.flagSet}
			s := settings{podCIDR: tt.podCIDR, network: o.networkSetting(tt.user, tt.installed, tt.podCIDR)}
			if s.network.value != tt.want || s.network.source != tt.source {
				t.Errorf("network = %+v, want %s (%s)", s.network, tt.want, tt.source)
			}
			err := s.validate()
			if tt.error == "" && err != nil || tt.error != "" && (err == nil || !strings.Contains(err.Error(), tt.error)) {
				t.Errorf("validate() = %v, want %q", err, tt.error)
			}
		})
	}
}

func TestGatewayFlagsBecomeValues(t *testing.T) {
	o := &Options{GatewayServiceType: "LoadBalancer", GatewayAddress: "vpn.example.com:51820"}
	s := settings{podCIDR: setting{"10.244.0.0/16", "--pod-cidr"}, network: setting{"on", "default"}}
	network := o.values(s, nil, map[string]any{})["network"].(map[string]any)
	gw := network["gateway"].(map[string]any)
	if network["enabled"] != true || gw["serviceType"] != "LoadBalancer" || gw["address"] != "vpn.example.com:51820" {
		t.Errorf("network values = %v", network)
	}
	for _, a := range []string{"vpn.example.com", "203.0.113.7", "203.0.113.7:4500", "[2001:db8::1]:51820"} {
		if err := validGatewayAddress(a); err != nil {
			t.Errorf("validGatewayAddress(%q) = %v, want nil", a, err)
		}
	}
	for _, a := range []string{"vpn.example.com:http", "host:0", "host:70000", "not a host", "https://vpn.example.com"} {
		if err := validGatewayAddress(a); err == nil {
			t.Errorf("validGatewayAddress(%q) = nil, want an error", a)
		}
	}
}

func TestRemapPoolsAreCheckedBeforeAnythingIsWritten(t *testing.T) {
	ch, err := charts.Load("v0.0.0")
	if err != nil {
		t.Fatal(err)
	}
	s := settings{podCIDR: setting{"10.244.0.0/16", "--pod-cidr"}, serviceCIDR: setting{"10.96.0.0/12", "--service-cidr"}, network: setting{"on", "default"}}
	check := func(set ...string) (string, error) {
		t.Helper()
		o := &Options{Set: set}
		user, err := o.userValues()
		if err != nil {
			t.Fatal(err)
		}
		merged, err := chartutil.CoalesceValues(ch, o.values(s, nil, user))
		if err != nil {
			t.Fatal(err)
		}
		return checkNetwork(merged, s)
	}
	if warning, err := check(); warning != "" || err != nil {
		t.Errorf("the default pools: %q, %v; want no warning and no error", warning, err)
	}
	for set, want := range map[string]string{
		"network.remapPools={10.64.0.0/12,10.70.0.0/16}": "remap pools 10.64.0.0/12 and 10.70.0.0/16 overlap",
		"network.remapPools={10.64.1.0/12}":              "remap pool 10.64.1.0/12 is not an IPv4 network address",
		"network.reservedCIDRs={ten}":                    `invalid network.reservedCIDRs: reserved range "ten" is not a CIDR`,
		"network.remapPools=null":                        "no remap pool is set",
	} {
		if _, err := check(set); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v, want %q", set, err, want)
		}
	}
	if warning, err := check("network.remapPools={10.64.0.0/20}"); err != nil || !strings.Contains(warning, "the remap pools have no free /16 for a peer whose pod CIDR is 10.244.0.0/16") {
		t.Errorf("a pool too small: %q, %v; want a warning", warning, err)
	}
	off := s
	off.network = setting{"off", "--network"}
	if warning, err := checkNetwork(map[string]any{"network": map[string]any{"remapPools": []any{"bad"}}}, off); warning != "" || err != nil {
		t.Errorf("with the fabric off the pools are not checked: %q, %v", warning, err)
	}
}

func TestAnUpgradeKeepsWhatTheInstallWasGiven(t *testing.T) {
	det := &Detection{PodCIDRSource: "not detected", ServiceCIDR: "10.96.0.0/12", ServiceCIDRSource: "ServiceCIDR kubernetes",
		APIServerURL: "https://127.0.0.1:6443", APIServerURLSource: "kubeconfig server (loopback)", APIServerLoopback: true}
	installed := map[string]any{
		"network":   map[string]any{"enabled": true, "podCIDR": "10.244.0.0/16", "serviceCIDR": "10.0.0.0/24"},
		"apiServer": map[string]any{"url": "https://172.18.0.2:6443"},
	}
	s := (&Options{}).settings(det, nil, map[string]any{}, installed)
	for _, c := range []struct{ got, want setting }{
		{s.podCIDR, setting{"10.244.0.0/16", "installed release"}},
		{s.serviceCIDR, setting{"10.0.0.0/24", "installed release"}},
		{s.apiServerURL, setting{"https://172.18.0.2:6443", "installed release"}},
		{s.network, setting{"on", "installed release"}},
	} {
		if c.got != c.want {
			t.Errorf("setting = %+v, want %+v", c.got, c.want)
		}
	}
	if s.apiServerLoopback {
		t.Error("the installed API server URL 172.18.0.2 is flagged as a loopback one")
	}
	// Flags still win, and without a release detection decides.
	s = (&Options{PodCIDR: "10.42.0.0/16"}).settings(det, nil, map[string]any{}, installed)
	if s.podCIDR != (setting{"10.42.0.0/16", "--pod-cidr"}) {
		t.Errorf("pod CIDR = %+v, want the flag's", s.podCIDR)
	}
	s = (&Options{}).settings(det, nil, map[string]any{}, nil)
	if s.serviceCIDR != (setting{"10.96.0.0/12", "ServiceCIDR kubernetes"}) || !s.apiServerLoopback || s.network != (setting{"off", "the pod CIDR is not known"}) {
		t.Errorf("settings without a release = %+v", s)
	}
}

func TestInstallChoosesTheAdmissionPolicyWhereTheAPIServerServesIt(t *testing.T) {
	mode := func(m string) map[string]any { return map[string]any{"webhook": map[string]any{"mode": m}} }
	tests := []struct {
		name         string
		user         map[string]any
		served       bool
		want, source string
		value        string // the chart's webhook.mode
		error        string
	}{
		{name: "served: the policy", served: true, want: "policy", value: "policy", source: "the API server serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicy"},
		{name: "not served: the webhook", want: "webhook", value: "webhook", source: "it does from Kubernetes v1.36"},
		{name: "auto: as detected, and the chart decides the same", user: mode("auto"), served: true, want: "policy", value: "auto", source: "the API server serves"},
		{name: "the value wins where both are served", user: mode("webhook"), served: true, want: "webhook", value: "webhook", source: "webhook.mode value"},
		{name: "the policy where it is not served is refused", user: mode("policy"), want: "policy", value: "policy", source: "webhook.mode value",
			error: "webhook.mode=policy needs an API server that serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Kubernetes v1.36 on), and this one does not: use webhook.mode=webhook or auto; nothing was installed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := settings{podCIDR: setting{"10.244.0.0/16", "--pod-cidr"}, network: setting{"on", "default"},
				scheduling: schedulingSetting(tt.user, tt.served), policyServed: tt.served}
			if s.scheduling.value != tt.want || !strings.Contains(s.scheduling.source, tt.source) {
				t.Errorf("scheduling = %+v, want %s (%s)", s.scheduling, tt.want, tt.source)
			}
			err := s.validate()
			if tt.error == "" && err != nil || tt.error != "" && (err == nil || err.Error() != tt.error) {
				t.Errorf("validate() = %v, want %q", err, tt.error)
			}
			got := (&Options{}).values(s, nil, tt.user)["webhook"].(map[string]any)["mode"]
			if got != tt.value {
				t.Errorf("the chart gets webhook.mode %v, want %s", got, tt.value)
			}
		})
	}
}
