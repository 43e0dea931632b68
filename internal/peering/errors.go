package peering

import (
	"encoding/json"
	"errors"
	"net/http"
)

// Error is the one error of the peering protocol. The auth service writes it
// as the JSON body {"reason": Reason, "message": Message} with HTTP status
// Status; the Client returns it, with Status read from the answer. Message is
// shown to the user by the CLI, so it must say what to do next, and never
// contain a token or any other credential.
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
		e = &Error{Reason: ReasonInternal, Message: "the auth service failed; see the logs of offload-auth", Status: http.StatusInternalServerError}
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

// readError decodes an error answer: its body when it is an Error, and an
// UnexpectedResponse Error otherwise.
func readError(resp *http.Response, body []byte) *Error {
	e := &Error{Status: resp.StatusCode}
	if json.Unmarshal(body, e) != nil || CleanReason(e.Reason, "") == "" {
		e.Reason = ReasonUnexpectedResponse
		e.Message = "the auth service answered " + CleanText(resp.Status) + " without a peering error: is --auth-url the provider's auth service?"
	}
	// The provider wrote it, and it reaches a condition and the terminal.
	e.Message = CleanText(e.Message)
	return e
}
