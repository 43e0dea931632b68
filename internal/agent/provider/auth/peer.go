package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

const (
	// MinCredentialExpiration is the shortest credential lifetime the API
	// server accepts in a TokenRequest.
	MinCredentialExpiration = 10 * time.Minute
	// DefaultCredentialExpiration is the chart's default credential lifetime.
	DefaultCredentialExpiration = 24 * time.Hour
	// maxRequestBytes bounds the body of a request; real ones are far smaller.
	maxRequestBytes = 16 << 10
	// requestTimeout bounds the API calls of one request.
	requestTimeout = 30 * time.Second
)

// PeeringOptions configure the peering endpoints.
type PeeringOptions struct {
	// Namespace is the agent's namespace: it holds the identity ConfigMap
	// and the peering token ConfigMaps.
	Namespace string
	// APIServerURL is the API server URL advertised to consumers.
	APIServerURL string
	// APIServerCA is the PEM CA bundle of the API server; when empty it is
	// read from ConfigMap kube-root-ca.crt in Namespace.
	APIServerCA []byte
	// CredentialExpiration is the lifetime of the tokens consumers get.
	CredentialExpiration time.Duration
	// Logger receives the endpoints' logs; never a token.
	Logger klog.Logger
	// KubernetesVersion returns this cluster's Kubernetes version, asked at
	// each peering (an API server upgrades under a running agent), to
	// refuse a consumer outside the version policy
	// (peering.CheckKubernetesPair). Nil checks the consumer's alone.
	KubernetesVersion func(context.Context) (string, error)
}

// Validate checks the options.
func (o PeeringOptions) Validate() error {
	if o.Namespace == "" {
		return errors.New("the namespace is not set: pass --namespace or set POD_NAMESPACE")
	}
	if o.APIServerURL == "" {
		return errors.New("the API server URL is not known: pass --api-server-url")
	}
	if o.CredentialExpiration < MinCredentialExpiration {
		return fmt.Errorf("--credential-expiration %s is too short: at least %s", o.CredentialExpiration, MinCredentialExpiration)
	}
	return nil
}

// Peering serves the peering protocol: POST /v1/peer exchanges a peering
// token for tenant credentials, /v1/refresh rotates them and /v1/unpeer
// removes the tenant.
type Peering struct {
	client client.Client
	opts   PeeringOptions
	now    func() time.Time
}

