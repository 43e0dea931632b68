package names

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// TwinNamespace is the DefaultName of the provider namespace that mirrors
// consumer namespace ns: NS-<consumer>-<hash6>, where hash6 is the start of
// the SHA-256 of the consumer's cluster ID and ns, so two consumers with the
// same name never share one. Long names are cut to fit the 63 characters of
// a namespace name, keeping the hash.
func TwinNamespace(ns, consumerName, consumerID string) string {
	sum := sha256.Sum256([]byte(consumerID + "/" + ns))
	suffix := "-" + hex.EncodeToString(sum[:])[:6]
	prefix := ns + "-" + consumerName
	if limit := 63 - len(suffix); len(prefix) > limit {
		prefix = strings.TrimRight(prefix[:limit], "-")
	}
	return prefix + suffix
}
