package doctor

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/charts"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/internal/status"
	"github.com/kubectl-offload/kubectl-offload/internal/status/statustest"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// releaseHelm returns Helm's in-memory storage holding the offload release
// installed with values, or no release when values is nil.
func releaseHelm(t *testing.T, values map[string]any) *action.Configuration {
	t.Helper()
	helm := statustest.MemoryHelm()
	if values == nil {
		return helm
	}
	ch, err := charts.Load(statustest.Version)
	if err != nil {
		t.Fatal(err)
	}
	rel := &release.Release{Name: offloadv1alpha1.ReleaseName, Namespace: statustest.Namespace, Version: 1,
		Info: &release.Info{Status: release.StatusDeployed}, Chart: ch, Config: values}
	if err := helm.Releases.Create(rel); err != nil {
		t.Fatal(err)
	}
	return helm
}

// doctorEnv returns an Env on the API server, with the release
// installed with values (none when values is nil) and this plugin at
// statustest.Version.
func doctorEnv(t *testing.T, a statustest.APIServer, values map[string]any) *Env {
	t.Helper()
	env := status.NewEnv(a.Kube, a.Client, helmclient.New(releaseHelm(t, values), statustest.Namespace), statustest.Namespace)
	return &Env{Env: env, Config: envtest.APIServer(t), ProbeTimeout: 2 * time.Second, CLIVersion: statustest.Version}
}

// doctorFactory is a Factory with the API server's clients and config.
type doctorFactory struct {
	statustest.Factory
	cfg *rest.Config
}

func (f doctorFactory) RESTConfig() (*rest.Config, error) { return f.cfg, nil }

// runDoctor runs `kubectl offload doctor args...` against the API server,
// with the release installed with values.
func runDoctor(t *testing.T, a statustest.APIServer, values map[string]any, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	o := NewOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	o.cliVersion = statustest.Version
	f := doctorFactory{Factory: statustest.Factory{Kube: a.Kube, Ctrl: a.Client, Helm: releaseHelm(t, values)}, cfg: envtest.APIServer(t)}
	err := statustest.Execute(newCmdDoctor(f, o), &out, &errOut, args...)
	if errOut.Len() > 0 {
		t.Errorf("stderr = %q, want nothing: only cli.Run prints the error", errOut.String())
	}
	return out.String(), err
}

// tlsServer is an HTTPS server whose clock is skew ahead of this machine's.
func tlsServer(t *testing.T, skew time.Duration) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			t.Errorf("the probe of %s sent credentials", r.URL)
		}
		w.Header().Set("Date", time.Now().Add(skew).UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// closedURL returns an https URL on a local port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "https://" + addr
}

// installedValues are the values of a release whose settings are sound,
// with the auth service at authURL.
func installedValues(authURL string) map[string]any {
	return map[string]any{
		"clusterName": "alpha",
		"network":     map[string]any{"enabled": true, "podCIDR": "10.244.0.0/16", "serviceCIDR": "10.96.0.0/12"},
		"apiServer":   map[string]any{"url": "https://172.18.0.2:6443"},
		"auth":        map[string]any{"url": authURL},
	}
}

