// Package metrics is what the controller-manager tells Prometheus beyond
// controller-runtime's own metrics: per peer, the virtual node's health,
// the credentials' expiry and the capacity lent and used; per direction of
// pod reflection, what was reflected, what failed and how long it took;
// per tunnel, its handshake and traffic. Everything goes to
// controller-runtime's registry (sigs.k8s.io/controller-runtime/pkg/metrics),
// which the manager serves at /metrics. docs/metrics.md lists them.
//
// The counters and histograms of pod reflection are written as reflection
// happens (Reflection). The gauges of peers and tunnels are read from the
// manager's cache when Prometheus scrapes (Collector): they cost nothing
// between scrapes and are never stale against what the cache holds.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// The directions of pod reflection, the value of label direction.
const (
	// ToProvider is the consumer's pods sent to the provider: remote pods
	// created, updated and deleted.
	ToProvider = "to_provider"
	// ToConsumer is what comes back: the consumer pods' statuses written,
	// and consumer pods deleted once their remote pods are gone.
	ToConsumer = "to_consumer"
)

// The operations of pod reflection, the value of label operation.
const (
	OperationCreate = "create"
	OperationUpdate = "update"
	OperationDelete = "delete"
	OperationStatus = "status"
)

// propagationBuckets are the histograms' buckets: 10 ms doubling to about
// 82 s, from a pod reflected at once to one queued behind a burst of
// thousands.
var propagationBuckets = prometheus.ExponentialBuckets(0.01, 2, 14)

var (
	reflections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "offload_pod_reflections_total",
		Help: "Pod reflection steps that succeeded, by peer, direction (to_provider: remote pods created, updated, deleted; to_consumer: consumer pod statuses written, consumer pods deleted) and operation.",
	}, []string{"peer", "direction", "operation"})
	reflectionErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "offload_pod_reflection_errors_total",
		Help: "Pod reflection steps that failed, by peer, direction and reason: the Kubernetes API status reason, Unreachable when no answer came, Unknown otherwise.",
	}, []string{"peer", "direction", "reason"})
	createPropagation = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "offload_pod_create_propagation_seconds",
		Help:    "Time from the agent seeing a consumer pod bound to the peer's virtual node to its remote pod created on the provider.",
		Buckets: propagationBuckets,
	}, []string{"peer"})
	statusPropagation = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "offload_pod_status_propagation_seconds",
		Help:    "Time from the agent receiving a remote pod's new status from the provider to the consumer pod's status written.",
		Buckets: propagationBuckets,
	}, []string{"peer"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(reflections, reflectionErrors, createPropagation, statusPropagation)
}

// Reflection records the pod reflection of one peer.
type Reflection struct{ peer string }

// ForPeer returns the recorder of peer's pod reflection.
func ForPeer(peer string) Reflection { return Reflection{peer: peer} }

// Done records a step of direction: a success, or an error by reason.
func (r Reflection) Done(direction, operation string, err error) {
	if err != nil {
		reflectionErrors.WithLabelValues(r.peer, direction, Reason(err)).Inc()
		return
	}
	reflections.WithLabelValues(r.peer, direction, operation).Inc()
}

// Created records a remote pod created d after the agent saw its consumer
// pod.
func (r Reflection) Created(d time.Duration) {
	createPropagation.WithLabelValues(r.peer).Observe(d.Seconds())
}

// StatusWritten records a consumer pod status written d after its remote
// pod's change arrived.
func (r Reflection) StatusWritten(d time.Duration) {
	statusPropagation.WithLabelValues(r.peer).Observe(d.Seconds())
}

// Forget drops the peer's series, once it is unpeered.
func (r Reflection) Forget() {
	for _, v := range []*prometheus.MetricVec{reflections.MetricVec, reflectionErrors.MetricVec, createPropagation.MetricVec, statusPropagation.MetricVec} {
		v.DeletePartialMatch(prometheus.Labels{"peer": r.peer})
	}
}

// apiReasons are the status reasons the Kubernetes API defines.
var apiReasons = sets.New(metav1.StatusReasonUnauthorized, metav1.StatusReasonForbidden, metav1.StatusReasonNotFound,
	metav1.StatusReasonAlreadyExists, metav1.StatusReasonConflict, metav1.StatusReasonGone, metav1.StatusReasonInvalid,
	metav1.StatusReasonServerTimeout, metav1.StatusReasonStoreReadError, metav1.StatusReasonTimeout, metav1.StatusReasonTooManyRequests,
	metav1.StatusReasonBadRequest, metav1.StatusReasonMethodNotAllowed, metav1.StatusReasonNotAcceptable,
	metav1.StatusReasonRequestEntityTooLarge, metav1.StatusReasonUnsupportedMediaType, metav1.StatusReasonInternalError,
	metav1.StatusReasonExpired, metav1.StatusReasonServiceUnavailable)

