package auth

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// FuzzPeerRequest feeds arbitrary bodies through what /v1/peer does before
// it asks the API server anything: decoding, the consumer's identity, the
// token's form. It never panics, every refusal is a 400 peering.Error, and
// no message repeats the token's secret.
func FuzzPeerRequest(f *testing.F) {
	for _, s := range []string{
		`{"token":"abc123.0123456789abcdef","clusterID":"11111111-2222-4333-8444-555555555555","clusterName":"consumer","providerClusterID":"x"}`,
		`{"token":"abc123.0123456789abcdef","clusterID":"","clusterName":"Consumer_1"}`,
		`{"token":"abc123.0123456789abcdef","clusterID":"a/b","clusterName":"` + strings.Repeat("c", 80) + `"}`,
		`{}`, `[]`, `null`, `{"token":1}`, `{"token":"` + strings.Repeat("a", 5000) + `"}`, "", "{", "\x00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, peering.PeerPath, bytes.NewReader(body))
		w := httptest.NewRecorder()
		var req peering.PeerRequest
		err := readRequest(w, r, &req, "PeerRequest")
		if err == nil {
			err = validateConsumer(req.ClusterID, req.ClusterName, "22222222-2222-4333-8444-555555555555")
		}
		if err == nil {
			if _, perr := peering.ParseToken(req.Token); perr != nil {
				err = tokenError(peering.ReasonInvalidToken, perr.Error())
			}
		}
		if err == nil {
			return
		}
		var pe *peering.Error
		if !errors.As(err, &pe) || pe.Status/100 != 4 {
			t.Fatalf("refusal %v is not a client-error peering.Error", err)
		}
		if tok, perr := peering.ParseToken(req.Token); perr == nil && strings.Contains(pe.Message, tok.Secret) {
			t.Fatalf("the refusal repeats the token's secret: %q", pe.Message)
		}
	})
}

// FuzzUnverifiedBinding checks that reading a refused token's claims never
// panics, whatever comes as a bearer token, and that what it accepts names
// a namespace and a Secret UID.
func FuzzUnverifiedBinding(f *testing.F) {
	for _, s := range []string{
		"e30.eyJrdWJlcm5ldGVzLmlvIjp7Im5hbWVzcGFjZSI6Im9mZmxvYWQtdGVuYW50LXgiLCJzZWNyZXQiOnsibmFtZSI6ImEiLCJ1aWQiOiJiIn19fQ.x",
		"", ".", "..", "a.b.c", "e30.e30.e30", "e30.bnVsbA.x", strings.Repeat("a.", 10000),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		ns, uid, ok := unverifiedBinding(token)
		if ok && uid == "" {
			t.Fatalf("accepted %q without a Secret UID (namespace %q)", token, ns)
		}
		if ok && len(token) > maxTokenLength {
			t.Fatalf("decoded a token of %d bytes", len(token))
		}
	})
}