func TestDoctorProbesTheAuthEndpoint(t *testing.T) {
	a := statustest.NewAPIServer(t)
	ctx := context.Background()
	plain := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(plain.Close)
	authService := func(typ corev1.ServiceType) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: statustest.Namespace, Name: offloadv1alpha1.Auth},
			Spec: corev1.ServiceSpec{Type: typ, Selector: map[string]string{"app": "auth"},
				Ports: []corev1.ServicePort{{Name: "https", Port: 443}}}}
	}
	tests := []struct {
		name    string
		authURL string
		service *corev1.Service
		// want are the statuses of authURL and authReachable; "" means no such check.
		wantURL, wantReachable status.Status
		says                   string
	}{
		{"a TLS server answers, but a loopback URL is only good here", tlsServer(t, 0).URL, nil, status.StatusWarning, status.StatusOK, "completes a TLS handshake"},
		{"a closed port fails and says how to expose the service", closedURL(t), nil, status.StatusWarning, status.StatusFailed, "kubectl offload upgrade --set auth.url=https://HOST:PORT"},
		{"a port without TLS fails the handshake", "https://" + plain.Listener.Addr().String(), nil, status.StatusWarning, status.StatusFailed, "no TLS handshake"},
		{"a NodePort service without node addresses warns", "", authService(corev1.ServiceTypeNodePort), status.StatusWarning, "", "auth.url"},
		{"a ClusterIP service warns that peers cannot resolve it", "", authService(corev1.ServiceTypeClusterIP), status.StatusWarning, "", "only resolves inside this cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.service != nil {
				statustest.Create(t, a.Client, tt.service)
			}
			s := authEndpointChecker{}.Check(ctx, doctorEnv(t, a, installedValues(tt.authURL)))
			url, reachable := checkNamed(s.Checks, "authURL"), checkNamed(s.Checks, "authReachable")
			if url == nil || url.Status != tt.wantURL {
				t.Errorf("authURL = %+v, want %s", url, tt.wantURL)
			}
			switch {
			case tt.wantReachable == "" && reachable != nil:
				t.Errorf("authReachable = %+v, want no probe", *reachable)
			case tt.wantReachable != "" && (reachable == nil || reachable.Status != tt.wantReachable):
				t.Errorf("authReachable = %+v, want %s", reachable, tt.wantReachable)
			}
			if all := url.Message + " " + func() string {
				if reachable == nil {
					return ""
				}
				return reachable.Message
			}(); !strings.Contains(all, tt.says) {
				t.Errorf("the checks say %q, want %q", all, tt.says)
			}
		})
	}
}

func TestDoctorMeasuresClockSkewWithPeers(t *testing.T) {
	a := statustest.NewAPIServer(t)
	// Each peer is checked against its pinned CA, as the agent does.
	pinned := func(srv *httptest.Server) [2]string {
		hash, err := peering.CACertHash(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
		if err != nil {
			t.Fatal(err)
		}
		return [2]string{srv.URL, hash}
	}
	// An impostor answers at the peer's URL with a CA of its own.
	impostor := pinned(tlsServer(t, 0))
	impostor[1] = otherCAHash(t)
	peers := []struct {
		name string
		auth [2]string // URL and CA hash
		want status.Status
		says string
	}{
		{"in-step", pinned(tlsServer(t, 0)), status.StatusOK, "within 30s"},
		{"ahead", pinned(tlsServer(t, 2*time.Minute)), status.StatusWarning, "ahead of this cluster's"},
		{"behind", pinned(tlsServer(t, -10*time.Minute)), status.StatusFailed, "enable NTP"},
		{"gone", [2]string{closedURL(t), ""}, status.StatusWarning, "the skew is not checked"},
		{"impostor", impostor, status.StatusWarning, "the skew is not checked"},
		{"consumer", [2]string{}, status.StatusOK, "run kubectl offload doctor on skew-consumer"},
	}
	for i, p := range peers {
		fc := statustest.ForeignCluster("skew-"+p.name, "77777777-7777-4777-8777-77777777770"+string(rune('0'+i)), p.auth[0] != "", offloadv1alpha1.ForeignClusterStatus{})
		fc.Spec.AuthURL = p.auth[0]
		if p.auth[1] != "" {
			fc.Spec.CACertHash = p.auth[1]
		}
		a.Create(t, statustest.Peer{FC: fc})
	}
	s := clockSkewChecker{}.Check(context.Background(), doctorEnv(t, a, nil))
	for _, p := range peers {
		t.Run("peer "+p.name, func(t *testing.T) {
			c := checkNamed(s.Checks, "peer/skew-"+p.name)
			if c == nil || c.Status != p.want || !strings.Contains(c.Message, p.says) {
				t.Errorf("check = %+v, want %s saying %q", c, p.want, p.says)
			}
		})
	}
}

func TestDoctorComparesVersionsWithTheAPIServer(t *testing.T) {
	a := statustest.NewAPIServer(t)
	labels := map[string]string{"app": "cm"}
	statustest.Create(t, a.Client, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: statustest.Namespace, Name: offloadv1alpha1.ControllerManager,
			Labels: map[string]string{offloadv1alpha1.VersionLabel: "v1.1.0"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "cm", Image: "offload-agent"}}},
		}},
	})
	s := versionsChecker{}.Check(context.Background(), doctorEnv(t, a, map[string]any{}))
	if c := checkNamed(s.Checks, "kubernetes"); c == nil || c.Status != status.StatusOK {
		t.Errorf("kubernetes = %+v, want ok: the test API server is in the chart's range", c)
	}
	if c := checkNamed(s.Checks, "agent"); c == nil || c.Status != status.StatusWarning || !strings.Contains(c.Message, "the agent is v1.1.0 and this plugin v1.2.3") {
		t.Errorf("agent = %+v, want a warning that the agent is v1.1.0", c)
	}
}