// Reason is the reason label of err: the Kubernetes API's status reason
// when the API server answered, Unreachable when it did not (a refused or
// timed-out connection), Unknown otherwise. The provider's API server
// writes the reason, so only the reasons the API defines are kept: any
// other is Unknown, and a provider cannot grow the label's values, and the
// agent's memory, with reasons of its own.
func Reason(err error) string {
	if reason := apierrors.ReasonForError(err); apiReasons.Has(reason) {
		return string(reason)
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) {
		return "Unreachable"
	}
	return "Unknown"
}

// PeerStats is what the consumer's virtual node of one peer holds, when
// Prometheus scrapes.
type PeerStats struct {
	// Peer is the ForeignCluster's name.
	Peer string
	// Offered is the virtual node's allocatable: the provider's offer;
	// nil until the offer was read.
	Offered corev1.ResourceList
	// Reflecting says the peer's pod reflection runs, and Requested and
	// Reflected are known.
	Reflecting bool
	// Requested is what the pods bound to the virtual node that have not
	// ended request, pods included, as the scheduler counts them.
	Requested corev1.ResourceList
	// Reflected is how many remote pods the agent reflects.
	Reflected int
}

// Collector is the prometheus.Collector of the peers' and tunnels' gauges,
// read at each scrape: the ForeignClusters and Tunnels from Reader (the
// manager's cache), the virtual nodes' capacity and pods from Peers.
type Collector struct {
	// Reader reads ForeignClusters and Tunnels.
	Reader client.Reader
	// Namespace is the install namespace, which holds the Tunnels.
	Namespace string
	// Peers returns the stats of every peer that has a virtual node here;
	// nil when this cluster runs none.
	Peers func() []PeerStats
}

