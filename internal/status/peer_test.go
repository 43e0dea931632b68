package status

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kubectl-offload/kubectl-offload/internal/exit"
	"github.com/kubectl-offload/kubectl-offload/internal/status/statustest"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// fieldValues returns the fields of s by name.
func fieldValues(s Section) map[string]string {
	out := map[string]string{}
	for _, f := range s.Fields {
		out[f.Name] = f.Value
	}
	return out
}

func TestStatusPeer(t *testing.T) {
	a := newAPIServer(t)
	for _, p := range peerWorld() {
		a.Create(t, p)
	}

	tests := []struct {
		name, peer, golden string
		// wantErr is the one-line error; empty means exit code 0.
		wantErr string
	}{
		{
			name:   "a consumer with a Ready virtual node shows it and its resources",
			peer:   "provider-a",
			golden: "peer-ready.txt",
		},
		{
			name:    "a failed authentication fails with the agent's reason and message",
			peer:    "provider-b",
			golden:  "peer-auth-failed.txt",
			wantErr: "1 check failed: peer provider-b",
		},
		{
			name:   "a peer that only consumes this cluster shows its tenant, and its disabled outgoing side is ok",
			peer:   "consumer-c",
			golden: "peer-incoming.txt",
		},
		{
			name:    "expired credentials fail",
			peer:    "provider-d",
			golden:  "peer-expired.txt",
			wantErr: "1 check failed: peer provider-d",
		},
		{
			name:    "a virtual node that is not Ready fails",
			peer:    "provider-e",
			golden:  "peer-no-node.txt",
			wantErr: "1 check failed: peer provider-e",
		},
		{
			name:   "a peer being unpeered is a warning",
			peer:   "provider-f",
			golden: "peer-unpeering.txt",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, err := runStatus(t, a, "peer", tt.peer)
			statustest.AssertResult(t, err, tt.wantErr)
			if errOut != "" {
				t.Errorf("stderr = %q, want nothing", errOut)
			}
			framework.Golden(t, tt.golden, out)
		})
	}

	t.Run("the JSON is a status report with one peer section", func(t *testing.T) {
		out, _, err := runStatus(t, a, "peer", "provider-a", "-o", "json")
		statustest.AssertResult(t, err, "")
		var r Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("-o json is not JSON: %v\n%s", err, out)
		}
		if r.Kind != "StatusReport" || r.APIVersion != "offload.io/v1alpha1" || !r.Healthy || len(r.Sections) != 1 {
			t.Fatalf("report = %+v, want one healthy StatusReport section", r)
		}
		s := r.Sections[0]
		if s.Name != "peer" || s.Title != "Peer provider-a" || s.Status != StatusOK {
			t.Errorf("section %s %q %s, want peer \"Peer provider-a\" ok", s.Name, s.Title, s.Status)
		}
		want := map[string]string{
			"clusterID":                    idReady,
			"clusterName":                  "provider-a",
			"role":                         "Consumer",
			"auth":                         "Established",
			"virtualNode":                  "offload-provider-a",
			"virtualNodeStatus":            "Ready",
			"allocatableCPU":               "4",
			"allocatableMemory":            "8Gi",
			"allocatablePods":              "110",
			"allocatableExtendedResources": "example.com/fpga=0, nvidia.com/gpu=2",
			"extendedResources":            "nvidia.com/gpu",
			"credentialExpiry":             "2030-01-03T11:00:00Z (expires in 23h)",
			"lastSeen":                     "2030-01-02T11:55:00Z (5m ago)",
		}
		got := fieldValues(s)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("field %s = %q, want %q", k, got[k], v)
			}
		}
		var names []string
		for _, c := range s.Checks {
			names = append(names, c.Name)
		}
		if got := strings.Join(names, ","); got != "condition/Authenticated,condition/OutgoingPeering,condition/VirtualNodeReady,credentials,policy" {
			t.Errorf("checks = %s, want one per condition, the credentials and the peer's policy", got)
		}
	})

	t.Run("a peer that does not exist is an error that says where the peers are", func(t *testing.T) {
		out, _, err := runStatus(t, a, "peer", "nope", "-o", "json")
		if !errors.Is(err, ErrPeerNotFound) || exit.Code(err) != 1 {
			t.Errorf("error = %v (exit code %d), want ErrPeerNotFound and exit code 1", err, exit.Code(err))
		}
		if err != nil && err.Error() != `no peer "nope": kubectl offload status lists the peers` {
			t.Errorf("error = %q", err)
		}
		if out != "" {
			t.Errorf("stdout = %q, want nothing", out)
		}
	})

	t.Run("peer names complete from the ForeignClusters", func(t *testing.T) {
		got := PeerNames(t.Context(), a.Client, "provider-")
		if strings.Join(got, ",") != "provider-a,provider-b,provider-d,provider-e,provider-f" {
			t.Errorf("completions = %v", got)
		}
	})
}

func TestStatusPeerNeedsOneName(t *testing.T) {
	for _, args := range [][]string{{"peer"}, {"peer", "a", "b"}, {"peer", "a", "-o", "xml"}, {"peer", "a", "--timeout", "0s"}} {
		_, _, err := run(t, statustest.Factory{}, args...)
		if err == nil {
			t.Errorf("status %v succeeded, want an error", args)
		}
	}
}

func TestQuantitiesAreShownInTheUnitsKubectlUses(t *testing.T) {
	tests := []struct {
		name     string
		resource corev1.ResourceName
		value    string
		want     string
	}{
		{"an offer's share of free memory is shown in Gi to one decimal", corev1.ResourceMemory, "280677150Ki", "267.7Gi"},
		{"a whole number of Gi has no decimal", corev1.ResourceMemory, "8Gi", "8Gi"},
		{"memory in bytes is converted too", corev1.ResourceMemory, "17179869184", "16Gi"},
		{"less than a Gi is shown in Mi", corev1.ResourceMemory, "524288Ki", "512Mi"},
		{"less than a Mi is left as it is", corev1.ResourceMemory, "1000", "1k"},
		{"whole cores are shown as cores", corev1.ResourceCPU, "8000m", "8"},
		{"a share of a core is shown in millicores", corev1.ResourceCPU, "3.2", "3200m"},
		{"pods are a count", corev1.ResourcePods, "110", "110"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := corev1.ResourceList{tt.resource: resource.MustParse(tt.value)}
			if got := quantity(l, tt.resource); got != tt.want {
				t.Errorf("quantity(%s %s) = %q; want %q", tt.resource, tt.value, got, tt.want)
			}
		})
	}
	if got := quantity(corev1.ResourceList{}, corev1.ResourceMemory); got != "" {
		t.Errorf("quantity of a missing resource = %q; want empty", got)
	}
}
