package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Reasons of the errors the auth service returns. A Reason is the
// machine-readable half of an Error, so it is part of the peering protocol:
// keep the values stable.
const (
	// ReasonNotFound means the request's path is not an endpoint.
	ReasonNotFound = "NotFound"
	// ReasonMethodNotAllowed means the endpoint exists but not for the request's method.
	ReasonMethodNotAllowed = "MethodNotAllowed"
	// ReasonInternalError means the service failed; the message says nothing more.
	ReasonInternalError = "InternalError"
)

// Error is an error the auth service returns to its caller. It is written
// as the JSON body {"reason": Reason, "message": Message} with HTTP status
// Status. Message is shown to the user by the CLI, so it must say what to do
// next, and never contain a token or any other credential.
type Error struct {
	// Reason is a CamelCase, machine-readable cause, one of the Reason
	// constants.
	Reason string `json:"reason"`
	// Message is a human-readable explanation.
	Message string `json:"message"`
	// Status is the HTTP status code; it is not part of the body.
	Status int `json:"-"`
}

// Error returns the reason and the message.
func (e *Error) Error() string {
	return e.Reason + ": " + e.Message
}

// WriteError writes err as an Error response. When err is or wraps an
// *Error that one is written; any other error becomes a 500 InternalError
// whose message does not repeat err, so internal details and credentials
// never reach the caller. Log such errors before calling WriteError.
func WriteError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Reason: ReasonInternalError, Message: "the auth service failed; see the logs of offload-auth", Status: http.StatusInternalServerError}
	}
	status := e.Status
	if status < 400 || status > 599 {
		status = http.StatusInternalServerError
	}
	body, _ := json.Marshal(e) // two strings always marshal
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// notFound answers every request with a NotFound Error.
func notFound(w http.ResponseWriter, r *http.Request) {
	WriteError(w, &Error{
		Reason:  ReasonNotFound,
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
		WriteError(w, &Error{
			Reason:  ReasonMethodNotAllowed,
			Message: fmt.Sprintf("%s does not accept %s; use %s", r.URL.Path, r.Method, allowed),
			Status:  http.StatusMethodNotAllowed,
		})
	})
}
