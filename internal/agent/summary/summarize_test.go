package summary

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

func cond(t string, s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: reason + " message", LastTransitionTime: metav1.Now()}
}

func issued() *offloadv1alpha1.PeeringCredentialsStatus {
	return &offloadv1alpha1.PeeringCredentialsStatus{
		Phase: offloadv1alpha1.PhaseEstablished, Expiry: &metav1.Time{Time: time.Now().Add(time.Hour)},
		Conditions: []metav1.Condition{cond(offloadv1alpha1.ConditionAuthenticated, metav1.ConditionTrue, "Authenticated")},
	}
}

func TestTheRoleIsComputedOnceFromBothDirections(t *testing.T) {
	recorded := &offloadv1alpha1.ForeignClusterStatus{Role: offloadv1alpha1.RoleProvider,
		Conditions: []metav1.Condition{cond(offloadv1alpha1.ConditionIncomingPeering, metav1.ConditionTrue, ReasonTenantReady)}}
	tests := []struct {
		name string
		in   Inputs
		want offloadv1alpha1.PeeringRole
	}{
		{"nothing yet: no role", Inputs{Outgoing: true}, ""},
		{"a token not yet exchanged is no outgoing peering", Inputs{Outgoing: true, Credentials: &offloadv1alpha1.PeeringCredentialsStatus{Phase: offloadv1alpha1.PhasePending}}, ""},
		{"credentials issued: consumer", Inputs{Outgoing: true, Credentials: issued()}, offloadv1alpha1.RoleConsumer},
		{"a tenant here: provider", Inputs{Tenant: true}, offloadv1alpha1.RoleProvider},
		{"both", Inputs{Outgoing: true, Credentials: issued(), Tenant: true}, offloadv1alpha1.RoleConsumerAndProvider},
		{"outgoing disabled with a tenant: provider", Inputs{Outgoing: false, Credentials: issued(), Tenant: true}, offloadv1alpha1.RoleProvider},
		{"the tenant removed: none", Inputs{Previous: recorded}, offloadv1alpha1.RoleNone},
		{"no credentials reported yet: the outgoing role stays", Inputs{Outgoing: true, Tenant: true,
			Previous: &offloadv1alpha1.ForeignClusterStatus{Role: offloadv1alpha1.RoleConsumer}}, offloadv1alpha1.RoleConsumerAndProvider},
		{"credentials just created, not reported on: the outgoing role stays", Inputs{Outgoing: true, Credentials: &offloadv1alpha1.PeeringCredentialsStatus{},
			Previous: &offloadv1alpha1.ForeignClusterStatus{Role: offloadv1alpha1.RoleConsumer}}, offloadv1alpha1.RoleConsumer},
		{"credentials not issued: no outgoing role", Inputs{Outgoing: true, Credentials: &offloadv1alpha1.PeeringCredentialsStatus{Phase: offloadv1alpha1.PhaseFailed},
			Previous: &offloadv1alpha1.ForeignClusterStatus{Role: offloadv1alpha1.RoleConsumer}}, offloadv1alpha1.RoleNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summarize(tt.in).Role; got != tt.want {
				t.Errorf("role = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTheChildrenAreMirroredWithTheirReasons(t *testing.T) {
	seenByCreds, seenByNode := metav1.NewTime(time.Now().Add(-time.Minute)), metav1.NewTime(time.Now())
	creds := issued()
	creds.LastSeen, creds.ObservedTokenID, creds.APIServerURL = &seenByCreds, "abc123", "https://provider:6443"
	creds.Conditions = append(creds.Conditions, cond(offloadv1alpha1.ConditionUnpeered, metav1.ConditionFalse, "ProviderNotCleaned"))
	policy := &offloadv1alpha1.ConsumerPolicy{PodSecurity: "baseline"}
	node := &offloadv1alpha1.VirtualNodeStatus{Phase: offloadv1alpha1.PhaseEstablished, LastSeen: &seenByNode, ProviderPolicy: policy,
		Conditions: []metav1.Condition{
			cond(offloadv1alpha1.ConditionReady, metav1.ConditionFalse, offloadv1alpha1.ReasonUnauthorized),
			cond(offloadv1alpha1.ConditionOfferRead, metav1.ConditionTrue, "Established"),
			cond(offloadv1alpha1.ConditionCredentialsAccepted, metav1.ConditionFalse, offloadv1alpha1.ReasonUnauthorized),
		}}
	got := Summarize(Inputs{Outgoing: true, Credentials: creds, VirtualNode: node})
	for typ, reason := range map[string]string{
		offloadv1alpha1.ConditionAuthenticated:    "Authenticated",
		offloadv1alpha1.ConditionUnpeered:         "ProviderNotCleaned",
		offloadv1alpha1.ConditionVirtualNodeReady: offloadv1alpha1.ReasonUnauthorized,
		offloadv1alpha1.ConditionOutgoingPeering:  "Established",
	} {
		c := meta.FindStatusCondition(got.Conditions, typ)
		if c == nil || c.Reason != reason || c.Message != reason+" message" {
			t.Errorf("%s = %+v, want reason %s with the child's message", typ, c, reason)
		}
	}
	if c := meta.FindStatusCondition(got.Conditions, offloadv1alpha1.ConditionCredentialsAccepted); c != nil {
		t.Errorf("the VirtualNode's CredentialsAccepted leaked into the ForeignCluster: %+v", c)
	}
	if got.Auth != offloadv1alpha1.PhaseEstablished || got.Outgoing != offloadv1alpha1.PhaseEstablished || got.CredentialExpiry == nil ||
		got.ObservedTokenID != "abc123" || got.APIServerURL != "https://provider:6443" || got.ProviderPolicy != policy {
		t.Errorf("status %+v does not mirror the children", got)
	}
	if !got.LastSeen.Equal(&seenByNode) {
		t.Errorf("lastSeen = %v, want the later of the children's, %v", got.LastSeen, seenByNode)
	}
	if !Equal(&got, &got) {
		t.Error("a summary differs from itself")
	}
	for name, stale := range map[string]func(s *offloadv1alpha1.ForeignClusterStatus){
		"another NETWORK column": func(s *offloadv1alpha1.ForeignClusterStatus) { s.Network = offloadv1alpha1.PhaseEstablished },
		"a condition no child reports": func(s *offloadv1alpha1.ForeignClusterStatus) {
			s.Conditions = append(s.Conditions, cond("Stale", metav1.ConditionTrue, "Old"))
		},
	} {
		s := got.DeepCopy()
		stale(s)
		if Equal(s, &got) {
			t.Errorf("a status with %s looks current", name)
		}
	}
}

func TestTheNetworkIsTheTunnelsOrDisabledBySpec(t *testing.T) {
	tunnel := &offloadv1alpha1.TunnelStatus{Phase: offloadv1alpha1.PhaseFailed, Conditions: []metav1.Condition{
		cond(offloadv1alpha1.ConditionReady, metav1.ConditionFalse, offloadv1alpha1.ReasonTunnelWaiting),
		cond(offloadv1alpha1.ConditionNetworkReady, metav1.ConditionFalse, "RefusedPodCIDRs"),
	}}
	tests := []struct {
		name   string
		in     Inputs
		phase  offloadv1alpha1.PeeringPhase
		reason string
	}{
		{"no Tunnel: no network reported", Inputs{Outgoing: true}, "", ""},
		{"the Tunnel's report, not its gateway's Ready", Inputs{Outgoing: true, Tunnel: tunnel}, offloadv1alpha1.PhaseFailed, "RefusedPodCIDRs"},
		{"a provider's report on its server Tunnel", Inputs{Tenant: true, Tunnel: tunnel}, offloadv1alpha1.PhaseFailed, "RefusedPodCIDRs"},
		{"disabled by the spec", Inputs{Outgoing: true, NetworkingDisabled: true, Tunnel: tunnel}, offloadv1alpha1.PhaseNone, offloadv1alpha1.ReasonNetworkingDisabled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Summarize(tt.in)
			c := meta.FindStatusCondition(got.Conditions, offloadv1alpha1.ConditionNetworkReady)
			if got.Network != tt.phase || (c == nil) != (tt.reason == "") || c != nil && c.Reason != tt.reason {
				t.Errorf("NETWORK %q, NetworkReady %+v; want %q, reason %q", got.Network, c, tt.phase, tt.reason)
			}
			if meta.FindStatusCondition(got.Conditions, offloadv1alpha1.ConditionReady) != nil {
				t.Error("the gateway's Ready leaked into the ForeignCluster")
			}
		})
	}
}

func TestATransitionTimeMovesOnlyWithTheStatus(t *testing.T) {
	then := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	prev := &offloadv1alpha1.ForeignClusterStatus{Conditions: []metav1.Condition{
		{Type: offloadv1alpha1.ConditionIncomingPeering, Status: metav1.ConditionTrue, Reason: ReasonTenantReady, LastTransitionTime: then}}}
	if c := meta.FindStatusCondition(Summarize(Inputs{Previous: prev, Tenant: true}).Conditions, offloadv1alpha1.ConditionIncomingPeering); !c.LastTransitionTime.Equal(&then) {
		t.Errorf("IncomingPeering moved to %v with no change, want %v", c.LastTransitionTime, then)
	}
	c := meta.FindStatusCondition(Summarize(Inputs{Previous: prev}).Conditions, offloadv1alpha1.ConditionIncomingPeering)
	if c.Status != metav1.ConditionFalse || c.Reason != ReasonTenantRemoved || !then.Before(&c.LastTransitionTime) {
		t.Errorf("IncomingPeering = %+v once the tenant went, want False %s since now", c, ReasonTenantRemoved)
	}
}
