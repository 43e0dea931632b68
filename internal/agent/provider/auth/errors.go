package auth

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// notFound answers every request with a NotFound Error.
func notFound(w http.ResponseWriter, r *http.Request) {
	peering.WriteError(w, &peering.Error{
		Reason:  peering.ReasonNotFound,
		Message: fmt.Sprintf("the auth service has no endpoint %s", r.URL.Path),
		Status:  http.StatusNotFound,
	})
}

// allowMethods wraps h so that requests with any other method get a
// MethodNotAllowed Error.
func allowMethods(h http.HandlerFunc, methods ...string) http.Handler {
	allowed := strings.Join(methods, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, m := range methods {
			if r.Method == m {
				h(w, r)
				return
			}
		}
		w.Header().Set("Allow", allowed)
		peering.WriteError(w, &peering.Error{
			Reason:  peering.ReasonMethodNotAllowed,
			Message: fmt.Sprintf("%s does not accept %s; use %s", r.URL.Path, r.Method, allowed),
			Status:  http.StatusMethodNotAllowed,
		})
	})
}