// NewPeering returns the peering endpoints, which act with c.
func NewPeering(c client.Client, o PeeringOptions) (*Peering, error) {
	if c == nil {
		return nil, errors.New("the peering endpoints need a Kubernetes client")
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &Peering{client: c, opts: o, now: time.Now}, nil
}

// Register adds the endpoints to s.
func (p *Peering) Register(s *Server) {
	s.Handle(peering.PeerPath, allowMethods(p.handlePeer, http.MethodPost))
	s.Handle(peering.RefreshPath, allowMethods(p.handleRefresh, http.MethodPost))
	s.Handle(peering.UnpeerPath, allowMethods(p.handleUnpeer, http.MethodPost))
}

func (p *Peering) handlePeer(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	var req peering.PeerRequest
	if err := readRequest(w, r, &req, "PeerRequest"); err != nil {
		peering.WriteError(w, err)
		return
	}
	log := p.opts.Logger.WithValues("consumer", req.ClusterName, "consumerID", req.ClusterID)
	resp, err := p.peer(ctx, req, &log)
	if err != nil {
		p.fail(w, log, "Refused a peering request", err)
		return
	}
	log.Info("Peered", "tenantNamespace", resp.Credentials.TenantNamespace, "expires", resp.Credentials.ExpirationTimestamp, "source", sourceKey(r.RemoteAddr))
	writeJSON(w, resp)
}

// peer checks the request and its token, spends a single-use token and
// provisions the tenant. It adds the token ID to log once it parses.
func (p *Peering) peer(ctx context.Context, req peering.PeerRequest, log *klog.Logger) (*peering.PeerResponse, error) {
	self, err := peering.ReadIdentity(ctx, p.client, p.opts.Namespace)
	if err != nil {
		return nil, err
	}
	if req.ProviderClusterID != self.ID {
		return nil, &peering.Error{
			Reason: peering.ReasonWrongCluster,
			// Nothing about this cluster: the caller is not authenticated yet.
			Message: fmt.Sprintf("this auth service does not belong to cluster %s: check --cluster-id against the command kubectl offload peer generate printed",
				req.ProviderClusterID),
			Status: http.StatusForbidden,
		}
	}
	if err := validateConsumer(req.ClusterID, req.ClusterName, self.ID); err != nil {
		return nil, err
	}
	tok, err := peering.ParseToken(req.Token)
	if err != nil {
		return nil, tokenError(peering.ReasonInvalidToken, err.Error())
	}
	*log = log.WithValues("tokenID", tok.ID)
	secret, stored, err := p.checkToken(ctx, tok, *log)
	if err != nil {
		return nil, err
	}
	// Every refusal comes before the token is spent.
	if stored.Consumer != "" && stored.Consumer != req.ClusterName {
		return nil, &peering.Error{Reason: peering.ReasonTokenForAnotherConsumer, Status: http.StatusForbidden, Message: fmt.Sprintf(
			"this peering token is for consumer %s, not %s: ask the provider's admin for a token for this cluster (kubectl offload peer generate --consumer %s)",
			stored.Consumer, req.ClusterName, req.ClusterName)}
	}
	own, err := p.kubernetesVersion(ctx)
	if err != nil {
		return nil, err
	}
	if refused := peering.CheckKubernetesPair(req.KubernetesVersion, own); refused != nil {
		log.Info("Refused a consumer outside the Kubernetes version policy", "consumerKubernetes", peering.CleanText(req.KubernetesVersion), "kubernetes", own)
		return nil, refused
	}
	if err := p.checkTenantFree(ctx, req.ClusterID, req.ClusterName, stored.Consumer == req.ClusterName); err != nil {
		return nil, err
	}
	release, err := p.claimClusterID(ctx, req.ClusterID, req.ClusterName)
	if err != nil {
		return nil, err
	}
	peered := false
	defer func() {
		if !peered {
			release()
		}
	}()
	if !stored.Reusable {
		if err := p.spend(ctx, secret, req.ClusterID); err != nil {
			return nil, err
		}
	}
	t, undo, err := p.provision(ctx, req.ClusterID, req.ClusterName, stored.ID, *log)
	if err != nil {
		return nil, err
	}
	if err := p.ownClaim(ctx, t); err != nil {
		undo()
		return nil, err
	}
	resp, err := p.issue(ctx, t, self, true)
	if err != nil {
		undo()
		return nil, err
	}
	peered = true
	resp.KubernetesVersion = own
	return resp, nil
}

// kubernetesVersion is this cluster's Kubernetes version, or "" when
// PeeringOptions.KubernetesVersion is not set.
func (p *Peering) kubernetesVersion(ctx context.Context) (string, error) {
	if p.opts.KubernetesVersion == nil {
		return "", nil
	}
	v, err := p.opts.KubernetesVersion(ctx)
	if err != nil {
		return "", fmt.Errorf("asking the API server for its Kubernetes version: %w", err)
	}
	return v, nil
}

// invalidToken is the one answer for a token that does not exist and one
// whose secret is wrong, so the service is no oracle for token IDs.
const invalidTokenMessage = "the peering token is not valid: check --auth-token, or generate a new one on the provider with `kubectl offload peer generate`"

func tokenError(reason, message string) error {
	return &peering.Error{Reason: reason, Message: message, Status: http.StatusUnauthorized}
}

// checkToken finds tok's ConfigMap and checks that its secret matches, in
// constant time, then that it has not expired nor been spent.
func (p *Peering) checkToken(ctx context.Context, tok peering.Token, log klog.Logger) (*corev1.ConfigMap, peering.StoredToken, error) {
	var s corev1.ConfigMap
	err := p.client.Get(ctx, client.ObjectKey{Namespace: p.opts.Namespace, Name: peering.TokenConfigMapName(tok.ID)}, &s)
	if apierrors.IsNotFound(err) {
		return nil, peering.StoredToken{}, tokenError(peering.ReasonInvalidToken, invalidTokenMessage)
	}
	if err != nil {
		return nil, peering.StoredToken{}, fmt.Errorf("reading the token ConfigMap: %w", err)
	}
	stored, err := peering.ReadTokenConfigMap(&s)
	if err != nil {
		log.Info("Ignoring a broken peering token", "configMap", klog.KObj(&s), "err", err.Error())
		return nil, peering.StoredToken{}, tokenError(peering.ReasonInvalidToken, invalidTokenMessage)
	}
	if !stored.Matches(tok) {
		return nil, peering.StoredToken{}, tokenError(peering.ReasonInvalidToken, invalidTokenMessage)
	}
	if stored.Expired(p.now()) {
		return nil, peering.StoredToken{}, tokenError(peering.ReasonTokenExpired,
			"token expired: generate a new one on the provider with `kubectl offload peer generate`")
	}
	if stored.Spent() {
		return nil, peering.StoredToken{}, tokenUsed()
	}
	return &s, stored, nil
}

func tokenUsed() error {
	return tokenError(peering.ReasonTokenUsed,
		"the peering token was already used and is single-use: generate a new one on the provider with `kubectl offload peer generate`")
}

// spend marks a single-use token used. The update carries the ConfigMap's
// resourceVersion, so of concurrent requests exactly one wins; the others
// get a Conflict and are refused. offload-auth-scope lets the auth service
// change nothing else of a token.
func (p *Peering) spend(ctx context.Context, s *corev1.ConfigMap, consumerID string) error {
	if s.Data == nil {
		s.Data = map[string]string{}
	}
	s.Data[peering.UsedAtKey] = p.now().UTC().Format(time.RFC3339)
	s.Data[peering.UsedByKey] = consumerID
	err := p.client.Update(ctx, s)
	if apierrors.IsConflict(err) {
		return tokenUsed()
	}
	if err != nil {
		return fmt.Errorf("marking the token used: %w", err)
	}
	return nil
}

// fail logs err and writes it. Refusals (an *peering.Error) are logged as
// information, failures of the service as errors; neither carries a token.
func (p *Peering) fail(w http.ResponseWriter, log klog.Logger, msg string, err error) {
	var e *peering.Error
	if errors.As(err, &e) {
		log.Info(msg, "reason", e.Reason, "status", e.Status)
	} else {
		log.Error(err, msg)
	}
	peering.WriteError(w, err)
}

// readRequest reads a JSON body of at most maxRequestBytes into v. Its
// error never quotes the body.
func readRequest(w http.ResponseWriter, r *http.Request, v any, what string) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err := dec.Decode(v); err != nil {
		msg := fmt.Sprintf("the request body is not a JSON %s: upgrade kubectl-offload on the consumer", what)
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			msg = fmt.Sprintf("the request body is larger than %d bytes", maxRequestBytes)
		}
		return &peering.Error{Reason: peering.ReasonMalformedRequest, Message: msg, Status: http.StatusBadRequest}
	}
	return nil
}

func writeJSON(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		peering.WriteError(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(body, '\n'))
}
