package peering

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxPeerText bounds a message from the other cluster once cleaned.
const MaxPeerText = 1024

// CleanText makes text the other cluster wrote (a status message, an
// error, an event) safe to keep in this cluster's objects and to print on
// a terminal: control characters, escape sequences and bidirectional
// overrides become spaces, invalid UTF-8 is replaced, runs of spaces are
// collapsed and it is cut at MaxPeerText bytes. The other cluster is not
// under this one's control: its text could otherwise rewrite the screen of
// whoever runs kubectl describe or kubectl offload status.
func CleanText(s string) string {
	if isClean(s) {
		return s
	}
	var b strings.Builder
	space := false
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if unicode.IsControl(r) || isFormatting(r) || r == '\t' {
			r = ' '
		}
		if r == ' ' {
			if space {
				continue
			}
			space = true
		} else {
			space = false
		}
		if b.Len()+utf8.RuneLen(r) > MaxPeerText {
			break
		}
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String())
}

// isClean reports whether CleanText would return s unchanged.
func isClean(s string) bool {
	if len(s) > MaxPeerText || !utf8.ValidString(s) || strings.Contains(s, "  ") || strings.TrimSpace(s) != s {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || isFormatting(r) {
			return false
		}
	}
	return true
}

// isFormatting reports the invisible characters that reorder or hide text:
// bidirectional embeddings, overrides and isolates, and zero-width ones.
func isFormatting(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 || r >= 0x200B && r <= 0x200F || r == 0xFEFF || r == 0x061C
}

var reasonRE = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// CleanReason returns reason when it is a condition reason as the API
// accepts it (CamelCase, at most 1024 characters), else fallback: a reason
// the API refuses would make every status update that carries it fail.
func CleanReason(reason, fallback string) string {
	if len(reason) <= 1024 && reasonRE.MatchString(reason) {
		return reason
	}
	return fallback
}
