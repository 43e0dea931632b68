package status

import (
	"context"
	"errors"
	"net"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/authurl"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// identityChecker shows the local cluster identity and the installed versions.
type identityChecker struct{}

func (identityChecker) Name() string { return "localCluster" }

func (identityChecker) Check(ctx context.Context, env *Env) Section {
	s := Section{Title: "Local cluster identity"}
	var id, name, chartVersion, agentVersion string
	rel, relErr := env.Release()
	remedy := "run kubectl offload upgrade"
	if rel != nil {
		chartVersion = rel.ChartVersion
	} else if relErr == nil {
		remedy = "run kubectl offload install"
	}
	if dep, err := env.Deployment(ctx, offloadv1alpha1.ControllerManager); err == nil && dep != nil {
		agentVersion = dep.Labels[offloadv1alpha1.VersionLabel]
	}

	cm, err := env.Kube.CoreV1().ConfigMaps(env.Namespace).Get(ctx, offloadv1alpha1.IdentityConfigMap, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s.Checks = append(s.Checks, Fail("identity", "ConfigMap %s not found: %s", offloadv1alpha1.IdentityConfigMap, remedy))
	case err != nil:
		s.Checks = append(s.Checks, Fail("identity", "reading ConfigMap %s: %v", offloadv1alpha1.IdentityConfigMap, err))
	default:
		id, name = cm.Data[peering.IdentityClusterIDKey], cm.Data[peering.IdentityClusterNameKey]
		switch {
		case id == "":
			s.Checks = append(s.Checks, Fail("identity", "ConfigMap %s has no clusterID: %s", offloadv1alpha1.IdentityConfigMap, remedy))
		case name == "":
			s.Checks = append(s.Checks, Fail("identity", "ConfigMap %s has no clusterName: run kubectl offload upgrade --cluster-name NAME", offloadv1alpha1.IdentityConfigMap))
		default:
			s.Checks = append(s.Checks, OK("identity", "cluster ID and name are set"))
		}
	}
	s.Fields = []Field{
		{Name: "clusterID", Label: "Cluster ID", Value: id},
		{Name: "clusterName", Label: "Cluster name", Value: name},
		{Name: "chartVersion", Label: "Chart version", Value: chartVersion},
		{Name: "agentVersion", Label: "Agent version", Value: agentVersion},
	}
	return s
}

// networkChecker shows the CIDRs the release was installed with.
type networkChecker struct{}

func (networkChecker) Name() string { return "network" }

func (networkChecker) Check(_ context.Context, env *Env) Section {
	s := Section{Title: "Network"}
	rel, c := ReleaseOrCheck(env)
	if c != nil {
		s.Checks = append(s.Checks, *c)
		return s
	}
	cidrs := []struct {
		name, label, what, remedy string
	}{
		{"podCIDR", "Pod CIDR", "pod CIDR", "kubectl offload upgrade --pod-cidr CIDR"},
		{"serviceCIDR", "Service CIDR", "service CIDR", "kubectl offload upgrade --service-cidr CIDR"},
		{"remapPools", "Remap pools", "remap pool", "kubectl offload upgrade --set 'network.remapPools={CIDR}'"},
	}
	for _, cidr := range cidrs {
		values := helmclient.Strings(rel.Values, "network", cidr.name)
		v := strings.Join(values, ", ")
		s.Fields = append(s.Fields, Field{Name: cidr.name, Label: cidr.label, Value: v})
		bad := ""
		for _, c := range values {
			if _, _, err := net.ParseCIDR(c); err != nil {
				bad = c
			}
		}
		if v == "" {
			s.Checks = append(s.Checks, Warn(cidr.name, "%s is not set: peers cannot remap overlapping ranges; run %s", cidr.what, cidr.remedy))
		} else if bad != "" {
			s.Checks = append(s.Checks, Warn(cidr.name, "%s %q is not a CIDR: run %s", cidr.what, bad, cidr.remedy))
		} else {
			s.Checks = append(s.Checks, OK(cidr.name, "%s is set", cidr.what))
		}
	}
	return s
}

// endpointsChecker shows the URLs peers use to reach this cluster.
type endpointsChecker struct{}

func (endpointsChecker) Name() string { return "endpoints" }

func (endpointsChecker) Check(ctx context.Context, env *Env) Section {
	s := Section{Title: "Endpoints"}
	rel, c := ReleaseOrCheck(env)
	if c != nil {
		s.Checks = append(s.Checks, *c)
		return s
	}
	u, svcType, err := authurl.Resolve(ctx, env.Kube, env.Namespace, authurl.Configured(rel.Values))
	switch {
	case errors.Is(err, authurl.ErrNoLoadBalancerAddress), errors.Is(err, authurl.ErrNoNodeAddress):
		// The installation works; peers just need an address to be told.
		s.Checks = append(s.Checks, Warn("authURL", "%v", err))
	case err != nil:
		s.Checks = append(s.Checks, Fail("authURL", "%v", err))
	case svcType == "":
		s.Checks = append(s.Checks, OK("authURL", "auth URL is set by the auth.url value"))
	case svcType == corev1.ServiceTypeClusterIP:
		s.Checks = append(s.Checks, Warn("authURL", "auth URL is only reachable inside the cluster: use --set auth.service.type=NodePort or LoadBalancer, or set auth.url"))
	default:
		s.Checks = append(s.Checks, OK("authURL", "auth URL comes from the %s service %s", svcType, offloadv1alpha1.Auth))
	}

	api := helmclient.String(rel.Values, "apiServer", "url")
	if api == "" {
		s.Checks = append(s.Checks, Warn("apiServerURL", "API server URL is not set: peers may not reach this cluster's API server; run kubectl offload upgrade --api-server-url https://HOST:PORT"))
	} else {
		s.Checks = append(s.Checks, OK("apiServerURL", "API server URL is set"))
	}
	s.Fields = []Field{
		{Name: "authURL", Label: "Auth URL", Value: u},
		{Name: "apiServerURL", Label: "API server URL", Value: api},
	}
	return s
}
