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

// hostAddresses are this cluster's own addresses, as /32s: every address
// of every node, and the API server's endpoints (EndpointSlice kubernetes
// in namespace default). A peer's view never covers them, so that no
// announcement can route a node's or the control plane's traffic into a
// tunnel: a peer CIDR that overlaps them is remapped.
func hostAddresses(ctx context.Context, reader client.Reader) ([]netip.Prefix, error) {
	var out []netip.Prefix
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
			out = append(out, netip.PrefixFrom(a, 32))
		}
	}
	var list corev1.NodeList
	if err := reader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing the nodes, whose addresses no view may cover: %w", err)
	}
	for _, n := range list.Items {
		for _, a := range n.Status.Addresses {
			add(a.Address)
		}
	}
	var slice discoveryv1.EndpointSlice
	err := reader.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "kubernetes"}, &slice)
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