var (
	peerLabels   = []string{"peer"}
	tunnelLabels = []string{"peer", "role"}

	peerReady = prometheus.NewDesc("offload_peer_virtual_node_ready",
		"1 when the peer's virtual node is Ready (the ForeignCluster's VirtualNodeReady condition), else 0.", peerLabels, nil)
	peerCredentialExpiry = prometheus.NewDesc("offload_peer_credential_expiry_timestamp_seconds",
		"When the credentials this cluster holds for the peer expire, as a Unix time; the agent rotates them before.", peerLabels, nil)
	peerLastSeen = prometheus.NewDesc("offload_peer_last_seen_timestamp_seconds",
		"When the peer's API server last answered, as a Unix time (30 s resolution).", peerLabels, nil)
	offeredCPU = prometheus.NewDesc("offload_peer_offered_cpu_cores",
		"CPU the provider lends to this cluster: its virtual node's allocatable.", peerLabels, nil)
	offeredMemory = prometheus.NewDesc("offload_peer_offered_memory_bytes",
		"Memory the provider lends to this cluster: its virtual node's allocatable.", peerLabels, nil)
	offeredPods = prometheus.NewDesc("offload_peer_offered_pods",
		"Pods the provider lets this cluster run: its virtual node's allocatable.", peerLabels, nil)
	requestedCPU = prometheus.NewDesc("offload_peer_requested_cpu_cores",
		"CPU the pods bound to the peer's virtual node request.", peerLabels, nil)
	requestedMemory = prometheus.NewDesc("offload_peer_requested_memory_bytes",
		"Memory the pods bound to the peer's virtual node request.", peerLabels, nil)
	requestedPods = prometheus.NewDesc("offload_peer_requested_pods",
		"Pods bound to the peer's virtual node that have not ended.", peerLabels, nil)
	reflectedPods = prometheus.NewDesc("offload_reflected_pods",
		"Remote pods the agent reflects for the peer.", peerLabels, nil)

	tunnelConnected = prometheus.NewDesc("offload_tunnel_connected",
		"1 when the peer answers the gateway's liveness probe through the tunnel, else 0.", tunnelLabels, nil)
	tunnelHandshake = prometheus.NewDesc("offload_tunnel_last_handshake_timestamp_seconds",
		"When the tunnel's last WireGuard handshake completed, as a Unix time; its age is time() minus it.", tunnelLabels, nil)
	tunnelRxBytes = prometheus.NewDesc("offload_tunnel_receive_bytes_total",
		"Bytes received from the peer through the tunnel, as its gateway last reported.", tunnelLabels, nil)
	tunnelTxBytes = prometheus.NewDesc("offload_tunnel_transmit_bytes_total",
		"Bytes sent to the peer through the tunnel, as its gateway last reported.", tunnelLabels, nil)
	tunnelRxPackets = prometheus.NewDesc("offload_tunnel_receive_packets_total",
		"Packets received from the peer through the tunnel, as its gateway last reported.", tunnelLabels, nil)
	tunnelTxPackets = prometheus.NewDesc("offload_tunnel_transmit_packets_total",
		"Packets sent to the peer through the tunnel, as its gateway last reported.", tunnelLabels, nil)
	tunnelFiltered = prometheus.NewDesc("offload_tunnel_filtered_packets_total",
		"Packets the tenant filter dropped: traffic through the tunnel that the peering does not allow.", tunnelLabels, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{peerReady, peerCredentialExpiry, peerLastSeen, offeredCPU, offeredMemory, offeredPods,
		requestedCPU, requestedMemory, requestedPods, reflectedPods,
		tunnelConnected, tunnelHandshake, tunnelRxBytes, tunnelTxBytes, tunnelRxPackets, tunnelTxPackets, tunnelFiltered} {
		ch <- d
	}
}

// collectTimeout bounds the cache reads of one scrape.
const collectTimeout = 5 * time.Second

// Collect implements prometheus.Collector. A read that fails leaves its
// series out of the scrape: Prometheus then shows them absent, not zero.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	var fcs offloadv1alpha1.ForeignClusterList
	if err := c.Reader.List(ctx, &fcs); err == nil {
		for _, fc := range fcs.Items {
			if !fc.Spec.OutgoingPeering.Enabled {
				continue
			}
			gauge(peerReady, boolValue(meta.IsStatusConditionTrue(fc.Status.Conditions, offloadv1alpha1.ConditionVirtualNodeReady)), fc.Name)
			if t := fc.Status.CredentialExpiry; t != nil {
				gauge(peerCredentialExpiry, unixSeconds(t.Time), fc.Name)
			}
			if t := fc.Status.LastSeen; t != nil {
				gauge(peerLastSeen, unixSeconds(t.Time), fc.Name)
			}
		}
	}
	if c.Peers != nil {
		for _, p := range c.Peers() {
			if p.Offered != nil {
				gauge(offeredCPU, p.Offered.Cpu().AsApproximateFloat64(), p.Peer)
				gauge(offeredMemory, p.Offered.Memory().AsApproximateFloat64(), p.Peer)
				gauge(offeredPods, p.Offered.Pods().AsApproximateFloat64(), p.Peer)
			}
			if !p.Reflecting {
				continue
			}
			gauge(requestedCPU, p.Requested.Cpu().AsApproximateFloat64(), p.Peer)
			gauge(requestedMemory, p.Requested.Memory().AsApproximateFloat64(), p.Peer)
			gauge(requestedPods, p.Requested.Pods().AsApproximateFloat64(), p.Peer)
			gauge(reflectedPods, float64(p.Reflected), p.Peer)
		}
	}
	var tunnels offloadv1alpha1.TunnelList
	if err := c.Reader.List(ctx, &tunnels, client.InNamespace(c.Namespace)); err != nil {
		return
	}
	for _, t := range tunnels.Items {
		peer, role := t.Spec.ClusterName, strings.ToLower(string(t.Spec.Role))
		st := t.Status
		gauge(tunnelConnected, boolValue(st.Connected), peer, role)
		if st.LastHandshake != nil {
			gauge(tunnelHandshake, unixSeconds(st.LastHandshake.Time), peer, role)
		}
		counter(tunnelRxBytes, st.RxBytes, peer, role)
		counter(tunnelTxBytes, st.TxBytes, peer, role)
		counter(tunnelRxPackets, st.RxPackets, peer, role)
		counter(tunnelTxPackets, st.TxPackets, peer, role)
		counter(tunnelFiltered, st.FilteredPackets, peer, role)
	}
}

// Register registers c with controller-runtime's registry, once per
// process: a controller-manager that loses its lease starts again as a new
// process.
func Register(c *Collector) error {
	if err := ctrlmetrics.Registry.Register(c); err != nil {
		return fmt.Errorf("registering the peers' and tunnels' metrics: %w", err)
	}
	return nil
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
