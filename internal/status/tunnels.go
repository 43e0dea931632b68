package status

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
)

// The hops of a tunnel, in the order `status` checks them; Tunnel.Hop
// names the first that fails.
const (
	// HopExchange is the exchange of keys, endpoints and CIDRs between the
	// two agents through the provider's API server.
	HopExchange = "exchange"
	// HopGateway is this cluster's gateway pod.
	HopGateway = "gateway"
	// HopTunnel is the WireGuard tunnel to the peer's gateway.
	HopTunnel = "tunnel"
)

// handshakeStale is how old a handshake may be and still count as the peer
// answering: WireGuard renews a live session every 2 minutes.
const handshakeStale = 3 * time.Minute

// tunnelPatience is how long a new tunnel may wait for its gateway or its
// peer before the wait counts as a failure rather than a warning.
const tunnelPatience = 2 * time.Minute

// tunnelReconnect is how long a tunnel that was up may stay down before
// that counts as a failure rather than a warning: a gateway whose peer
// misses a few liveness probes (a busy node) drops the session and
// reconnects within seconds.
const tunnelReconnect = 20 * time.Second

// tunnelColumns are the columns of the tunnels table.
var tunnelColumns = []string{"PEER", "ROLE", "ENDPOINT", "DEVICE", "PEER PODS", "MTU", "HANDSHAKE", "RX", "TX", "STATUS"}

// Tunnel is one end of the network tunnel to a peer, in the tunnels
// section of `status` and the peer section of `status peer`.
type Tunnel struct {
	// Name is the name of the Tunnel: out-PEER when this cluster consumes
	// the peer, in-PEER when the peer consumes this cluster.
	Name string `json:"name"`
	// Peer is the name of the peer's ForeignCluster, or the peer's cluster
	// name when there is none.
	Peer string `json:"peer"`
	// ClusterID is the peer's cluster ID.
	ClusterID string `json:"clusterID"`
	// Role is Client (this cluster dials) or Server (the peer dials).
	Role string `json:"role"`
	// Gateway is the Deployment of this end's gateway, in the install namespace.
	Gateway string `json:"gateway"`
	// GatewayAvailable says the gateway Deployment has an available pod.
	GatewayAvailable bool `json:"gatewayAvailable"`
	// Implementation is the WireGuard device: kernel or userspace.
	Implementation string `json:"implementation,omitempty"`
	// Endpoint is the address the client dials; on the server, the
	// client's address as the tunnel last saw it.
	Endpoint string `json:"endpoint,omitempty"`
	// PeerPods are the peer's pod CIDRs and how this cluster sees them.
	PeerPods []offloadv1alpha1.CIDRMapping `json:"peerPods,omitempty"`
	// LocalPods are this cluster's pod CIDRs and how the peer sees them.
	LocalPods []offloadv1alpha1.CIDRMapping `json:"localPods,omitempty"`
	// MTU is the MTU both ends agreed; 0 until they did.
	MTU int32 `json:"mtu"`
	// LastHandshake is the last completed WireGuard handshake.
	LastHandshake *metav1.Time `json:"lastHandshake,omitempty"`
	// RxBytes and TxBytes count what crossed the tunnel, as last reported.
	RxBytes int64 `json:"rxBytes"`
	TxBytes int64 `json:"txBytes"`
	// Connected says the peer's gateway answers through the tunnel.
	Connected bool `json:"connected"`
	// Hop is the first hop that fails: exchange, gateway or tunnel; empty
	// when traffic flows.
	Hop string `json:"hop,omitempty"`
	// Created is when the Tunnel was created.
	Created metav1.Time `json:"created"`
}

// tunnelEnd is what status reads about one Tunnel.
type tunnelEnd struct {
	t  offloadv1alpha1.Tunnel
	fc *offloadv1alpha1.ForeignCluster
	// gateway is the gateway Deployment; nil when it does not exist.
	gateway    *appsv1.Deployment
	gatewayErr error
	// served is the provider's answer to the consumer, on the server end:
	// the Ready condition of the NetworkPeering in the tenant namespace.
	served *metav1.Condition
}

