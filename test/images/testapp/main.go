// Command testapp is the workload of the end-to-end tests on a real node, in
// place of nginx. It serves HTTP on $PORT (8080 when unset):
//
//	GET /healthz            200 "ok"
//	GET /hostname           the pod's host name
//	GET /env                its environment as JSON, secrets masked
//	GET /call?url=U         GET U (insecure=1 skips TLS verification) and
//	                        report status, body and TLS peer as JSON
//	GET /kube               call the API server with in-cluster config and
//	                        report its version and the namespace's pods
//
// "testapp get URL" prints the body of URL instead, for kubectl exec, and
// "testapp exit CODE" prints a line and exits with CODE, for Jobs.
// "testapp write FILE TEXT" writes TEXT to FILE and "testapp cat FILE"
// prints FILE, for pods that check a volume keeps what they wrote.
//
// Every request is logged to stdout, so tests can read it with kubectl logs.
// SIGTERM shuts the server down gracefully.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	// callTimeout bounds /call and /kube.
	callTimeout = 10 * time.Second
	// maxBody is how much of a called URL's body /call returns.
	maxBody = 4 << 10
	// namespaceFile holds the pod's namespace in every pod with a service
	// account token mounted.
	namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
	// masked replaces the value of secret-looking variables in /env.
	masked = "<masked>"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if len(os.Args) == 3 && os.Args[1] == "exit" {
		code, convErr := strconv.Atoi(os.Args[2])
		if convErr != nil {
			fmt.Fprintf(os.Stderr, "Error: exit code %q is not a number\n", os.Args[2])
			os.Exit(2)
		}
		fmt.Printf("exiting with %d\n", code)
		os.Exit(code)
	}
	switch {
	case len(os.Args) == 3 && os.Args[1] == "get":
		// "testapp get URL" is for kubectl exec: it prints the body of URL.
		err = fetch(ctx, os.Stdout, os.Args[2])
	case len(os.Args) == 4 && os.Args[1] == "write":
		err = writeFile(os.Args[2], os.Args[3])
	case len(os.Args) == 3 && os.Args[1] == "cat":
		err = catFile(os.Stdout, os.Args[2])
	default:
		err = run(ctx, os.Stdout, os.Getenv("PORT"))
	}
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
}

// fetch writes the body of an HTTP GET of u to out.
func fetch(ctx context.Context, out io.Writer, u string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(out, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return nil
}

// writeFile writes text to path and syncs it to disk, so that it is there
// for the next pod however this one ends.
func writeFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, text)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// catFile copies the content of path to out.
func catFile(out io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(out, f)
	return err
}

// run serves until ctx is done, then drains open requests.
func run(ctx context.Context, out io.Writer, port string) error {
	if port == "" {
		port = "8080"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("", port))
	if err != nil {
		return fmt.Errorf("listening on port %s: %w", port, err)
	}
	logger := log.New(out, "", log.LstdFlags|log.LUTC)
	a := &app{
		environ:       os.Environ,
		hostname:      os.Hostname,
		kubeConfig:    rest.InClusterConfig,
		namespaceFile: namespaceFile,
	}
	srv := &http.Server{Handler: logRequests(logger, a.routes()), ReadHeaderTimeout: callTimeout}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Printf("listening on %s", ln.Addr())

	select {
	case err := <-errc:
		return fmt.Errorf("serving http: %w", err)
	case <-ctx.Done():
	}
	logger.Printf("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down http server: %w", err)
	}
	return nil
}

// app holds what the handlers read from the process, so tests can swap it.
type app struct {
	environ       func() []string
	hostname      func() (string, error)
	kubeConfig    func() (*rest.Config, error)
	namespaceFile string
}

func (a *app) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "ok")
	})
	mux.HandleFunc("GET /hostname", a.handleHostname)
	mux.HandleFunc("GET /whoami", a.handleWhoami)
	mux.HandleFunc("GET /bytes", handleBytes)
	mux.HandleFunc("GET /env", a.handleEnv)
	mux.HandleFunc("GET /call", a.handleCall)
	mux.HandleFunc("GET /kube", a.handleKube)
	return mux
}

func (a *app) handleHostname(w http.ResponseWriter, _ *http.Request) {
	name, err := a.hostname()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprint(w, name)
}

// handleWhoami answers "<hostname> <client address>": who served, and whom
// it saw calling, so a network test can tell the path a request took.
func (a *app) handleWhoami(w http.ResponseWriter, r *http.Request) {
	name, err := a.hostname()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	fmt.Fprintf(w, "%s %s", name, host)
}

