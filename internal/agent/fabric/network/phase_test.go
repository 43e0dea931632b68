package network

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// TestTheNetworkReadyMessageNamesThePeerOnEitherEnd: the client's end
// names the gateway it dials, the server's the consumer it serves (it
// dials nothing, so it has no endpoint to name).
func TestTheNetworkReadyMessageNamesThePeerOnEitherEnd(t *testing.T) {
	for _, tc := range []struct {
		role             offloadv1alpha1.TunnelRole
		endpoint         string
		wantUp, wantDown string
	}{
		{offloadv1alpha1.TunnelClient, "192.0.2.1:31820", "tunnel to 192.0.2.1:31820 up (userspace)", "the provider's gateway at 192.0.2.1:31820 does not answer"},
		{offloadv1alpha1.TunnelServer, "", "tunnel from consumer peer up (userspace)", "consumer peer's gateway does not answer"},
	} {
		tunnel := &offloadv1alpha1.Tunnel{Spec: offloadv1alpha1.TunnelSpec{ClusterName: "peer", Role: tc.role, Endpoint: tc.endpoint,
			Mappings: []offloadv1alpha1.CIDRMapping{{Real: "10.244.0.0/16", View: "10.70.0.0/16"}}},
			Status: offloadv1alpha1.TunnelStatus{Implementation: "userspace"}}
		for _, st := range []struct {
			status metav1.ConditionStatus
			reason string
			want   string
		}{{metav1.ConditionTrue, offloadv1alpha1.ReasonTunnelConnected, tc.wantUp}, {metav1.ConditionFalse, offloadv1alpha1.ReasonTunnelDisconnected, tc.wantDown}} {
			meta.SetStatusCondition(&tunnel.Status.Conditions, metav1.Condition{Type: offloadv1alpha1.ConditionReady, Status: st.status, Reason: st.reason})
			_, c, err := tunnelPhase(tunnel)
			if err != nil || !strings.HasPrefix(c.Message, st.want) || strings.Contains(c.Message, "  ") {
				t.Errorf("%s end, Ready %s: NetworkReady says %q (%v), want it to start with %q", tc.role, st.status, c.Message, err, st.want)
			}
		}
	}
}