// readTunnels returns the Tunnels in the install namespace whose peer has
// a cluster ID in ids (all when ids is nil), sorted by name, with their
// gateways. It returns none when the Tunnel CRD is missing, which the CRDs
// section reports.
func readTunnels(ctx context.Context, env *Env, fcs []offloadv1alpha1.ForeignCluster, ids map[string]bool) ([]*tunnelEnd, error) {
	list := &offloadv1alpha1.TunnelList{}
	err := env.Client.List(ctx, list, client.InNamespace(env.Namespace))
	switch {
	case MissingCRD(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing Tunnels: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	var out []*tunnelEnd
	for _, t := range list.Items {
		if ids != nil && !ids[t.Spec.ClusterID] {
			continue
		}
		e := &tunnelEnd{t: t}
		for i := range fcs {
			if fcs[i].Spec.ClusterID == t.Spec.ClusterID {
				e.fc = &fcs[i]
				break
			}
		}
		e.gateway, e.gatewayErr = env.Deployment(ctx, offloadv1alpha1.GatewayName(t.Name))
		if t.Spec.Role == offloadv1alpha1.TunnelServer {
			e.served = readServed(ctx, env, strings.TrimPrefix(t.Name, "in-"))
		}
		out = append(out, e)
	}
	return out, nil
}

// readServed returns the Ready condition of the NetworkPeering consumer
// wrote into its tenant namespace, or nil when it cannot be read.
func readServed(ctx context.Context, env *Env, consumer string) *metav1.Condition {
	np := &offloadv1alpha1.NetworkPeering{}
	key := client.ObjectKey{Namespace: offloadv1alpha1.TenantNamespace(consumer), Name: offloadv1alpha1.NetworkPeeringName}
	if err := env.Client.Get(ctx, key, np); err != nil {
		return nil
	}
	return meta.FindStatusCondition(np.Status.Conditions, offloadv1alpha1.ConditionReady)
}

// report returns the Tunnel of the report and the verdict on its hops.
func (e *tunnelEnd) report(env *Env, now time.Time) (Tunnel, Check) {
	t := e.t
	rt := Tunnel{
		Name: t.Name, Peer: t.Spec.ClusterName, ClusterID: t.Spec.ClusterID, Role: string(t.Spec.Role),
		Gateway:          offloadv1alpha1.GatewayName(t.Name),
		GatewayAvailable: e.gateway != nil && e.gateway.Status.AvailableReplicas > 0,
		Implementation:   t.Status.Implementation, Endpoint: t.Spec.Endpoint,
		PeerPods: t.Spec.Mappings, LocalPods: t.Spec.PeerViews, MTU: t.Spec.MTU,
		LastHandshake: t.Status.LastHandshake, RxBytes: t.Status.RxBytes, TxBytes: t.Status.TxBytes,
		Connected: t.Status.Connected, Created: t.CreationTimestamp,
	}
	if e.fc != nil {
		rt.Peer = e.fc.Name
	}
	if t.Spec.Role == offloadv1alpha1.TunnelServer {
		rt.Endpoint = t.Status.Endpoint
	}
	c := e.diagnose(env, now, &rt)
	c.Name = "tunnel/" + t.Name
	return rt, c
}

// diagnose checks the hops of the tunnel in order and fails on the first
// that is broken, saying what is wrong there and what to do; it sets
// rt.Hop to that hop. A new tunnel that is still coming up is a warning.
func (e *tunnelEnd) diagnose(env *Env, now time.Time, rt *Tunnel) Check {
	t := e.t
	young := now.Sub(t.CreationTimestamp.Time) < tunnelPatience
	pending := func(hop, format string, args ...any) Check {
		rt.Hop = hop
		msg := fmt.Sprintf("tunnel %s to %s: %s: ", t.Name, rt.Peer, hop) + fmt.Sprintf(format, args...)
		if young {
			return Warn("", "%s", msg)
		}
		return Fail("", "%s (still, more than %s after the tunnel was created)", msg, duration.HumanDuration(tunnelPatience))
	}
	broken := func(hop, format string, args ...any) Check {
		rt.Hop = hop
		return Fail("", "tunnel %s to %s: %s: %s", t.Name, rt.Peer, hop, fmt.Sprintf(format, args...))
	}
	logs := fmt.Sprintf("kubectl logs -n %s deployment/%s", env.Namespace, rt.Gateway)

	// The exchange: the client needs the server's key, endpoint and CIDRs;
	// the server needs to be able to tell the client where to dial.
	if t.Spec.Role == offloadv1alpha1.TunnelClient && (t.Spec.PeerPublicKey == "" || t.Spec.Endpoint == "" || len(t.Spec.Mappings) == 0) {
		why := "the provider has not answered the network peering yet"
		if e.fc != nil {
			if c := meta.FindStatusCondition(e.fc.Status.Conditions, offloadv1alpha1.ConditionNetworkReady); c != nil && c.Message != "" {
				why = c.Message
				if e.fc.Status.Network == offloadv1alpha1.PhaseFailed {
					return broken(HopExchange, "%s", why)
				}
			}
		}
		return pending(HopExchange, "%s", why)
	}
	if t.Spec.Role == offloadv1alpha1.TunnelServer && e.served != nil && e.served.Status != metav1.ConditionTrue {
		return broken(HopExchange, "the consumer cannot be told how to reach this cluster (%s): %s", e.served.Reason, e.served.Message)
	}

	// This cluster's gateway pod.
	switch {
	case e.gatewayErr != nil:
		return broken(HopGateway, "%v", e.gatewayErr)
	case e.gateway == nil:
		return pending(HopGateway, "deployment %s not found: the agent creates it; see kubectl logs -n %s deployment/%s",
			rt.Gateway, env.Namespace, offloadv1alpha1.ControllerManager)
	case !rt.GatewayAvailable:
		return pending(HopGateway, "deployment %s has no available pod: see kubectl describe pods -n %s -l %s=%s, and %s",
			rt.Gateway, env.Namespace, offloadv1alpha1.LabelTunnel, t.Name, logs)
	}
	ready := meta.FindStatusCondition(t.Status.Conditions, offloadv1alpha1.ConditionReady)
	switch {
	case ready == nil:
		return pending(HopGateway, "gateway %s has not reported yet: see %s", rt.Gateway, logs)
	case ready.Reason == offloadv1alpha1.ReasonTunnelConfigurationFailed:
		return broken(HopGateway, "gateway %s cannot set up the tunnel: %s; see %s", rt.Gateway, ready.Message, logs)
	case ready.Status == metav1.ConditionTrue:
		return OK("", "tunnel %s to %s is up: %s", t.Name, rt.Peer, handshakeText(now, t.Status.LastHandshake))
	case ready.Reason == offloadv1alpha1.ReasonTunnelWaiting:
		return pending(HopExchange, "gateway %s waits for the peer's key, endpoint and pod CIDRs", rt.Gateway)
	}

	// The tunnel is down: a handshake since then tells a silent peer
	// gateway from a blocked path. A gateway that loses its peer starts a
	// new handshake within seconds.
	since := t.Status.LastHandshake != nil && t.Status.LastHandshake.After(ready.LastTransitionTime.Time) &&
		now.Sub(t.Status.LastHandshake.Time) < handshakeStale
	down := "down " + ageText(now, ready.LastTransitionTime.Time)
	if d := now.Sub(ready.LastTransitionTime.Time); d >= 0 && d < tunnelReconnect {
		rt.Hop = HopTunnel
		return Warn("", "tunnel %s to %s: %s: the peer's gateway stopped answering the liveness probe, the tunnel went %s (%s); the gateways reconnect within seconds, so run kubectl offload status again if this stays",
			t.Name, rt.Peer, HopTunnel, down, handshakeText(now, t.Status.LastHandshake))
	}
	switch {
	case since:
		return broken(HopTunnel, "the handshake with the peer's gateway works (%s) but it does not answer the liveness probe through the tunnel (%s): see its logs on the peer, and %s",
			handshakeText(now, t.Status.LastHandshake), down, logs)
	case t.Spec.Role == offloadv1alpha1.TunnelClient:
		return broken(HopTunnel, "no WireGuard handshake with the provider's gateway at %s since the tunnel went %s (%s): UDP to it is blocked, or that gateway is down; check the firewall between the clusters, and run kubectl offload status on the provider",
			t.Spec.Endpoint, down, handshakeText(now, t.Status.LastHandshake))
	}
	return broken(HopTunnel, "the consumer's gateway has not reached this one since the tunnel went %s (%s): check that UDP reaches service %s in namespace %s from the consumer, and run kubectl offload status on the consumer",
		down, handshakeText(now, t.Status.LastHandshake), rt.Gateway, env.Namespace)
}

// handshakeText says when the last handshake was, such as "last handshake 5s ago".
func handshakeText(now time.Time, t *metav1.Time) string {
	if t == nil {
		return "never a handshake"
	}
	return "last handshake " + ageText(now, t.Time)
}

// row returns the tunnel's row of the tunnels table.
func (rt Tunnel) row(now time.Time, status Status) []string {
	views := make([]string, 0, len(rt.PeerPods))
	for _, m := range rt.PeerPods {
		views = append(views, m.View)
	}
	handshake := none
	if rt.LastHandshake != nil {
		handshake = ageText(now, rt.LastHandshake.Time)
	}
	state := "Up"
	switch {
	case rt.Hop != "" && status == StatusWarning:
		state = "Pending (" + rt.Hop + ")"
	case rt.Hop != "":
		state = "Down (" + rt.Hop + ")"
	}
	return []string{rt.Peer, strings.ToLower(rt.Role), orNone(rt.Endpoint), orNone(rt.Implementation),
		orNone(strings.Join(views, ",")), mtuText(rt.MTU, none), handshake, byteText(rt.RxBytes), byteText(rt.TxBytes), state}
}

// fields returns the tunnel's facts for `status peer`, their names
// prefixed with the tunnel's name.
func (rt Tunnel) fields(now time.Time) []Field {
	prefix := "tunnel/" + rt.Name + "/"
	f := func(name, label, value string) Field { return Field{Name: prefix + name, Label: label, Value: value} }
	side := "this cluster dials the peer"
	if rt.Role == string(offloadv1alpha1.TunnelServer) {
		side = "the peer dials this cluster"
	}
	return []Field{
		f("role", "Tunnel "+rt.Name, strings.ToLower(rt.Role)+": "+side),
		f("endpoint", "  Endpoint", rt.Endpoint),
		f("implementation", "  Device", rt.Implementation),
		f("peerPods", "  Peer pods here", mappingText(rt.PeerPods)),
		f("localPods", "  Our pods there", localPodsText(rt)),
		f("mtu", "  MTU", mtuText(rt.MTU, "")),
		f("lastHandshake", "  Last handshake", timeText(rt.LastHandshake, func(t time.Time) string { return ageText(now, t) })),
		f("traffic", "  Traffic", fmt.Sprintf("%s in, %s out", byteText(rt.RxBytes), byteText(rt.TxBytes))),
	}
}

// localPodsText is how the peer sees this cluster's pods; on the server,
// whether its gateway mirrors those addresses.
func localPodsText(rt Tunnel) string {
	text := mappingText(rt.LocalPods)
	if rt.Role != string(offloadv1alpha1.TunnelServer) {
		return text
	}
	if text == "" {
		return "not mirrored here (the consumer's NetworkPeering says why)"
	}
	return text + " (mirrored here)"
}

// mappingText renders mappings as "REAL as VIEW", or "REAL" alone when
// the view is the real range.
func mappingText(mappings []offloadv1alpha1.CIDRMapping) string {
	parts := make([]string, 0, len(mappings))
	for _, m := range mappings {
		if m.View == m.Real {
			parts = append(parts, m.Real+" (not remapped)")
			continue
		}
		parts = append(parts, m.Real+" as "+m.View)
	}
	return strings.Join(parts, ", ")
}

// mtuText renders an agreed MTU, or unset before the ends agreed one.
func mtuText(mtu int32, unset string) string {
	if mtu <= 0 {
		return unset
	}
	return strconv.Itoa(int(mtu))
}

// byteText renders n bytes in binary units, such as 1.5Mi.
func byteText(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10)
	}
	v, i := float64(n), -1
	for v >= unit && i < 5 {
		v /= unit
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + string("KMGTPE"[i]) + "i"
}

// fabricCheck checks that the fabric DaemonSet runs on every node it
// should: pods on a node without it cannot reach any peer.
func fabricCheck(ctx context.Context, env *Env) Check {
	const name = "fabric"
	ds := &appsv1.DaemonSet{}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: offloadv1alpha1.Fabric}, ds)
	switch {
	case apierrors.IsNotFound(err):
		return Fail(name, "daemonset %s not found: pods cannot reach peers; run kubectl offload upgrade --set network.enabled=true", offloadv1alpha1.Fabric)
	case err != nil:
		return Fail(name, "reading daemonset %s: %v", offloadv1alpha1.Fabric, err)
	}
	st := ds.Status
	if st.NumberAvailable < st.DesiredNumberScheduled {
		return Fail(name, "the fabric runs on %d of %d nodes: pods on the others cannot reach peers; see kubectl get pods -n %s -l %s=fabric -o wide",
			st.NumberAvailable, st.DesiredNumberScheduled, env.Namespace, offloadv1alpha1.LabelComponent)
	}
	return OK(name, "the fabric routes peers' pods on all %d nodes", st.DesiredNumberScheduled)
}

