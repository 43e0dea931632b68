package peering

import "time"

// The auth service endpoints.
const (
	// PeerPath exchanges a peering token for tenant credentials.
	PeerPath = "/v1/peer"
	// RefreshPath rotates tenant credentials before they expire.
	RefreshPath = "/v1/refresh"
	// UnpeerPath asks the provider to tear the tenant down.
	UnpeerPath = "/v1/unpeer"
)

// PeerRequest is the body of POST /v1/peer, sent by the consumer's agent.
type PeerRequest struct {
	// Token is the peering token, id.secret.
	Token string `json:"token"`
	// ClusterID and ClusterName identify the consumer.
	ClusterID   string `json:"clusterID"`
	ClusterName string `json:"clusterName"`
	// ProviderClusterID is the cluster ID the consumer expects to reach
	// (--cluster-id); the provider refuses when it is not its own.
	ProviderClusterID string `json:"providerClusterID"`
	// KubernetesVersion is the consumer's Kubernetes version; the provider
	// refuses a pair outside the policy (CheckKubernetesPair). Agents
	// before it was added send none.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
}

// Credentials are what a consumer gets to act in its tenant namespace.
type Credentials struct {
	// APIServerURL is the provider's API server as it advertises it.
	APIServerURL string `json:"apiServerURL"`
	// CACert is the PEM CA bundle of the provider's API server.
	CACert string `json:"caCert"`
	// Token is a bound ServiceAccount token for the consumer's identity.
	Token string `json:"token"`
	// ExpirationTimestamp is when Token expires.
	ExpirationTimestamp time.Time `json:"expirationTimestamp"`
	// TenantNamespace is the namespace the consumer may act in.
	TenantNamespace string `json:"tenantNamespace"`
}

// PeerResponse is the body of a successful POST /v1/peer or /v1/refresh.
type PeerResponse struct {
	// ClusterID and ClusterName identify the provider.
	ClusterID   string      `json:"clusterID"`
	ClusterName string      `json:"clusterName"`
	Credentials Credentials `json:"credentials"`
	// KubernetesVersion is the provider's Kubernetes version, which the
	// consumer checks against its own policy. Agents before it was added
	// send none.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
}

// RefreshRequest is the body of POST /v1/refresh and POST /v1/unpeer; the
// consumer authenticates with its current bearer token in the Authorization header.
type RefreshRequest struct {
	ClusterID string `json:"clusterID"`
}

// Failure reasons of the auth service, in the JSON error body's "reason".
// A Reason is the machine-readable half of an Error, so it is part of the
// peering protocol: keep the values stable.
const (
	ReasonMalformedRequest = "MalformedRequest"
	ReasonInvalidToken     = "InvalidToken"
	ReasonTokenExpired     = "TokenExpired"
	ReasonTokenUsed        = "TokenUsed"
	ReasonWrongCluster     = "WrongClusterID"
	ReasonUnauthorized     = "Unauthorized"
	// ReasonInternal means the service failed; the message says nothing more.
	ReasonInternal = "InternalError"
	// ReasonTenantConflict means the consumer's name is taken on the
	// provider by another cluster, or its tenant is being removed.
	ReasonTenantConflict = "TenantConflict"
	// ReasonTenantExists means the consumer already has a tenant on the
	// provider, and the token is not one the provider's admin bound to it:
	// a tenant belongs to the cluster that first peered with it.
	ReasonTenantExists = "TenantExists"
	// ReasonTokenForAnotherConsumer means the token is bound to another
	// consumer name (peer generate --consumer).
	ReasonTokenForAnotherConsumer = "TokenForAnotherConsumer"
	// ReasonNotFound means the request's path is not an endpoint.
	ReasonNotFound = "NotFound"
	// ReasonMethodNotAllowed means the endpoint exists but not for the request's method.
	ReasonMethodNotAllowed = "MethodNotAllowed"
	// ReasonTooManyRequests means the caller's address sent too many failed
	// requests, or has too many in flight: wait Retry-After seconds, and
	// check the token.
	ReasonTooManyRequests = "TooManyRequests"
	// ReasonUnsupportedVersion means a cluster of the pair runs a
	// Kubernetes version outside the policy (CheckKubernetesPair).
	ReasonUnsupportedVersion = "UnsupportedKubernetesVersion"
	// ReasonUnexpectedResponse is set by the client, never by the service:
	// the answer was not a peering error at all.
	ReasonUnexpectedResponse = "UnexpectedResponse"
)
