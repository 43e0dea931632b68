package virtualnode

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// addressesTTL is how long a read of the peering's Tunnel is used; one
// that withholds addresses is read again after addressesWithheldTTL, so
// pods show their addresses within a second or two of the tunnel coming
// up.
const (
	addressesTTL         = 5 * time.Second
	addressesWithheldTTL = time.Second
)

// addressesGrace is how long pod addresses stay published after a tunnel
// that was up goes down. A gateway replaced by an upgrade or rescheduled
// is back within seconds, and withdrawing every offloaded pod from the
// consumer's Services meanwhile would turn a pause into refused
// connections; a tunnel down longer is withdrawn, as the node lifecycle
// controller marks an unreachable node's pods not ready after its grace
// period. With the gateway's own 10 s of missed probes, offloaded pods
// leave the Services about 30 s after the path dies, short of the
// node lifecycle controller's default 40 s.
const addressesGrace = 20 * time.Second

// tunnelAddresses reads the address translation of the peering with
// provider from its client Tunnel out-PROVIDER, at most every addressesTTL.
// Without the network fabric (networked false) it is nil: nothing is
// translated. With it, until the Tunnel has its mappings and its gateway
// reports the peer connected, the translation withholds pod addresses
// (reflection.Addresses.Withhold), and again once a tunnel that was up has
// been down for addressesGrace. It reads uncached, as the Tunnel type is
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
		ttl := addressesTTL
		if cached.Withhold {
			ttl = addressesWithheldTTL
		}
		if time.Since(at) < ttl {
			return cached
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var t offloadv1alpha1.Tunnel
		err := reader.Get(ctx, key, &t)
		switch {
		case err == nil:
			cached = reflection.AddressesOf(&t)
			cached.Withhold = len(t.Spec.Mappings) == 0 || !tunnelUp(&t, time.Now())
		case client.IgnoreNotFound(err) == nil:
			cached = &reflection.Addresses{Withhold: true}
		default:
			return cached // keep the last answer through an API hiccup
		}
		at = time.Now()
		return cached
	}
}

// tunnelUp tells whether pod addresses through t are published at now: t
// is connected, or it was up (a handshake is on record) and went down
// less than addressesGrace ago, by its Ready condition.
func tunnelUp(t *offloadv1alpha1.Tunnel, now time.Time) bool {
	if t.Status.Connected {
		return true
	}
	ready := meta.FindStatusCondition(t.Status.Conditions, offloadv1alpha1.ConditionReady)
	return t.Status.LastHandshake != nil && ready != nil && ready.Status == metav1.ConditionFalse &&
		now.Sub(ready.LastTransitionTime.Time) < addressesGrace
}
