package peer

import (
	"errors"
	"strings"
	"testing"

	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

const (
	testToken  = "abc123.0123456789abcdef"
	testSecret = "0123456789abcdef"
	testID     = "123e4567-e89b-12d3-a456-426614174000"
	testHash   = "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	testURL    = "https://203.0.113.7:31443"
)

var testArgs = PeerCommandArgs{Name: "provider", AuthURL: testURL, ClusterID: testID, AuthToken: testToken, CACertHash: testHash}

func TestValidatePeerArgs(t *testing.T) {
	with := func(f func(*PeerCommandArgs)) PeerCommandArgs {
		a := testArgs
		f(&a)
		return a
	}
	tests := []struct {
		name      string
		args      PeerCommandArgs
		wantField string
	}{
		{name: "complete arguments are valid", args: testArgs},
		{name: "a URL with a path is valid", args: with(func(a *PeerCommandArgs) { a.AuthURL = "https://auth.example.com/offload" })},
		{name: "a URL without a port is valid", args: with(func(a *PeerCommandArgs) { a.AuthURL = "https://auth.example.com" })},
		{name: "an IPv6 URL is valid", args: with(func(a *PeerCommandArgs) { a.AuthURL = "https://[2001:db8::1]:31443" })},
		{name: "a name longer than 63 characters", args: with(func(a *PeerCommandArgs) { a.Name = strings.Repeat("a", 64) }), wantField: "NAME"},
		{name: "a name with a dot", args: with(func(a *PeerCommandArgs) { a.Name = "a.b" }), wantField: "NAME"},
		{name: "a URL without a host", args: with(func(a *PeerCommandArgs) { a.AuthURL = "https://" }), wantField: "--auth-url"},
		{name: "a URL with a fragment", args: with(func(a *PeerCommandArgs) { a.AuthURL = testURL + "#x" }), wantField: "--auth-url"},
		{name: "a relative URL", args: with(func(a *PeerCommandArgs) { a.AuthURL = "203.0.113.7:31443" }), wantField: "--auth-url"},
		{name: "an empty cluster ID", args: with(func(a *PeerCommandArgs) { a.ClusterID = "" }), wantField: "--cluster-id"},
		{name: "a braced cluster ID", args: with(func(a *PeerCommandArgs) { a.ClusterID = "{" + testID + "}" }), wantField: "--cluster-id"},
		{name: "an empty token", args: with(func(a *PeerCommandArgs) { a.AuthToken = "" }), wantField: "--auth-token"},
		{name: "a hash of another algorithm", args: with(func(a *PeerCommandArgs) { a.CACertHash = "sha1:" + testHash[7:47] }), wantField: "--ca-cert-hash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidatePeerArgs(tt.args)
			var fe *FieldError
			switch {
			case tt.wantField == "" && err != nil:
				t.Errorf("ValidatePeerArgs: %v", err)
			case tt.wantField != "" && (!errors.As(err, &fe) || fe.Field != tt.wantField):
				t.Errorf("ValidatePeerArgs = %v, want a FieldError for %s", err, tt.wantField)
			}
		})
	}
}

func TestCommandPrintsOneShellSafeLine(t *testing.T) {
	want := "kubectl offload peer out-of-band provider --auth-url " + testURL + " --cluster-id " + testID +
		" --auth-token " + testToken + " --ca-cert-hash " + testHash
	if got := testArgs.Command(); got != want {
		t.Errorf("Command() =\n%s\nwant\n%s", got, want)
	}
}

// shellArgs reads line as a POSIX shell does and returns the arguments of
// kubectl offload peer out-of-band it passes.
func shellArgs(t *testing.T, line string) PeerCommandArgs {
	t.Helper()
	positional, flags := localcluster.ShellCommand(t, line)
	if len(positional) != 4 || positional[0] != "offload" || positional[1] != "peer" || positional[2] != "out-of-band" || len(flags) != len(peerCommandFlags) {
		t.Fatalf("the shell reads %q as kubectl %v %v, want kubectl offload peer out-of-band NAME and the %d flags", line, positional, flags, len(peerCommandFlags))
	}
	return PeerCommandArgs{Name: positional[3], AuthURL: flags[AuthURLFlag], ClusterID: flags[ClusterIDFlag], AuthToken: flags[AuthTokenFlag], CACertHash: flags[CACertHashFlag]}
}

func TestCommandReadsBackThroughAShell(t *testing.T) {
	tests := []struct {
		name string
		args PeerCommandArgs
	}{
		{"plain arguments", testArgs},
		{"an auth URL with a quote and a dollar", func() PeerCommandArgs {
			a := testArgs
			a.AuthURL = "https://h.example/a'b$HOME"
			return a
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := ValidatePeerArgs(tt.args); err != nil {
				t.Fatalf("the test's arguments are invalid: %v", err)
			}
			if got := shellArgs(t, tt.args.Command()); got != tt.args {
				t.Errorf("the shell reads %q as %+v, want %+v", tt.args.Command(), got, tt.args)
			}
		})
	}
}
