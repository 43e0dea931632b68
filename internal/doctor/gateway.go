package doctor

import (
	"cmp"
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/internal/status"
)

// setGatewayAddress is the fix for a gateway address consumers cannot dial.
const setGatewayAddress = "kubectl offload upgrade --gateway-address HOST[:PORT]"

// gatewayEndpointChecker checks the address consumers dial to reach this
// cluster's gateways, when the network fabric is on.
type gatewayEndpointChecker struct{}

func (gatewayEndpointChecker) Name() string { return "gateway" }

func (gatewayEndpointChecker) Check(ctx context.Context, d *Env) status.Section {
	s := status.Section{Title: "Gateway endpoint"}
	rel, c := status.ReleaseOrCheck(d.Env)
	if c != nil {
		s.Checks = append(s.Checks, *c)
		return s
	}
	if !helmclient.Bool(rel.Values, "network", "enabled") {
		s.Checks = append(s.Checks, status.OK("gateway", "the network fabric is off (network.enabled is false): there is no gateway to reach"))
		return s
	}
	typ := cmp.Or(helmclient.String(rel.Values, "network", "gateway", "serviceType"), string(corev1.ServiceTypeNodePort))
	addr := helmclient.String(rel.Values, "network", "gateway", "address")
	s.Fields = []status.Field{
		{Name: "serviceType", Label: "Service type", Value: typ},
		{Name: "address", Label: "Address", Value: addr},
	}
	if addr != "" {
		s.Checks = append(s.Checks, gatewayAddressCheck(addr))
	}

	var svcs corev1.ServiceList
	err := d.Client.List(ctx, &svcs, client.InNamespace(d.Namespace),
		client.MatchingLabels{offloadv1alpha1.LabelComponent: offloadv1alpha1.ComponentGateway})
	if err != nil {
		s.Checks = append(s.Checks, status.Warn("gateway", "cannot list the gateway services: %v; see kubectl get services -n %s", err, d.Namespace))
		return s
	}
	sort.Slice(svcs.Items, func(i, j int) bool { return svcs.Items[i].Name < svcs.Items[j].Name })
	for i := range svcs.Items {
		s.Checks = append(s.Checks, gatewayServiceCheck(&svcs.Items[i], addr != ""))
	}

	var peerings offloadv1alpha1.NetworkPeeringList
	switch err := d.Client.List(ctx, &peerings); {
	case status.MissingCRD(err):
	case err != nil:
		s.Checks = append(s.Checks, status.Warn("gateway", "cannot list the NetworkPeerings: %v", err))
	default:
		sort.Slice(peerings.Items, func(i, j int) bool { return peerings.Items[i].Namespace < peerings.Items[j].Namespace })
		for _, np := range peerings.Items {
			if c, advertised := gatewayEndpointCheck(np.ObjectMeta, np.Status.Endpoint); advertised {
				s.Checks = append(s.Checks, c)
			}
		}
	}
	if len(s.Checks) == 0 {
		s.Checks = append(s.Checks, status.OK("gateway", "no consumer has a tunnel to this cluster yet: its gateway Service (%s) comes with the first one", typ))
	}
	return s
}

// gatewayAddressCheck judges network.gateway.address, the address
// consumers dial instead of the Service's.
func gatewayAddressCheck(addr string) status.Check {
	if peering.IsLoopbackHost(hostOf(addr)) {
		return status.Fail("address", "network.gateway.address %s is a loopback address: consumers cannot reach this cluster's gateways; run %s with an address they reach", addr, setGatewayAddress)
	}
	return status.OK("address", "consumers dial this cluster's gateways at %s (network.gateway.address)", addr)
}

// gatewayServiceCheck judges one gateway Service: overridden says
// network.gateway.address replaces the address it would publish.
func gatewayServiceCheck(svc *corev1.Service, overridden bool) status.Check {
	name := "service/" + svc.Name
	switch svc.Spec.Type {
	case corev1.ServiceTypeLoadBalancer:
		if overridden {
			return status.OK(name, "LoadBalancer service %s: consumers dial network.gateway.address instead of its address", svc.Name)
		}
		host := ""
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if host = cmp.Or(in.IP, in.Hostname); host != "" {
				break
			}
		}
		switch {
		case host == "":
			return status.Warn(name, "the LoadBalancer service %s has no address yet: consumers cannot dial this gateway; wait for the load balancer, or run %s", svc.Name, setGatewayAddress)
		case peering.IsLoopbackHost(host):
			return status.Fail(name, "the LoadBalancer service %s has the loopback address %s: consumers cannot reach this gateway; run %s with an address they reach", svc.Name, host, setGatewayAddress)
		}
		return status.OK(name, "consumers dial the LoadBalancer service %s at %s", svc.Name, host)
	case corev1.ServiceTypeNodePort:
		if len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].NodePort == 0 {
			return status.Warn(name, "the NodePort service %s has no node port yet: wait, or see kubectl describe service -n %s %s", svc.Name, svc.Namespace, svc.Name)
		}
		return status.OK(name, "consumers dial node port %d of service %s", svc.Spec.Ports[0].NodePort, svc.Name)
	}
	return status.Warn(name, "the gateway service %s has type %s, which consumers cannot dial: run kubectl offload upgrade --gateway-service-type NodePort (or LoadBalancer)", svc.Name, cmp.Or(string(svc.Spec.Type), "ClusterIP"))
}

// gatewayEndpointCheck judges the endpoint this cluster advertises to one
// consumer in the NetworkPeering of its tenant namespace; advertised is
// false when there is none yet, which status peer explains.
func gatewayEndpointCheck(np metav1.ObjectMeta, endpoint string) (c status.Check, advertised bool) {
	if endpoint == "" {
		return status.Check{}, false
	}
	name := "endpoint/" + np.Namespace
	if peering.IsLoopbackHost(hostOf(endpoint)) {
		return status.Fail(name, "the gateway endpoint %s advertised in %s is a loopback address: that consumer cannot reach this cluster's gateway; run %s with an address it reaches",
			endpoint, np.Namespace, setGatewayAddress), true
	}
	return status.OK(name, "the consumer in %s dials this cluster's gateway at %s", np.Namespace, endpoint), true
}
