package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
)

func TestWriteErrorWritesTheJSONShape(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantReason string
		wantMsg    string
	}{
		{
			name:       "an Error is written as it is",
			err:        &peering.Error{Reason: "TokenExpired", Message: "the token expired; run kubectl offload peer generate again", Status: http.StatusUnauthorized},
			wantStatus: http.StatusUnauthorized, wantReason: "TokenExpired", wantMsg: "the token expired; run kubectl offload peer generate again",
		},
		{
			name:       "a wrapped Error is found",
			err:        fmt.Errorf("peering: %w", &peering.Error{Reason: peering.ReasonNotFound, Message: "gone", Status: http.StatusNotFound}),
			wantStatus: http.StatusNotFound, wantReason: peering.ReasonNotFound, wantMsg: "gone",
		},
		{
			name:       "any other error is an InternalError that does not repeat it",
			err:        errors.New("token abcdef.0123456789abcdef rejected by the API server"),
			wantStatus: http.StatusInternalServerError, wantReason: peering.ReasonInternal, wantMsg: "the auth service failed; see the logs of offload-auth",
		},
		{
			name:       "an Error without a status is a 500",
			err:        &peering.Error{Reason: "Odd", Message: "no status"},
			wantStatus: http.StatusInternalServerError, wantReason: "Odd", wantMsg: "no status",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			peering.WriteError(rec, tt.err)
			if rec.Code != tt.wantStatus {
				t.Errorf("status %d, want %d", rec.Code, tt.wantStatus)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			got := decodeBody(t, rec.Body.String())
			want := map[string]string{"reason": tt.wantReason, "message": tt.wantMsg}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("body %v, want exactly %v", got, want)
			}
		})
	}
}

func TestUnknownPathsAndWrongMethodsGetJSONErrors(t *testing.T) {
	s, err := NewServer(nopClient(), Options{Namespace: "ns", Listen: ":0", HealthProbeBindAddress: ":0"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, path string
		wantStatus   int
		wantReason   string
	}{
		{http.MethodGet, "/nope", http.StatusNotFound, peering.ReasonNotFound},
		{http.MethodPost, "/v1/unknown", http.StatusNotFound, peering.ReasonNotFound},
		{http.MethodPost, "/healthz", http.StatusMethodNotAllowed, peering.ReasonMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			s.mux.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			if rec.Code != tt.wantStatus {
				t.Errorf("status %d, want %d", rec.Code, tt.wantStatus)
			}
			if got := decodeBody(t, rec.Body.String()); got["reason"] != tt.wantReason || got["message"] == "" {
				t.Errorf("body %v, want reason %s and a message", got, tt.wantReason)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	valid := func(mut func(*Options)) Options {
		o := NewOptions()
		o.Namespace = "offload-system"
		mut(&o)
		return o
	}
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"defaults with a namespace are valid", valid(func(*Options) {}), ""},
		{"IP and DNS SANs are valid", valid(func(o *Options) { o.TLSSANs = []string{"10.0.0.1", "fd00::1", "auth.example.com", "*.example.com"} }), ""},
		{"a namespace is required", valid(func(o *Options) { o.Namespace = "" }), "POD_NAMESPACE"},
		{"a SAN must be an IP or a DNS name", valid(func(o *Options) { o.TLSSANs = []string{"https://x"} }), "--tls-san"},
		{"the listen address is required", valid(func(o *Options) { o.Listen = "" }), "--listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want one mentioning %s", err, tt.wantErr)
			}
		})
	}
}

func decodeBody(t *testing.T, body string) map[string]string {
	t.Helper()
	var got map[string]string
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("body %q is not a JSON object of strings: %v", body, err)
	}
	return got
}

// nopClient is a client for tests that never reach the CA Secret.
func nopClient() client.Client {
	return fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
}
