package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/ssa"
	"github.com/kubectl-offload/kubectl-offload/internal/ipam"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
)

// FromTunnel is the gateway configuration a Tunnel describes. base holds
// what the gateway's pod decides: the interface, the implementation and the
// private key file.
func FromTunnel(t *offloadv1alpha1.Tunnel, base Config) (*Config, error) {
	c := base
	switch t.Spec.Role {
	case offloadv1alpha1.TunnelServer:
		c.Role = RoleServer
	case offloadv1alpha1.TunnelClient:
		c.Role = RoleClient
	default:
		return nil, fmt.Errorf("tunnel %s has no role", t.Name)
	}
	if t.Spec.PeerPublicKey == "" {
		return nil, fmt.Errorf("tunnel %s: the peer's public key is not known yet", t.Name)
	}
	if c.Role == RoleClient && t.Spec.Endpoint == "" {
		return nil, fmt.Errorf("tunnel %s: the provider's endpoint is not known yet", t.Name)
	}
	if len(t.Spec.Mappings) == 0 {
		return nil, fmt.Errorf("tunnel %s: the peer's pod CIDRs have no view yet", t.Name)
	}
	c.PeerPublicKey, c.PeerEndpoint, c.MTU = t.Spec.PeerPublicKey, t.Spec.Endpoint, int(t.Spec.MTU)
	var err error
	var errs []error
	if c.LocalPodCIDRs, err = ipam.ParsePrefixes("localPodCIDRs", t.Spec.LocalPodCIDRs); err != nil {
		errs = append(errs, err)
	}
	if c.AllowedDestinations, err = ipam.ParsePrefixes("allowedDestinations", t.Spec.AllowedDestinations); err != nil {
		errs = append(errs, err)
	}
	if c.Peer, err = parseMappings("mapping", t.Spec.Mappings); err != nil {
		errs = append(errs, err)
	}
	// On the server, the peer's views of this cluster's pods are mirrored;
	// on the client they are the provider's addresses, not routed here.
	c.Mirror = nil
	if c.Role == RoleServer {
		if c.Mirror, err = parseMappings("peer view", t.Spec.PeerViews); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("tunnel %s: %w", t.Name, err)
	}
	c.Default()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("tunnel %s: %w", t.Name, err)
	}
	return &c, nil
}

// parseMappings parses ms, naming each bad one as what.
func parseMappings(what string, ms []offloadv1alpha1.CIDRMapping) ([]Mapping, error) {
	var out []Mapping
	var errs []error
	for _, m := range ms {
		r, err1 := netip.ParsePrefix(m.Real)
		v, err2 := netip.ParsePrefix(m.View)
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, fmt.Errorf("%s %s -> %s: %w", what, m.Real, m.View, err))
			continue
		}
		out = append(out, Mapping{Real: r, View: v})
	}
	return out, errors.Join(errs...)
}

// TunnelStatus is st as the Tunnel reports it, with the Ready condition,
// over old, the status the Tunnel has. The last handshake is old's until
// this gateway's device completes one: a gateway that replaces another
// (an upgrade, a rescheduled pod) starts with none, and the tunnel's last
// handshake is still the one its predecessor had, which tells readers
// (the virtual node's address translation) that the tunnel was up before.
func TunnelStatus(st Status, generation int64, old offloadv1alpha1.TunnelStatus) offloadv1alpha1.TunnelStatus {
	out := offloadv1alpha1.TunnelStatus{
		Implementation: string(st.Implementation), PublicKey: st.PublicKey, Endpoint: st.Endpoint,
		RxBytes: st.RxBytes, TxBytes: st.TxBytes, RxPackets: st.RxPackets, TxPackets: st.TxPackets,
		FilteredPackets: int64(st.Filtered), Connected: st.Connected,
		PathMTU: int32(st.PathMTU), MTU: int32(st.MTU),
		LastHandshake: old.LastHandshake,
	}
	// Ready is the gateway's one condition; the network controller writes
	// NetworkReady, and its phase.
	if ready := meta.FindStatusCondition(old.Conditions, offloadv1alpha1.ConditionReady); ready != nil {
		out.Conditions = []metav1.Condition{*ready}
	}
	if !st.LastHandshake.IsZero() {
		out.LastHandshake = &metav1.Time{Time: st.LastHandshake.Truncate(time.Second)}
	}
	c := metav1.Condition{Type: offloadv1alpha1.ConditionReady, ObservedGeneration: generation}
	switch {
	case st.Error != "":
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, offloadv1alpha1.ReasonTunnelConfigurationFailed, st.Error
	case st.Connected:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, offloadv1alpha1.ReasonTunnelConnected, fmt.Sprintf("the peer answers through the tunnel (%s, %d bytes in, %d out)", st.Implementation, st.RxBytes, st.TxBytes)
	case st.Implementation == "":
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, offloadv1alpha1.ReasonTunnelWaiting, "the gateway waits for the peer's key, endpoint and pod CIDRs"
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, offloadv1alpha1.ReasonTunnelDisconnected, "the peer does not answer the liveness probe through the tunnel"
	}
	meta.SetStatusCondition(&out.Conditions, c)
	return out
}

