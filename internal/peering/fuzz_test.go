package peering

import (
	"regexp"
	"strings"
	"testing"
)

// secretLike finds runs of token characters long enough to be a secret, or
// longer. No error message has such a run of its own.
var secretLike = regexp.MustCompile(`[a-z0-9]{16,}`)

// FuzzParseToken checks that ParseToken never panics, that what it accepts
// prints back in canonical form, and that its errors never contain the input.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{
		"abc123.0123456789abcdef", " " + "abc123.0123456789abcdef" + "\n", "", ".", "abc123.", ".0123456789abcdef",
		"ABC123.0123456789ABCDEF", "abc123.01234567.9abcdef", "abc123..0123456789abcdef",
		"abc123.0123456789abcdéf", "abc123.0123456789abcde\x00", "abc123\u200b.0123456789abcdef",
		strings.Repeat("a", 1000),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			for _, run := range secretLike.FindAllString(s, -1) {
				if strings.Contains(err.Error(), run) {
					t.Fatalf("the error contains part of the input: %v", err)
				}
			}
			return
		}
		if tok.String() != strings.TrimSpace(s) {
			t.Fatalf("ParseToken(%q) prints back as %q", s, tok.String())
		}
		again, err := ParseToken(tok.String())
		if err != nil || again != tok {
			t.Fatalf("the canonical form %q does not parse back: %+v, %v", tok.String(), again, err)
		}
	})
}
