package virtualnode

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// Offloaded pods keep their addresses through a short tunnel outage (a
// gateway replaced by an upgrade), and lose them when a tunnel that never
// came up, or that has been down for addressesGrace, cannot carry them.
func TestPodAddressesRideThroughAShortTunnelOutageOnly(t *testing.T) {
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	handshake := &metav1.Time{Time: now.Add(-time.Minute)}
	ready := func(status metav1.ConditionStatus, since time.Duration) []metav1.Condition {
		return []metav1.Condition{{Type: offloadv1alpha1.ConditionReady, Status: status, Reason: "Test",
			LastTransitionTime: metav1.Time{Time: now.Add(-since)}}}
	}
	for name, tc := range map[string]struct {
		status offloadv1alpha1.TunnelStatus
		want   bool
	}{
		"connected": {offloadv1alpha1.TunnelStatus{Connected: true, LastHandshake: handshake,
			Conditions: ready(metav1.ConditionTrue, time.Hour)}, true},
		"down for a moment after being up": {offloadv1alpha1.TunnelStatus{LastHandshake: handshake,
			Conditions: ready(metav1.ConditionFalse, 5*time.Second)}, true},
		"down for the grace period": {offloadv1alpha1.TunnelStatus{LastHandshake: handshake,
			Conditions: ready(metav1.ConditionFalse, addressesGrace)}, false},
		"never up: no handshake on record": {offloadv1alpha1.TunnelStatus{
			Conditions: ready(metav1.ConditionFalse, time.Second)}, false},
		"no report yet":        {offloadv1alpha1.TunnelStatus{LastHandshake: handshake}, false},
		"not connected, Ready": {offloadv1alpha1.TunnelStatus{LastHandshake: handshake, Conditions: ready(metav1.ConditionTrue, time.Second)}, false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := tunnelUp(&offloadv1alpha1.Tunnel{Status: tc.status}, now); got != tc.want {
				t.Errorf("tunnelUp = %t, want %t", got, tc.want)
			}
		})
	}
}