// handleBytes sends ?n= bytes (at most 64 MiB) of a repeating pattern,
// for transfers larger than one packet.
func handleBytes(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Query().Get("n"))
	if err != nil || n < 0 || n > 64<<20 {
		http.Error(w, "n must be a byte count up to 64 MiB", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(n))
	buf := make([]byte, 32<<10)
	for i := range buf {
		buf[i] = byte(i % 251)
	}
	for n > 0 {
		k := min(n, len(buf))
		if _, err := w.Write(buf[:k]); err != nil {
			return
		}
		n -= k
	}
}

func (a *app) handleEnv(w http.ResponseWriter, _ *http.Request) {
	env := map[string]string{}
	for _, kv := range a.environ() {
		k, v, _ := strings.Cut(kv, "=")
		if isSecret(k) {
			v = masked
		}
		env[k] = v
	}
	writeJSON(w, http.StatusOK, env)
}

// isSecret reports whether a variable's value must not be shown.
func isSecret(name string) bool {
	name = strings.ToUpper(name)
	for _, s := range []string{"TOKEN", "SECRET", "PASSWORD", "KEY"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// callResult is the answer of /call.
type callResult struct {
	URL                    string `json:"url"`
	Status                 int    `json:"status"`
	Body                   string `json:"body"`
	TLSHandshake           bool   `json:"tlsHandshake"`
	PeerCertificateSubject string `json:"peerCertificateSubject"`
	PeerCertificateIssuer  string `json:"peerCertificateIssuer"`
	Error                  string `json:"error"`
}

// handleCall answers 200 when the call got a response (whatever its
// status), 400 for a bad url and 502 when the call failed.
func (a *app) handleCall(w http.ResponseWriter, r *http.Request) {
	res := callResult{URL: r.URL.Query().Get("url")}
	u, err := url.Parse(res.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		res.Error = fmt.Sprintf("url %q is not an http or https URL: pass ?url=https://host:port/path", res.URL)
		writeJSON(w, http.StatusBadRequest, res)
		return
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil // The point is to prove a direct path.
	transport.DisableKeepAlives = true
	transport.TLSClientConfig = &tls.Config{
		InsecureSkipVerify: r.URL.Query().Get("insecure") == "1", //nolint:gosec // asked for explicitly.
	}
	client := &http.Client{Timeout: callTimeout, Transport: transport}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, res.URL, nil)
	if err != nil {
		res.Error = err.Error()
		writeJSON(w, http.StatusBadRequest, res)
		return
	}
	resp, err := client.Do(req)
	if err != nil {
		res.Error = err.Error()
		writeJSON(w, http.StatusBadGateway, res)
		return
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	if cs := resp.TLS; cs != nil {
		res.TLSHandshake = cs.HandshakeComplete
		if len(cs.PeerCertificates) > 0 {
			res.PeerCertificateSubject = cs.PeerCertificates[0].Subject.String()
			res.PeerCertificateIssuer = cs.PeerCertificates[0].Issuer.String()
		}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	res.Body = string(body)
	if err != nil {
		res.Error = fmt.Sprintf("reading the response body: %v", err)
		writeJSON(w, http.StatusBadGateway, res)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// kubeResult is the answer of /kube.
type kubeResult struct {
	ServerVersion string   `json:"serverVersion"`
	Namespace     string   `json:"namespace"`
	Pods          []string `json:"pods"`
	Error         string   `json:"error"`
}

// handleKube answers 200 when the API server answered both calls, and 502
// otherwise.
func (a *app) handleKube(w http.ResponseWriter, r *http.Request) {
	res := kubeResult{Pods: []string{}}
	if err := a.kube(r.Context(), &res); err != nil {
		res.Error = err.Error()
		writeJSON(w, http.StatusBadGateway, res)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (a *app) kube(ctx context.Context, res *kubeResult) error {
	cfg, err := a.kubeConfig()
	if err != nil {
		return fmt.Errorf("loading in-cluster config (is a service account token mounted?): %w", err)
	}
	cfg.Timeout = callTimeout
	ns, err := os.ReadFile(a.namespaceFile)
	if err != nil {
		return fmt.Errorf("reading the pod's namespace: %w", err)
	}
	res.Namespace = strings.TrimSpace(string(ns))
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("getting the server version: %w", err)
	}
	res.ServerVersion = v.GitVersion
	pods, err := cs.CoreV1().Pods(res.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing pods in namespace %q: %w", res.Namespace, err)
	}
	for _, p := range pods.Items {
		res.Pods = append(res.Pods, p.Name)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // A failed write means the client left: nobody to tell.
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// logRequests logs one line per request: method, URI, status, duration and
// the client's address.
func logRequests(logger *log.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		logger.Printf("%s %s %d %s %s", r.Method, r.URL.RequestURI(), rec.status, time.Since(start).Round(time.Microsecond), r.RemoteAddr)
	})
}
