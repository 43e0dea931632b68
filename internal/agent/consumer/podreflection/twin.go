package podreflection

import (
	"time"
)

// resolveTimeout bounds the reads of the informers' event handlers, which
// get no context.
const resolveTimeout = 10 * time.Second

// TwinNamespace returns the Ready twin namespace of consumer namespace ns
// on the provider; remote pods keep their consumer pod's name there.
func (h *Handler) TwinNamespace(ns string) (string, bool) { return h.opts.TwinNamespace(ns) }
