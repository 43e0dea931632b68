package virtualnode

import (
	"context"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/reflection"
)

// addressesTTL is how long a read of the peering's Tunnel is used.
const addressesTTL = 5 * time.Second

// tunnelAddresses reads the address translation of the peering with
// provider from its client Tunnel out-PROVIDER, at most every addressesTTL.
// Without the network fabric (networked false) it is nil: nothing is
// translated. With it, until the Tunnel has its mappings and its gateway
// reports the peer connected, the translation withholds pod addresses
// (reflection.Addresses.Withhold). It reads uncached, as the Tunnel type is
// watched only where the network controllers run.
func tunnelAddresses(reader client.Reader, namespace, provider string, networked bool) func() *reflection.Addresses {
	if !networked {
		return func() *reflection.Addresses { return nil }
	}
	var mu sync.Mutex
	cached := &reflection.Addresses{Withhold: true}
	var at time.Time
	key := client.ObjectKey{Namespace: namespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, provider)}
	return func() *reflection.Addresses {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) < addressesTTL {
			return cached
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var t offloadv1alpha1.Tunnel
		err := reader.Get(ctx, key, &t)
		switch {
		case err == nil:
			cached = reflection.AddressesOf(&t)
			cached.Withhold = len(t.Spec.Mappings) == 0 || !t.Status.Connected
		case client.IgnoreNotFound(err) == nil:
			cached = &reflection.Addresses{Withhold: true}
		default:
			return cached // keep the last answer through an API hiccup
		}
		at = time.Now()
		return cached
	}
}
