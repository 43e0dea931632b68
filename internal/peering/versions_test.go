package peering

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestCheckKubernetesPairFollowsThePolicy(t *testing.T) {
	tests := []struct {
		consumer, provider string
		refused            string // a part of the message; "" when the pair may peer
	}{
		{"v1.37.2", "v1.37.2", ""},
		{"v1.34.4", "v1.37.2", ""},
		{"v1.37.2", "v1.34.0", ""},
		{"v1.35.2+k3s1", "v1.36.3-eks-1234", ""},
		// An agent of an older release sends no version.
		{"", "v1.36.3", ""},
		{"v1.36.3", "", ""},
		{"v1.33.9", "v1.36.3", "the consumer runs Kubernetes v1.33.9, older than"},
		{"v1.36.3", "v1.30.0", "the provider runs Kubernetes v1.30.0, older than"},
		{"v1.38.0", "v1.37.2", "the consumer runs Kubernetes v1.38.0, newer than this release"},
		{"v1.37.2", "v2.0.0", "the provider runs Kubernetes v2.0.0, older than"},
		{"v1.37.2", "1.37", ""},
		{"v1.37.2", "nonsense\x1b[31m", "cannot be read"},
	}
	for _, tt := range tests {
		err := CheckKubernetesPair(tt.consumer, tt.provider)
		if tt.refused == "" {
			if err != nil {
				t.Errorf("CheckKubernetesPair(%q, %q) = %v; want nil", tt.consumer, tt.provider, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Reason != ReasonUnsupportedVersion || e.Status != http.StatusUnprocessableEntity {
			t.Errorf("CheckKubernetesPair(%q, %q) = %v; want a %d %s Error", tt.consumer, tt.provider, err, http.StatusUnprocessableEntity, ReasonUnsupportedVersion)
			continue
		}
		if !strings.Contains(e.Message, tt.refused) || !strings.Contains(e.Message, "v1.34 to v1.37") || strings.ContainsRune(e.Message, '\x1b') {
			t.Errorf("CheckKubernetesPair(%q, %q) says %q; want %q, the supported range, and no control character", tt.consumer, tt.provider, e.Message, tt.refused)
		}
	}
}