// InCluster is the gateway's link to its Tunnel: a cache that watches only
// that object (which is all the gateway's RBAC allows), the source of its
// configuration and the writer of its status.
type InCluster struct {
	key    types.NamespacedName
	base   Config
	cache  cache.Cache
	client client.Client

	mu       sync.Mutex
	reported offloadv1alpha1.TunnelStatus
	at       time.Time
}

// NewInCluster watches Tunnel namespace/name through cfg. It asks the API
// server nothing: a gateway that starts while it is unreachable waits.
func NewInCluster(cfg *rest.Config, namespace, name string, base Config) (*InCluster, error) {
	mapper := scheme.GatewayRESTMapper()
	c, err := cache.New(cfg, cache.Options{
		Scheme:            scheme.Scheme,
		Mapper:            mapper,
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&offloadv1alpha1.Tunnel{}: {Field: fields.OneTermEqualSelector("metadata.name", name)},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the Tunnel cache: %w", err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme.Scheme, Mapper: mapper})
	if err != nil {
		return nil, err
	}
	return &InCluster{key: types.NamespacedName{Namespace: namespace, Name: name}, base: base, cache: c, client: cl}, nil
}

// Start runs the cache until ctx ends. It does not wait for the Tunnel:
// Load does, a while each time, so that the gateway's loop, whose beat its
// liveness probe watches, runs while the API server is unreachable.
func (ic *InCluster) Start(ctx context.Context) error {
	if _, err := ic.cache.GetInformer(ctx, &offloadv1alpha1.Tunnel{}, cache.BlockUntilSynced(false)); err != nil {
		return fmt.Errorf("watching Tunnel %s: %w", ic.key, err)
	}
	go func() { _ = ic.cache.Start(ctx) }()
	return nil
}

// loadTimeout bounds how long one Load waits for the Tunnel to be read.
var loadTimeout = 10 * time.Second

// Load implements Options.Load.
func (ic *InCluster) Load(ctx context.Context) (*Config, error) {
	ctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	if !ic.cache.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("reading Tunnel %s: the API server did not answer within %s", ic.key, loadTimeout)
	}
	t := &offloadv1alpha1.Tunnel{}
	if err := ic.cache.Get(ctx, ic.key, t); err != nil {
		return nil, fmt.Errorf("reading Tunnel %s: %w", ic.key, err)
	}
	return FromTunnel(t, ic.base)
}

// FieldManager is the field manager of what the gateway reports on its
// Tunnel's status: everything but the network controller's phase and
// NetworkReady.
const FieldManager = "offload-gateway"

// statusRefresh is how often an unchanged status is written anyway, so the
// byte and packet counters and the handshake stay current.
const statusRefresh = 30 * time.Second

// Report implements Options.Report: it writes the Tunnel's status when it
// changed (counters aside) or statusRefresh passed.
func (ic *InCluster) Report(ctx context.Context, st Status) error {
	t := &offloadv1alpha1.Tunnel{}
	if err := ic.cache.Get(ctx, ic.key, t); err != nil {
		return err
	}
	want := TunnelStatus(st, t.Generation, t.Status)
	ic.mu.Lock()
	prev, at := ic.reported, ic.at
	ic.mu.Unlock()
	if sameExceptCounters(prev, want) && time.Since(at) < statusRefresh {
		return nil
	}
	if err := ssa.ApplyStatus(ctx, ic.client, t, want, FieldManager); err != nil {
		return fmt.Errorf("writing the status of Tunnel %s: %w", ic.key, err)
	}
	ic.mu.Lock()
	ic.reported, ic.at = want, time.Now()
	ic.mu.Unlock()
	return nil
}

// sameExceptCounters says a and b differ at most in their counters and in
// their conditions' messages and transition times.
func sameExceptCounters(a, b offloadv1alpha1.TunnelStatus) bool {
	for _, s := range []*offloadv1alpha1.TunnelStatus{&a, &b} {
		s.RxBytes, s.TxBytes, s.RxPackets, s.TxPackets, s.FilteredPackets = 0, 0, 0, 0, 0
	}
	strip := func(cs []metav1.Condition) []metav1.Condition {
		out := make([]metav1.Condition, len(cs))
		for i, c := range cs {
			c.LastTransitionTime, c.Message = metav1.Time{}, ""
			out[i] = c
		}
		return out
	}
	a.Conditions, b.Conditions = strip(a.Conditions), strip(b.Conditions)
	return reflect.DeepEqual(a, b)
}
