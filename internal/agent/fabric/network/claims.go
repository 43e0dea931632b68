package network

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/ipam"
)

// AnnotationApprovedPodCIDRs, on a Tunnel, is the admin's approval of a
// change of the peer's pod CIDRs: the new list, comma-separated, as the
// refusal message prints it. A peer's CIDRs are frozen after the first
// exchange: a peer that announces others gets no new route until then.
const AnnotationApprovedPodCIDRs = "offload.io/approved-pod-cidrs"

// ReasonRefusedPodCIDRs and ReasonPodCIDRsChanged are the reasons of a
// refused announcement, on NetworkReady and the NetworkPeering's Ready.
const (
	ReasonRefusedPodCIDRs = "RefusedPodCIDRs"
	ReasonPodCIDRsChanged = "PodCIDRsChanged"
)

// AnnotationRefusedAnnouncement, on a NetworkPeering, is the consumer's
// word to the provider that it refuses the provider's announcement (its
// pod CIDRs or its views): "reason: message". The provider shows it, as
// hostile text (cleaned, bounded), on its side's NetworkReady with
// ReasonRefusedByConsumer; the consumer removes it once it accepts.
const AnnotationRefusedAnnouncement = "offload.io/refused-announcement"

// ReasonRefusedByConsumer is NetworkReady's reason on the provider when
// the consumer refuses what the provider announced.
const ReasonRefusedByConsumer = "RefusedByConsumer"

// refusal is a peer announcement this cluster does not route.
type refusal struct{ reason, message string }

// String is the refusal as AnnotationRefusedAnnouncement holds it.
func (r *refusal) String() string {
	if r == nil {
		return ""
	}
	return r.reason + ": " + r.message
}

// isRefusal tells whether reason is one of a refused announcement.
func isRefusal(reason string) bool {
	return reason == ReasonRefusedPodCIDRs || reason == ReasonPodCIDRsChanged
}

// checkPeerCIDRs checks the pod CIDRs the peer announced, for Tunnel t that
// holds what was agreed before: within this cluster's peer ranges, and,
// once views were given, the same CIDRs unless the admin approved the new
// ones on the Tunnel. who names the peer in the message.
func (s Settings) checkPeerCIDRs(t *offloadv1alpha1.Tunnel, reals []string, who string) *refusal {
	if err := s.PeerRanges.Check(reals); err != nil {
		return &refusal{ReasonRefusedPodCIDRs, fmt.Sprintf("the pod CIDRs %s announced are refused, and nothing was routed for them: %v", who, err)}
	}
	if len(t.Spec.Mappings) == 0 {
		return nil
	}
	agreed := make([]string, 0, len(t.Spec.Mappings))
	for _, m := range t.Spec.Mappings {
		agreed = append(agreed, m.Real)
	}
	announced := ipam.CanonicalCIDRs(reals)
	if slices.Equal(ipam.CanonicalCIDRs(agreed), announced) {
		return nil
	}
	list := strings.Join(announced, ",")
	if t.Annotations[AnnotationApprovedPodCIDRs] == list {
		return nil
	}
	return &refusal{ReasonPodCIDRsChanged, fmt.Sprintf(
		"%s now announces the pod CIDRs %s instead of %s; the tunnel keeps the agreed ones until you approve the change: kubectl annotate tunnel -n %s %s %s=%s",
		who, list, strings.Join(ipam.CanonicalCIDRs(agreed), ","), t.Namespace, t.Name, AnnotationApprovedPodCIDRs, list)}
}

// checkPeerViews checks how the peer (who) says it sees this cluster's
// pod CIDRs: one view per pod CIDR of this cluster, of the same size.
// On the consumer they translate the addresses this cluster reflects to
// the provider; on the provider they are the consumer's addresses of its
// pods, which it may mirror.
func (s Settings) checkPeerViews(views []offloadv1alpha1.CIDRMapping, who string) *refusal {
	own := ipam.CanonicalCIDRs(s.podCIDRStrings())
	var reals []string
	for _, m := range views {
		r, err1 := netip.ParsePrefix(m.Real)
		v, err2 := netip.ParsePrefix(m.View)
		if err1 != nil || err2 != nil || !v.Addr().Is4() || r.Bits() != v.Bits() || !slices.Contains(own, r.Masked().String()) {
			return &refusal{ReasonRefusedPodCIDRs, fmt.Sprintf("%s's view %q of this cluster's pods %q is not a view of one of this cluster's pod CIDRs (%s)",
				who, m.View, m.Real, strings.Join(own, ", "))}
		}
		reals = append(reals, r.Masked().String())
	}
	if !slices.Equal(ipam.CanonicalCIDRs(reals), own) || len(reals) != len(own) {
		return &refusal{ReasonRefusedPodCIDRs, fmt.Sprintf("%s gives views of %s, want exactly one for each of this cluster's pod CIDRs (%s)",
			who, strings.Join(reals, ", "), strings.Join(own, ", "))}
	}
	return nil
}
