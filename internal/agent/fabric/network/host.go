package network

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// HostAddresses are this cluster's own addresses, as /32s: every address
// of every node (read from nodes), and the API server's endpoints
// (EndpointSlice kubernetes in namespace default, read from apiServer, which
// must not be a cache: the agent may get that one slice only). No view
// covers them, and tenant pods may not open connections to them.
func HostAddresses(ctx context.Context, nodes, apiServer client.Reader) ([]netip.Prefix, error) {
	var out []netip.Prefix
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
			out = append(out, netip.PrefixFrom(a, 32))
		}
	}
	var list corev1.NodeList
	if err := nodes.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing the nodes, whose addresses no view may cover: %w", err)
	}
	for _, n := range list.Items {
		for _, a := range n.Status.Addresses {
			add(a.Address)
		}
	}
	var slice discoveryv1.EndpointSlice
	err := apiServer.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "kubernetes"}, &slice)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading the API server's endpoints, which no view may cover: %w", err)
	}
	for _, e := range slice.Endpoints {
		for _, a := range e.Addresses {
			add(a)
		}
	}
	return out, nil
}
