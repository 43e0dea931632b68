package doctor

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/charts"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/internal/status"
)

// versionsChecker compares the Kubernetes version with the range the
// chart supports, and this plugin's version with the agent's.
type versionsChecker struct{}

func (versionsChecker) Name() string { return "versions" }

func (versionsChecker) Check(ctx context.Context, d *Env) status.Section {
	s := status.Section{Title: "Versions"}
	var server, agent string
	constraint, err := chartKubeVersion()
	if err != nil {
		s.Checks = append(s.Checks, status.Fail("kubernetes", "%v", err))
	} else if info, err := d.Kube.Discovery().ServerVersion(); err != nil {
		s.Checks = append(s.Checks, status.Fail("kubernetes", "asking the API server for its version: %v", err))
	} else {
		server = info.GitVersion
		s.Checks = append(s.Checks, kubeVersionCheck(constraint, server))
		if nodes, err := status.ReadVirtualNodes(ctx, d.Env); err != nil {
			s.Checks = append(s.Checks, status.Warn("providers", "%v", err))
		} else {
			s.Checks = append(s.Checks, providersVersionCheck(server, nodes))
		}
	}

	rel, c := status.ReleaseOrCheck(d.Env)
	switch dep, err := d.Deployment(ctx, offloadv1alpha1.ControllerManager); {
	case c != nil:
		s.Checks = append(s.Checks, *c)
	case err != nil:
		s.Checks = append(s.Checks, status.Warn("agent", "%v", err))
	default:
		if dep != nil {
			agent = dep.Labels[offloadv1alpha1.VersionLabel]
		}
		if agent == "" && rel.ChartVersion != "" {
			// The chart's appVersion, the agent's, is its version with a v.
			agent = "v" + rel.ChartVersion
		}
		s.Checks = append(s.Checks, agentVersionCheck(d.CLIVersion, agent))
	}
	s.Fields = []status.Field{
		{Name: "kubernetes", Label: "Kubernetes", Value: server},
		{Name: "kubeVersion", Label: "Supported", Value: constraint},
		{Name: "skewPolicy", Label: "Skew policy", Value: skewPolicy},
		{Name: "plugin", Label: "Plugin", Value: d.CLIVersion},
		{Name: "agent", Label: "Agent", Value: agent},
	}
	return s
}

// chartKubeVersion returns the kubeVersion constraint of the embedded chart.
var chartKubeVersion = sync.OnceValues(func() (string, error) {
	ch, err := charts.Load("v0.0.0")
	if err != nil {
		return "", err
	}
	return ch.Metadata.KubeVersion, nil
})

// kubeVersionCheck judges the API server's version against the chart's
// kubeVersion constraint, the way Helm does on install.
func kubeVersionCheck(constraint, server string) status.Check {
	const name = "kubernetes"
	switch {
	case constraint == "":
		return status.OK(name, "the chart supports every Kubernetes version")
	case !chartutil.IsCompatibleRange(">=0.0.0-0", server):
		return status.Warn(name, "cannot read the Kubernetes version %q: check it is in the range %s the chart supports", server, constraint)
	case !chartutil.IsCompatibleRange(constraint, server):
		return status.Fail(name, "Kubernetes %s is outside the range %s the chart supports: upgrade the cluster, or use the kubectl-offload release made for it", server, constraint)
	}
	return status.OK(name, "Kubernetes %s is in the range %s the chart supports", server, constraint)
}

// agentVersionCheck compares this plugin's version with the agent's: a
// different major or minor version is a warning.
func agentVersionCheck(plugin, agent string) status.Check {
	const name = "agent"
	if agent == "" {
		return status.Warn(name, "cannot tell the agent's version: deployment %s has no %s label; run kubectl offload upgrade", offloadv1alpha1.ControllerManager, offloadv1alpha1.VersionLabel)
	}
	p, perr := utilversion.ParseGeneric(plugin)
	a, aerr := utilversion.ParseGeneric(agent)
	if perr != nil || aerr != nil {
		return status.Warn(name, "cannot compare this plugin's version %q with the agent's %q: run kubectl offload upgrade to install the agent of this plugin", plugin, agent)
	}
	if p.Major() == a.Major() && p.Minor() == a.Minor() {
		return status.OK(name, "the agent %s and this plugin %s have the same minor version", agent, plugin)
	}
	what := fmt.Sprintf("the agent is %s and this plugin %s", agent, plugin)
	if p.LessThan(a) {
		return status.Warn(name, "%s, an older minor version: install the plugin of the agent's version (kubectl krew upgrade offload), or run kubectl offload upgrade to go back to this plugin's agent", what)
	}
	return status.Warn(name, "%s: run kubectl offload upgrade to bring the agent to this plugin's version", what)
}

// skewPolicy says which consumer and provider versions may peer.
var skewPolicy = "any two minors of " + peering.SupportedKubernetes()

// providersVersionCheck judges the pair this cluster, on Kubernetes
// server, makes with the provider of each virtual node, whose kubelet
// version is the provider's Kubernetes version: a provider upgraded out
// of the policy after peering fails.
func providersVersionCheck(server string, nodes []corev1.Node) status.Check {
	const name = "providers"
	var bad []string
	for _, n := range nodes {
		v := n.Status.NodeInfo.KubeletVersion
		if v == "" {
			continue
		}
		if refused := peering.CheckKubernetesPair(server, v); refused != nil {
			bad = append(bad, fmt.Sprintf("%s: %s", n.Name, refused.Message))
		}
	}
	if len(bad) > 0 {
		return status.Fail(name, "%s; peer again once both clusters are in the policy (%s)", strings.Join(bad, "; "), skewPolicy)
	}
	if len(nodes) == 0 {
		return status.OK(name, "no provider yet: a consumer and a provider may peer on %s", skewPolicy)
	}
	return status.OK(name, "the providers of %d virtual node(s) are in the skew policy: %s", len(nodes), skewPolicy)
}
