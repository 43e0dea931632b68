package doctor

import (
	"context"
	"errors"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/authurl"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/internal/status"
)

// setAPIServerURL is the fix for an API server URL peers cannot reach.
const setAPIServerURL = "kubectl offload upgrade --api-server-url https://HOST:PORT"

// exposeAuth is the fix for an auth service peers cannot reach.
const exposeAuth = "expose it with kubectl offload upgrade --set auth.service.type=NodePort (or LoadBalancer), " +
	"or give the address peers reach with kubectl offload upgrade --set auth.url=https://HOST:PORT " +
	"(kubectl offload peer generate --auth-url overrides it for one token)"

// apiServerURLChecker checks that the API server URL advertised to peers
// is one they can reach.
type apiServerURLChecker struct{}

func (apiServerURLChecker) Name() string { return "apiServer" }

func (apiServerURLChecker) Check(_ context.Context, d *Env) status.Section {
	s := status.Section{Title: "API server URL"}
	server := ""
	if d.Config != nil {
		server = d.Config.Host
	}
	rel, c := status.ReleaseOrCheck(d.Env)
	if c != nil {
		s.Checks = append(s.Checks, *c)
		return s
	}
	advertised := helmclient.String(rel.Values, "apiServer", "url")
	s.Fields = []status.Field{
		{Name: "kubeconfigServer", Label: "Kubeconfig server", Value: server},
		{Name: "apiServerURL", Label: "Advertised to peers", Value: advertised},
	}
	s.Checks = append(s.Checks, apiServerURLCheck(server, advertised))
	return s
}

// apiServerURLCheck judges the API server URL the release advertises
// (apiServer.url) given the kubeconfig's server.
func apiServerURLCheck(kubeconfigServer, advertised string) status.Check {
	const name = "apiServerURL"
	switch {
	case advertised != "" && peering.IsLoopbackHost(hostOf(advertised)):
		return status.Fail(name, "the API server URL %s advertised to peers is a loopback address: peers cannot reach this cluster's API server; run %s with an address they reach (on kind and k3s, a node's IP and port 6443)",
			advertised, setAPIServerURL)
	case advertised == "" && peering.IsLoopbackHost(hostOf(kubeconfigServer)):
		return status.Fail(name, "apiServer.url is not set and the kubeconfig's server %s is a loopback address (kind, k3s): peers cannot reach this cluster's API server; run %s with an address they reach (on kind and k3s, a node's IP and port 6443)",
			kubeconfigServer, setAPIServerURL)
	case advertised == "":
		return status.Warn(name, "apiServer.url is not set: the agent advertises the in-cluster address of the API server, which peers usually cannot reach; run kubectl offload upgrade --api-server-url %s",
			kubeconfigServer)
	}
	return status.OK(name, "peers are given the API server URL %s", advertised)
}

// authEndpointChecker checks, by connecting to it, that the auth URL peers
// are given answers.
type authEndpointChecker struct{}

func (authEndpointChecker) Name() string { return "authEndpoint" }

func (authEndpointChecker) Check(ctx context.Context, d *Env) status.Section {
	s := status.Section{Title: "Auth endpoint"}
	rel, c := status.ReleaseOrCheck(d.Env)
	if c != nil {
		s.Checks = append(s.Checks, *c)
		return s
	}
	u, svcType, err := authurl.Resolve(ctx, d.Kube, d.Namespace, authurl.Configured(rel.Values))
	s.Fields = []status.Field{{Name: "authURL", Label: "Auth URL", Value: u}}
	switch {
	case errors.Is(err, authurl.ErrNoLoadBalancerAddress), errors.Is(err, authurl.ErrNoNodeAddress):
		s.Checks = append(s.Checks, status.Warn("authURL", "%v", err))
		return s
	case err != nil:
		s.Checks = append(s.Checks, status.Fail("authURL", "%v", err))
		return s
	}
	host := hostOf(u)
	switch {
	case isClusterInternal(host):
		// The probe could not resolve it from here either.
		s.Checks = append(s.Checks, status.Warn("authURL", "the auth URL %s only resolves inside this cluster: peers cannot reach it; %s", u, exposeAuth))
		return s
	case peering.IsLoopbackHost(host):
		s.Checks = append(s.Checks, status.Warn("authURL", "the auth URL %s is a loopback address: peers on other machines cannot reach it; run kubectl offload upgrade --set auth.url=https://HOST:PORT with an address they reach", u))
	case svcType == "":
		s.Checks = append(s.Checks, status.OK("authURL", "peers are given the auth URL %s (auth.url)", u))
	default:
		s.Checks = append(s.Checks, status.OK("authURL", "peers are given the auth URL %s (the %s service %s)", u, svcType, offloadv1alpha1.Auth))
	}
	if err := probeTLS(ctx, u, d.ProbeTimeout); err != nil {
		s.Checks = append(s.Checks, status.Fail("authReachable", "cannot reach the auth service at %s from here: %v; %s, and check the firewalls between the clusters", u, err, exposeAuth))
	} else {
		s.Checks = append(s.Checks, status.OK("authReachable", "the auth service at %s completes a TLS handshake", u))
	}
	return s
}
