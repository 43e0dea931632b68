package main

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// get serves one request through the app's routes and request logger.
func get(t *testing.T, a *app, target string, logs io.Writer) *http.Response {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	rec := httptest.NewRecorder()
	logRequests(log.New(logs, "", 0), a.routes()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec.Result()
}

func decode[T any](t *testing.T, resp *http.Response) T {
	t.Helper()
	var v T
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("decoding the response: %v", err)
	}
	return v
}

func TestHealthzAnswersOKAndEveryRequestIsLogged(t *testing.T) {
	var logs bytes.Buffer
	resp := get(t, &app{}, "/healthz?probe=1", &logs)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("/healthz = %d %q, want 200 \"ok\"", resp.StatusCode, body)
	}
	if !strings.Contains(logs.String(), "GET /healthz?probe=1 200 ") {
		t.Errorf("log %q does not record the request", logs.String())
	}
}

func TestHostnameAnswersTheHostName(t *testing.T) {
	a := &app{hostname: func() (string, error) { return "pod-a", nil }}
	body, _ := io.ReadAll(get(t, a, "/hostname", nil).Body)
	if string(body) != "pod-a" {
		t.Errorf("/hostname = %q, want pod-a", body)
	}
}

func TestEnvMasksSecretLookingVariables(t *testing.T) {
	a := &app{environ: func() []string {
		return []string{"PORT=8080", "API_TOKEN=t0k3n", "db_password=pw", "MY_SECRET=s", "SSH_KEY=k", "EMPTY=", "GREETING=a=b"}
	}}
	env := decode[map[string]string](t, get(t, a, "/env", nil))
	want := map[string]string{
		"PORT": "8080", "API_TOKEN": masked, "db_password": masked, "MY_SECRET": masked,
		"SSH_KEY": masked, "EMPTY": "", "GREETING": "a=b",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("/env[%s] = %q, want %q", k, env[k], v)
		}
	}
}

func TestCallReportsStatusBodyAndTLSPeer(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprint(w, strings.Repeat("x", maxBody+100))
	}))
	defer plain.Close()
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "hello over tls")
	}))
	defer secure.Close()

	tests := []struct {
		name        string
		target      string
		insecure    bool
		wantCode    int
		wantStatus  int
		wantBody    string
		wantTLS     bool
		wantErrPart string
	}{
		{name: "a plain URL returns its status and the first 4KB of its body", target: plain.URL, wantCode: 200, wantStatus: http.StatusTeapot, wantBody: strings.Repeat("x", maxBody)},
		{name: "an untrusted certificate fails the handshake", target: secure.URL, wantCode: 502, wantErrPart: "certificate"},
		{name: "insecure=1 skips verification and reports the peer", target: secure.URL, insecure: true, wantCode: 200, wantStatus: 200, wantBody: "hello over tls", wantTLS: true},
		{name: "an unreachable URL is a bad gateway", target: "http://127.0.0.1:1", wantCode: 502, wantErrPart: "refused"},
		{name: "a URL that is not http is a bad request", target: "ftp://example", wantCode: 400, wantErrPart: "not an http"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := "/call?url=" + url.QueryEscape(tt.target)
			if tt.insecure {
				q += "&insecure=1"
			}
			resp := get(t, &app{}, q, nil)
			res := decode[callResult](t, resp)
			if resp.StatusCode != tt.wantCode || res.Status != tt.wantStatus || res.Body != tt.wantBody || res.TLSHandshake != tt.wantTLS {
				t.Errorf("/call = %d %+v, want %d status %d tls %v body %.20q", resp.StatusCode, res, tt.wantCode, tt.wantStatus, tt.wantTLS, tt.wantBody)
			}
			if !strings.Contains(res.Error, tt.wantErrPart) || (tt.wantErrPart == "" && res.Error != "") {
				t.Errorf("error = %q, want it to mention %q", res.Error, tt.wantErrPart)
			}
			if tt.wantTLS && (res.PeerCertificateSubject == "" || res.PeerCertificateIssuer == "") {
				t.Errorf("peer certificate not reported: %+v", res)
			}
		})
	}
}

// fakeAPIServer serves the two calls /kube makes over TLS.
func fakeAPIServer(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, map[string]string{"major": "1", "minor": "35", "gitVersion": "v1.35.4"})
	})
	mux.HandleFunc("GET /api/v1/namespaces/demo/pods", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, map[string]any{"kind": "PodList", "apiVersion": "v1", "items": []any{
			map[string]any{"metadata": map[string]string{"name": "web-0", "namespace": "demo"}},
			map[string]any{"metadata": map[string]string{"name": "web-1", "namespace": "demo"}},
		}})
	})
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestKubeCallsTheAPIServerWithAVerifiedCA(t *testing.T) {
	srv := fakeAPIServer(t)
	nsFile := filepath.Join(t.TempDir(), "namespace")
	if err := os.WriteFile(nsFile, []byte("demo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	trusted := func() (*rest.Config, error) {
		return &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}, nil
	}
	untrusted := func() (*rest.Config, error) { return &rest.Config{Host: srv.URL}, nil }
	outside := func() (*rest.Config, error) { return nil, rest.ErrNotInCluster }

	tests := []struct {
		name        string
		config      func() (*rest.Config, error)
		wantCode    int
		wantVersion string
		wantPods    []string
		wantErrPart string
	}{
		{name: "with the cluster CA it reports the version and the namespace's pods", config: trusted, wantCode: 200, wantVersion: "v1.35.4", wantPods: []string{"web-0", "web-1"}},
		{name: "without the CA the server certificate is rejected", config: untrusted, wantCode: 502, wantPods: []string{}, wantErrPart: "certificate"},
		{name: "outside a cluster it says so", config: outside, wantCode: 502, wantPods: []string{}, wantErrPart: "in-cluster config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := get(t, &app{kubeConfig: tt.config, namespaceFile: nsFile}, "/kube", nil)
			res := decode[kubeResult](t, resp)
			if resp.StatusCode != tt.wantCode || res.ServerVersion != tt.wantVersion || fmt.Sprint(res.Pods) != fmt.Sprint(tt.wantPods) {
				t.Errorf("/kube = %d %+v, want %d version %q pods %v", resp.StatusCode, res, tt.wantCode, tt.wantVersion, tt.wantPods)
			}
			if !strings.Contains(res.Error, tt.wantErrPart) || (tt.wantErrPart == "" && res.Error != "") {
				t.Errorf("error = %q, want it to mention %q", res.Error, tt.wantErrPart)
			}
		})
	}
}

func TestWhatWriteWritesCatPrints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hello")
	if err := writeFile(path, "written by the first pod"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := catFile(&out, path); err != nil {
		t.Fatal(err)
	}
	if out.String() != "written by the first pod" {
		t.Errorf("cat printed %q, want what write wrote", out.String())
	}
	if err := catFile(io.Discard, filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("cat of a missing file succeeded; want an error")
	}
}
