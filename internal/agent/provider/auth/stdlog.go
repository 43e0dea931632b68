package auth

import (
	"log"
	"strings"

	"k8s.io/klog/v2"
)

// newStdLogger returns a standard library logger, for http.Server.ErrorLog,
// that writes to logger. TLS handshake errors from scanners and load
// balancer probes end up there, so callers pass a verbose logger.
func newStdLogger(logger klog.Logger) *log.Logger {
	return log.New(logWriter{logger}, "", 0)
}

type logWriter struct{ log klog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
