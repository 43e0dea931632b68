package peer

import (
	"regexp"
	"strings"
	"testing"
)

// secretLike finds runs of token characters long enough to be a secret, or
// longer. No error message has such a run of its own.
var secretLike = regexp.MustCompile(`[a-z0-9]{16,}`)

// FuzzParsePeerCommand checks that ParsePeerCommand never panics, that what
// it accepts prints back as a command that parses to the same arguments, and
// that its errors never contain a secret-like part of the line.
func FuzzParsePeerCommand(f *testing.F) {
	valid := testArgs.Command()
	for _, s := range []string{
		valid,
		strings.TrimPrefix(valid, "kubectl offload "),
		strings.ReplaceAll(valid, " --", " \\\n  --"),
		"peer out-of-band --auth-url=" + testURL + " --cluster-id=" + testID + " --auth-token=" + testToken + " --ca-cert-hash=" + testHash + " provider",
		"kubectl offload peer out-of-band 'p' --auth-url \"https://h.example/a'b\" --cluster-id " + testID + " --auth-token " + testToken + " --ca-cert-hash " + testHash,
		strings.Replace(valid, testToken, "'"+testToken, 1),
		strings.Replace(valid, testID, testToken, 1),
		strings.Replace(valid, " provider ", " "+testToken+" ", 1),
		valid + " --" + testToken,
		valid + ` \`,
		"", "peer", "kubectl offload peer out-of-band", `"\`, `'`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args, err := ParsePeerCommand(line)
		if err != nil {
			for _, run := range secretLike.FindAllString(line, -1) {
				if strings.Contains(err.Error(), run) {
					t.Fatalf("the error contains part of the line: %v", err)
				}
			}
			return
		}
		if err := ValidatePeerArgs(args); err != nil {
			t.Fatalf("ParsePeerCommand accepted arguments that ValidatePeerArgs refuses: %v", err)
		}
		canonical := args.Command()
		again, err := ParsePeerCommand(canonical)
		if err != nil || again != args {
			t.Fatalf("the canonical form %q parses to %+v, %v; want %+v", canonical, again, err, args)
		}
		if again.Command() != canonical {
			t.Fatalf("the canonical form is not stable: %q then %q", canonical, again.Command())
		}
	})
}
