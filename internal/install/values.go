package install

import (
	"fmt"
	"net/netip"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
	"github.com/kubectl-offload/kubectl-offload/internal/ipam"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// setting is one cluster-specific value with where it came from.
type setting struct{ value, source string }

// settings are the cluster-specific values install computes: flags first,
// then what is already installed, then detection.
type settings struct {
	clusterName, provider, podCIDR, serviceCIDR, apiServerURL setting
	apiServerLoopback                                         bool
	// network is "on" or "off": whether the network fabric runs.
	network setting
	// scheduling is the chart's webhook.mode: "policy" or "webhook".
	scheduling setting
	// policyServed is whether the API server serves the
	// MutatingAdmissionPolicy that webhook.mode=policy installs.
	policyServed bool
}

// The scheduling mutations install chooses between (the chart's
// webhook.mode).
const (
	schedulingPolicy  = "policy"
	schedulingWebhook = "webhook"
)

// pick returns the first candidate with a value, or "not detected".
func pick(candidates ...setting) setting {
	for _, c := range candidates {
		if c.value != "" {
			return c
		}
	}
	return setting{"", "not detected"}
}

// settings computes the cluster-specific values: flags first, then what
// the installed release was given (so that an upgrade without the flags an
// install had keeps them), then detection. installed are the installed
// release's values, nil when there is none.
func (o *Options) settings(det *Detection, identity *corev1.ConfigMap, user, installed map[string]any) settings {
	var s settings
	switch {
	case o.ClusterName != "":
		s.clusterName = setting{o.ClusterName, "--cluster-name"}
	case identity != nil && identity.Data["clusterName"] != "":
		s.clusterName = setting{identity.Data["clusterName"], "installed identity"}
	case det.ClusterName != "":
		s.clusterName = setting{det.ClusterName, det.ClusterNameSource}
	case SanitizeClusterName(o.contextName) != "":
		s.clusterName = setting{SanitizeClusterName(o.contextName), fmt.Sprintf("kubeconfig context %q", o.contextName)}
	default:
		s.clusterName = setting{"cluster", "default"}
	}
	if o.provider != "" {
		s.provider = setting{string(o.provider), "--provider"}
	} else {
		s.provider = setting{string(det.Provider), det.ProviderSource}
	}
	const release = "installed release"
	s.podCIDR = pick(setting{o.PodCIDR, "--pod-cidr"}, setting{helmclient.String(installed, "network", "podCIDR"), release},
		setting{det.PodCIDR, det.PodCIDRSource})
	s.serviceCIDR = pick(setting{o.ServiceCIDR, "--service-cidr"}, setting{helmclient.String(installed, "network", "serviceCIDR"), release},
		setting{det.ServiceCIDR, det.ServiceCIDRSource})
	s.apiServerURL = pick(setting{o.APIServerURL, "--api-server-url"}, setting{helmclient.String(installed, "apiServer", "url"), release},
		setting{det.APIServerURL, det.APIServerURLSource})
	// A URL the user gave is theirs to judge; a detected or kept loopback
	// one is flagged.
	if host, _, ok := peering.SplitServer(s.apiServerURL.value); ok && o.APIServerURL == "" {
		s.apiServerLoopback = peering.IsLoopbackHost(host)
	}
	s.network = o.networkSetting(user, installed, s.podCIDR)
	s.scheduling, s.policyServed = schedulingSetting(user, det.MutatingAdmissionPolicy), det.MutatingAdmissionPolicy
	return s
}

// schedulingSetting is how pods get their scheduling tolerations and
// affinity: as the webhook.mode value says, else the MutatingAdmissionPolicy
// where the API server serves it, else the webhook.
func schedulingSetting(user map[string]any, served bool) setting {
	if wh, ok := user["webhook"].(map[string]any); ok {
		if mode, _ := wh["mode"].(string); mode == schedulingPolicy || mode == schedulingWebhook {
			return setting{mode, "webhook.mode value"}
		}
	}
	if served {
		return setting{schedulingPolicy, "the API server serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicy"}
	}
	return setting{schedulingWebhook, "the API server serves no admissionregistration.k8s.io/v1 MutatingAdmissionPolicy; it does from Kubernetes v1.36"}
}

// networkSetting says whether the network fabric runs: as the values or
// --network say, else as the installed release has it, and otherwise when
// the pod CIDR is known.
func (o *Options) networkSetting(user, installed map[string]any, podCIDR setting) setting {
	onOff := func(on bool) string {
		if on {
			return "on"
		}
		return "off"
	}
	if network, ok := user["network"].(map[string]any); ok {
		if v, ok := network["enabled"].(bool); ok {
			return setting{onOff(v), "network.enabled value"}
		}
	}
	installedNetwork, _ := installed["network"].(map[string]any)
	enabled, wasSet := installedNetwork["enabled"].(bool)
	// An installed "off" without a pod CIDR was forced, not chosen: once
	// the pod CIDR is known, the default applies.
	forced := !enabled && helmclient.String(installed, "network", "podCIDR") == ""
	switch {
	case o.NetworkSet:
		return setting{onOff(o.Network), "--network"}
	case wasSet && !forced:
		return setting{onOff(enabled), "installed release"}
	case podCIDR.value != "":
		return setting{"on", "default"}
	}
	return setting{"off", "the pod CIDR is not known"}
}

// validate refuses settings the chart cannot run with.
func (s settings) validate() error {
	if s.network.value == "on" && s.podCIDR.value == "" {
		return fmt.Errorf("the network fabric (%s) needs this cluster's pod CIDR, which was not detected: pass --pod-cidr CIDR, or --network=false if the clusters already share a network", s.network.source)
	}
	if s.scheduling.value == schedulingPolicy && !s.policyServed {
		return fmt.Errorf("webhook.mode=policy needs an API server that serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Kubernetes v1.36 on), and this one does not: use webhook.mode=webhook or auto; nothing was installed")
	}
	return nil
}

// show prints what install is going to configure, and why.
func (s settings) show(steps *output.Steps, serverVersion string) {
	line := func(name string, v setting) {
		value := v.value
		if value == "" {
			value = "-"
		}
		steps.Done(fmt.Sprintf("%-16s %s (%s)", name, value, v.source))
	}
	steps.Done(fmt.Sprintf("%-16s %s (supported: %s; peers any two of them)", "Kubernetes", serverVersion, peering.SupportedKubernetes()))
	line("Cluster name", s.clusterName)
	line("Provider", s.provider)
	line("Pod CIDR", s.podCIDR)
	line("Service CIDR", s.serviceCIDR)
	line("API server URL", s.apiServerURL)
	line("Network fabric", s.network)
	scheduling := s.scheduling
	if scheduling.value == schedulingPolicy {
		scheduling.value = "MutatingAdmissionPolicy offload-scheduling"
	} else {
		scheduling.value = "webhook offload-webhook"
	}
	line("Pod scheduling", scheduling)
	if s.apiServerLoopback {
		steps.Warn("the API server URL %s is a loopback address that peers cannot reach: pass --api-server-url", s.apiServerURL.value)
	}
	switch {
	case s.network.value == "off" && s.podCIDR.value == "":
		steps.Warn("the pod CIDR was not detected, so the network fabric stays off: offloaded pods are reachable only if the clusters already share a network; pass --pod-cidr CIDR to turn it on")
	case s.serviceCIDR.value == "":
		steps.Warn("the service CIDR was not detected: pass --service-cidr CIDR, so that peers' views never overlap your Services")
	}
}

// userValues reads the -f files and --set flags.
func (o *Options) userValues() (map[string]any, error) {
	user, err := (&values.Options{ValueFiles: o.ValueFiles, Values: o.Set}).MergeValues(getter.Providers{})
	if err != nil {
		return nil, fmt.Errorf("reading --values/--set: %w", err)
	}
	return user, nil
}

// values merges the computed values under the user's values (-f files and
// --set flags), which win.
func (o *Options) values(s settings, identity *corev1.ConfigMap, user map[string]any) map[string]any {
	network := map[string]any{"enabled": s.network.value == "on", "podCIDR": s.podCIDR.value, "serviceCIDR": s.serviceCIDR.value}
	gateway := map[string]any{}
	if o.GatewayServiceType != "" {
		gateway["serviceType"] = o.GatewayServiceType
	}
	if o.GatewayAddress != "" {
		gateway["address"] = o.GatewayAddress
	}
	if len(gateway) > 0 {
		network["gateway"] = gateway
	}
	computed := map[string]any{
		"webhook":     map[string]any{"mode": s.scheduling.value},
		"clusterName": s.clusterName.value,
		"provider":    s.provider.value,
		"network":     network,
		"apiServer":   map[string]any{"url": s.apiServerURL.value},
	}
	// The identity is created once: the installed ID is passed on, so that
	// the values of a reinstall equal those of the install before it.
	clusterID := string(uuid.NewUUID())
	if identity != nil && identity.Data["clusterID"] != "" {
		clusterID = identity.Data["clusterID"]
	}
	computed["identity"] = map[string]any{"clusterID": clusterID}
	return chartutil.CoalesceTables(user, computed)
}

// checkNetwork refuses remap pools and reserved ranges the agent could not
// use, before anything is written, and warns when no pool has room for the
// view of a peer whose pod CIDR is as large as this cluster's (kind and
// kubeadm clusters all use the same one). merged are the chart's values.
func checkNetwork(merged map[string]any, s settings) (warning string, err error) {
	network, _ := merged["network"].(map[string]any)
	if s.network.value != "on" || network == nil {
		return "", nil
	}
	list := func(key string) []string {
		var out []string
		items, _ := network[key].([]any)
		for _, item := range items {
			out = append(out, fmt.Sprint(item))
		}
		return out
	}
	pools, err := ipam.ParsePrefixes("remap pool", list("remapPools"))
	if err != nil {
		return "", fmt.Errorf("invalid network.remapPools: %w", err)
	}
	reserved, err := ipam.ParsePrefixes("reserved range", list("reservedCIDRs"))
	if err != nil {
		return "", fmt.Errorf("invalid network.reservedCIDRs: %w", err)
	}
	if err := (ipam.Space{Pools: pools, Reserved: reserved}).Validate(); err != nil {
		return "", fmt.Errorf("invalid network values: %w", err)
	}
	pod, err := netip.ParsePrefix(s.podCIDR.value)
	if err != nil {
		return "", nil // the flag or the detection checked it
	}
	local := append([]netip.Prefix{pod}, reserved...)
	if svc, err := netip.ParsePrefix(s.serviceCIDR.value); err == nil {
		local = append(local, svc)
	}
	if _, err := (ipam.Space{Pools: pools, Reserved: local}).View(pod); err != nil {
		return fmt.Sprintf("the remap pools have no free /%d for a peer whose pod CIDR is %s like this cluster's, so such a peer's pods would be unreachable: set network.remapPools to a larger range, such as 10.64.0.0/12", pod.Bits(), pod), nil
	}
	return "", nil
}
