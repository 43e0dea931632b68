package envtest

import (
	"net/http"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// CountRequests returns a copy of cfg whose clients count in the returned
// counter the requests that match, as they send them: what a controller
// asks of the API server, for a test to assert on.
func CountRequests(cfg *rest.Config, match func(*http.Request) bool) (*rest.Config, *atomic.Int32) {
	var n atomic.Int32
	counted := rest.CopyConfig(cfg)
	counted.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if match(req) {
				n.Add(1)
			}
			return rt.RoundTrip(req)
		})
	})
	return counted, &n
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