// ports stands for the random ports of the local servers in golden files.
var ports = regexp.MustCompile(`127\.0\.0\.1:\d+`)

// withoutPorts returns r with the local servers' ports replaced by PORT.
func withoutPorts(r status.Report) status.Report {
	for i := range r.Sections {
		s := &r.Sections[i]
		for j := range s.Fields {
			s.Fields[j].Value = ports.ReplaceAllString(s.Fields[j].Value, "127.0.0.1:PORT")
		}
		for j := range s.Checks {
			s.Checks[j].Message = ports.ReplaceAllString(s.Checks[j].Message, "127.0.0.1:PORT")
		}
	}
	return r
}

func TestDoctor(t *testing.T) {
	a := statustest.NewAPIServer(t)
	gone := statustest.ForeignCluster("doctor-gone", "88888888-8888-4888-8888-888888888888", true, offloadv1alpha1.ForeignClusterStatus{})
	gone.Spec.AuthURL = closedURL(t)
	a.Create(t, statustest.Peer{FC: gone})
	sound := installedValues(tlsServer(t, 0).URL)

	t.Run("a sound install has warnings only, shown as a table", func(t *testing.T) {
		d := doctorEnv(t, a, sound)
		r := collect(context.Background(), d, defaultCheckers())
		if !r.Healthy || r.Kind != "DoctorReport" {
			t.Errorf("healthy = %t, kind %s; want true, DoctorReport: %+v", r.Healthy, r.Kind, r.Sections)
		}
		var b bytes.Buffer
		if err := status.Print(&b, output.Table, withoutPorts(r)); err != nil {
			t.Fatal(err)
		}
		framework.Golden(t, "doctor.txt", b.String())
	})

	t.Run("a sound install exits 0", func(t *testing.T) {
		out, err := runDoctor(t, a, sound, "-o", "yaml")
		statustest.AssertResult(t, err, "")
		if !strings.Contains(out, "kind: DoctorReport") {
			t.Errorf("-o yaml printed no DoctorReport:\n%s", out)
		}
	})

	t.Run("failed checks exit 1 and still print the JSON report", func(t *testing.T) {
		broken := installedValues(tlsServer(t, 0).URL)
		broken["apiServer"] = map[string]any{"url": "https://127.0.0.1:6443"}
		broken["network"] = map[string]any{"enabled": true, "podCIDR": "10.96.0.0/16", "serviceCIDR": "10.96.0.0/12"}
		var b bytes.Buffer
		r := collect(context.Background(), doctorEnv(t, a, broken), defaultCheckers())
		if err := status.Print(&b, output.Table, withoutPorts(r)); err != nil {
			t.Fatal(err)
		}
		framework.Golden(t, "doctor-failed.txt", b.String())

		out, err := runDoctor(t, a, broken, "-o", "json")
		statustest.AssertResult(t, err, "2 checks failed: api server url, cidrs")
		r = status.Report{}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("-o json is not JSON: %v\n%s", err, out)
		}
		for _, want := range []struct{ section, check string }{{"apiServer", "apiServerURL"}, {"cidrs", "podServiceOverlap"}} {
			var got *status.Check
			for _, s := range r.Sections {
				if s.Name == want.section {
					got = checkNamed(s.Checks, want.check)
				}
			}
			if got == nil || got.Status != status.StatusFailed {
				t.Errorf("%s/%s = %+v, want failed", want.section, want.check, got)
			}
		}
	})

	t.Run("without kubectl-offload the doctor says to install it", func(t *testing.T) {
		_, err := runDoctor(t, a, nil)
		if err == nil || !strings.Contains(err.Error(), "checks failed") {
			t.Errorf("error = %v, want failed checks", err)
		}
	})
}

// otherCAHash is the pin of a CA no test server uses (they all share
// httptest's certificate).
func otherCAHash(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other"}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := peering.CACertHash(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}
	return hash
}