// tunnelsChecker shows the network tunnel to every peer and checks that
// traffic flows through each, naming the first broken hop.
type tunnelsChecker struct{}

func (tunnelsChecker) Name() string { return "tunnels" }

func (tunnelsChecker) Check(ctx context.Context, env *Env) Section {
	s := Section{Title: "Tunnels"}
	fcs, err := readForeignClusters(ctx, env)
	if err != nil {
		s.Checks = append(s.Checks, Fail("tunnels", "%v", err))
		return s
	}
	ends, err := readTunnels(ctx, env, fcs, nil)
	if err != nil {
		s.Checks = append(s.Checks, Fail("tunnels", "%v", err))
		return s
	}
	s.Table = &Table{Columns: tunnelColumns, Rows: [][]string{}}
	if len(ends) == 0 {
		if rel, _ := env.Release(); rel != nil && !helmclient.Bool(rel.Values, "network", "enabled") {
			s.Checks = append(s.Checks, OK("tunnels", "the network fabric is off (network.enabled=false)"))
			return s
		}
		s.Checks = append(s.Checks, OK("tunnels", "no tunnels: each peering gets one"))
		return s
	}
	s.Tunnels, s.Checks = tunnelReports(ctx, env, ends, s.Table)
	return s
}

// tunnelReports returns the report and the check of each tunnel end, and
// the fabric's check; it adds a row per tunnel to table when it is set.
func tunnelReports(ctx context.Context, env *Env, ends []*tunnelEnd, table *Table) ([]Tunnel, []Check) {
	now := env.now()
	tunnels := make([]Tunnel, 0, len(ends))
	checks := make([]Check, 0, len(ends)+1)
	for _, e := range ends {
		rt, c := e.report(env, now)
		tunnels = append(tunnels, rt)
		checks = append(checks, c)
		if table != nil {
			table.Rows = append(table.Rows, rt.row(now, c.Status))
		}
	}
	return tunnels, append(checks, fabricCheck(ctx, env))
}

// readForeignClusters returns every ForeignCluster, sorted by name; none
// when their CRD is missing, which the peers section reports.
func readForeignClusters(ctx context.Context, env *Env) ([]offloadv1alpha1.ForeignCluster, error) {
	fcs, err := env.ForeignClusters(ctx)
	if MissingCRD(err) {
		return nil, nil
	}
	return fcs, err
}
