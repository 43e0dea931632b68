package kubeletapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// request is what a kubelet API path names: the pod it is about, or, for
// a node-level path, the subresource of nodes it needs.
type request struct {
	namespace, pod string
	// nodeSubresource is "stats" or "metrics" for the node-level paths,
	// as the kubelet authorizes them; "" for pod paths (nodes/proxy).
	nodeSubresource string
}

// parsePath returns the pod a kubelet API path is about, for the paths this
// server serves: /containerLogs/{ns}/{pod}/{container},
// /exec/{ns}/{pod}/{container}, /attach/{ns}/{pod}/{container},
// /portForward/{ns}/{pod} and /run/{ns}/{pod}[/{uid}]/{container}, and
// the node-level /stats/summary and /metrics/resource. It returns false
// for any other path.
func parsePath(path string) (request, bool) {
	switch path {
	case statsSummaryPath:
		return request{nodeSubresource: "stats"}, true
	case metricsResourcePath:
		return request{nodeSubresource: "metrics"}, true
	}
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for _, p := range parts {
		if p == "" {
			return request{}, false
		}
	}
	var ok bool
	switch parts[0] {
	case "containerLogs", "exec", "attach":
		ok = len(parts) == 4
	case "portForward":
		ok = len(parts) == 3
	case "run":
		ok = len(parts) == 4 || len(parts) == 5
	}
	if !ok {
		return request{}, false
	}
	return request{namespace: parts[1], pod: parts[2]}, true
}

// verbFor maps an HTTP method to the authorization verb, as the kubelet
// does; it returns "" for methods the kubelet API does not use.
func verbFor(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return ""
}

// targetKey is the context key of the Target a request was authorized for.
type targetKey struct{}

// resolved is a Target with the consumer pod it was resolved for.
type resolved struct {
	request
	target Target
}

// ServeHTTP authenticates the request like a kubelet, resolves the pod it is
// about, authorizes nodes/proxy on that pod's virtual node and hands the
// request to the virtual-kubelet handlers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	resp, ok, err := s.authn.AuthenticateRequest(r)
	if err != nil || !ok {
		// The error can name the reason (an expired certificate, a rejected
		// token); it never holds the credentials themselves.
		s.log.V(2).Info("Unauthenticated kubelet API request", "path", r.URL.Path, "remote", r.RemoteAddr, "reason", errString(err))
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	// The handlers never need the credentials; drop them like the API server does.
	r.Header.Del("Authorization")
	user := resp.User

	req, ok := parsePath(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	verb := verbFor(r.Method)
	if verb == "" {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	node, _ := ctx.Value(nodeKey{}).(string)
	if req.nodeSubresource != "" {
		// The port the request came in on names the node.
		if s.authorized(w, r, user, verb, node, req.nodeSubresource) {
			s.handler.ServeHTTP(w, r)
		}
		return
	}
	t, err := s.opts.Resolver.Resolve(ctx, req.namespace, req.pod)
	if err == nil && t.NodeName != node {
		// A pod of another virtual node is not this node's to serve.
		err = fmt.Errorf("pod %s/%s runs on node %s, not %s: %w", req.namespace, req.pod, t.NodeName, node, ErrUnknownPod)
	}
	switch {
	case errors.Is(err, ErrUnknownPod):
		// Whether a pod exists is for those who may proxy to nodes only:
		// with no pod there is no node, so the caller needs nodes/proxy on
		// every node to learn that.
		if s.authorized(w, r, user, verb, "", "proxy") {
			http.Error(w, fmt.Sprintf("pod %s/%s not found", req.namespace, req.pod), http.StatusNotFound)
		}
		return
	case err != nil:
		s.log.Error(err, "Resolving a pod for the kubelet API", "namespace", req.namespace, "pod", req.pod)
		http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		return
	}
	if !s.authorized(w, r, user, verb, t.NodeName, "proxy") {
		return
	}
	ctx = context.WithValue(ctx, targetKey{}, resolved{request: req, target: t})
	s.handler.ServeHTTP(w, r.WithContext(ctx))
}

// authorized asks whether user may verb nodes/SUBRESOURCE on node ("" for
// every node), and answers the request itself when not.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request, user user.Info, verb, node, subresource string) bool {
	attrs := authorizer.AttributesRecord{
		User:            user,
		Verb:            verb,
		APIVersion:      "v1",
		Resource:        "nodes",
		Subresource:     subresource,
		Name:            node,
		ResourceRequest: true,
		Path:            r.URL.Path,
	}
	decision, reason, err := s.authz.Authorize(r.Context(), attrs)
	if err != nil {
		s.log.Error(err, "Authorizing a kubelet API request", "user", user.GetName(), "verb", verb, "node", node)
		http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		return false
	}
	if decision != authorizer.DecisionAllow {
		s.log.V(2).Info("Forbidden kubelet API request", "user", user.GetName(), "verb", verb, "node", node, "subresource", subresource, "reason", reason)
		// The same answer whether the pod exists or not, and without its node.
		http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource=%s)", user.GetName(), verb, subresource), http.StatusForbidden)
		return false
	}
	return true
}

// errString returns the message of err, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
