package summary

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// Inputs are what a ForeignCluster's status summarises.
type Inputs struct {
	// Previous is the status as it is; it keeps transition times, and
	// says whether an incoming peering was ever recorded.
	Previous *offloadv1alpha1.ForeignClusterStatus
	// Outgoing is spec.outgoingPeering.enabled.
	Outgoing bool
	// Credentials and VirtualNode are the children's status, nil when the
	// child does not exist.
	Credentials *offloadv1alpha1.PeeringCredentialsStatus
	VirtualNode *offloadv1alpha1.VirtualNodeStatus
	// Tenant says the peer consumes this cluster: its Tenant is there.
	Tenant bool
	// NetworkingDisabled is spec.networking.disabled.
	NetworkingDisabled bool
	// Tunnel is the status of the peering's Tunnel, nil when there is
	// none: on a consumer, the client Tunnel the ForeignCluster owns; on a
	// provider only, the server Tunnel of the peer's tenant.
	Tunnel *offloadv1alpha1.TunnelStatus
}

// mirrored maps the children's conditions to the ForeignCluster's.
var (
	fromCredentials = map[string]string{
		offloadv1alpha1.ConditionAuthenticated: offloadv1alpha1.ConditionAuthenticated,
		offloadv1alpha1.ConditionUnpeered:      offloadv1alpha1.ConditionUnpeered,
	}
	fromVirtualNode = map[string]string{
		offloadv1alpha1.ConditionReady:     offloadv1alpha1.ConditionVirtualNodeReady,
		offloadv1alpha1.ConditionOfferRead: offloadv1alpha1.ConditionOutgoingPeering,
	}
	fromTunnel = map[string]string{
		offloadv1alpha1.ConditionNetworkReady: offloadv1alpha1.ConditionNetworkReady,
	}
)

// Summarize computes a ForeignCluster's status.
func Summarize(in Inputs) offloadv1alpha1.ForeignClusterStatus {
	prev := in.Previous
	if prev == nil {
		prev = &offloadv1alpha1.ForeignClusterStatus{}
	}
	var out offloadv1alpha1.ForeignClusterStatus
	mirror := func(conds []metav1.Condition, types map[string]string) {
		for _, c := range conds {
			if t, ok := types[c.Type]; ok {
				c.Type, c.ObservedGeneration = t, 0
				if old := meta.FindStatusCondition(prev.Conditions, t); old != nil && old.Status == c.Status {
					c.LastTransitionTime = old.LastTransitionTime
				}
				out.Conditions = append(out.Conditions, c)
			}
		}
	}
	// Until the credentials controller reports (a ForeignCluster just
	// created, or one an earlier release peered), the outgoing part of
	// the role stays what it was.
	outgoing := in.Outgoing && (prev.Role == offloadv1alpha1.RoleConsumer || prev.Role == offloadv1alpha1.RoleConsumerAndProvider)
	if cs := in.Credentials; cs != nil {
		mirror(cs.Conditions, fromCredentials)
		out.Auth, out.CredentialExpiry, out.LastSeen = cs.Phase, cs.Expiry, cs.LastSeen
		out.ObservedTokenID, out.APIServerURL = cs.ObservedTokenID, cs.APIServerURL
		// Credentials were issued once: this cluster consumes the peer.
		if cs.Phase != "" {
			outgoing = in.Outgoing && cs.Expiry != nil
		}
	}
	if vs := in.VirtualNode; vs != nil {
		mirror(vs.Conditions, fromVirtualNode)
		out.Outgoing, out.ProviderPolicy = vs.Phase, vs.ProviderPolicy
		if vs.LastSeen != nil && (out.LastSeen == nil || out.LastSeen.Before(vs.LastSeen)) {
			out.LastSeen = vs.LastSeen
		}
	}
	switch {
	case in.Outgoing && in.NetworkingDisabled:
		out.Network = offloadv1alpha1.PhaseNone
		out.Conditions = append(out.Conditions, transition(prev, metav1.Condition{Type: offloadv1alpha1.ConditionNetworkReady,
			Status: metav1.ConditionFalse, Reason: offloadv1alpha1.ReasonNetworkingDisabled,
			Message: "networking is disabled for this peering (spec.networking.disabled): the clusters are expected to share a network already"}))
	case in.Tunnel != nil:
		mirror(in.Tunnel.Conditions, fromTunnel)
		out.Network = in.Tunnel.Phase
	}
	recorded := meta.FindStatusCondition(prev.Conditions, offloadv1alpha1.ConditionIncomingPeering) != nil
	switch {
	case in.Tenant:
		out.Incoming = offloadv1alpha1.PhaseEstablished
		out.Conditions = append(out.Conditions, transition(prev, metav1.Condition{Type: offloadv1alpha1.ConditionIncomingPeering,
			Status: metav1.ConditionTrue, Reason: ReasonTenantReady, Message: "the peer consumes this cluster's resources as a tenant"}))
	case recorded:
		out.Incoming = offloadv1alpha1.PhaseNone
		out.Conditions = append(out.Conditions, transition(prev, metav1.Condition{Type: offloadv1alpha1.ConditionIncomingPeering,
			Status: metav1.ConditionFalse, Reason: ReasonTenantRemoved, Message: "the peer's tenant was removed"}))
	}
	switch {
	case outgoing && in.Tenant:
		out.Role = offloadv1alpha1.RoleConsumerAndProvider
	case outgoing:
		out.Role = offloadv1alpha1.RoleConsumer
	case in.Tenant:
		out.Role = offloadv1alpha1.RoleProvider
	case prev.Role != "":
		out.Role = offloadv1alpha1.RoleNone
	}
	return out
}

// transition gives c the previous transition time of its type when its
// status did not change, and now otherwise.
func transition(prev *offloadv1alpha1.ForeignClusterStatus, c metav1.Condition) metav1.Condition {
	if old := meta.FindStatusCondition(prev.Conditions, c.Type); old != nil && old.Status == c.Status {
		c.LastTransitionTime = old.LastTransitionTime
	} else {
		c.LastTransitionTime = metav1.Now()
	}
	return c
}

// Equal reports whether have already says what want says, in the fields
// Summarize computes.
func Equal(have, want *offloadv1alpha1.ForeignClusterStatus) bool {
	if have.Role != want.Role || have.Outgoing != want.Outgoing || have.Network != want.Network || have.Incoming != want.Incoming || have.Auth != want.Auth ||
		have.ObservedTokenID != want.ObservedTokenID || have.APIServerURL != want.APIServerURL ||
		!equality.Semantic.DeepEqual(have.LastSeen, want.LastSeen) || !equality.Semantic.DeepEqual(have.CredentialExpiry, want.CredentialExpiry) ||
		!equality.Semantic.DeepEqual(have.ProviderPolicy, want.ProviderPolicy) {
		return false
	}
	// The summary is the status's one writer: a condition it does not
	// compute (a child dropped it, or an earlier release wrote it) goes.
	if len(have.Conditions) != len(want.Conditions) {
		return false
	}
	for _, w := range want.Conditions {
		h := meta.FindStatusCondition(have.Conditions, w.Type)
		if h == nil || h.Status != w.Status || h.Reason != w.Reason || h.Message != w.Message {
			return false
		}
	}
	return true
}
