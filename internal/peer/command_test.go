package peer

import (
	"errors"
	"strings"
	"testing"
)

const (
	testToken  = "abc123.0123456789abcdef"
	testSecret = "0123456789abcdef"
	testID     = "123e4567-e89b-12d3-a456-426614174000"
	testHash   = "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	testURL    = "https://203.0.113.7:31443"
)

var testArgs = PeerCommandArgs{Name: "provider", AuthURL: testURL, ClusterID: testID, AuthToken: testToken, CACertHash: testHash}

func TestParsePeerCommand(t *testing.T) {
	canonical := testArgs.Command()
	tests := []struct {
		name string
		line string
		want PeerCommandArgs
	}{
		{name: "the printed command parses back", line: canonical, want: testArgs},
		{name: "without kubectl offload", line: strings.TrimPrefix(canonical, "kubectl offload "), want: testArgs},
		{name: "as the kubectl-offload binary", line: strings.Replace(canonical, "kubectl offload", "kubectl-offload", 1), want: testArgs},
		{
			name: "flags in another order, with =, before the name",
			line: "kubectl offload peer out-of-band --ca-cert-hash=" + testHash + " --auth-token " + testToken + " provider --cluster-id=" + testID + " --auth-url " + testURL,
			want: testArgs,
		},
		{
			name: "quoted and continued over lines",
			line: "kubectl offload peer out-of-band 'provider' \\\n  --auth-url \"" + testURL + "\" \\\n  --cluster-id " + testID + " --auth-token '" + testToken + "' --ca-cert-hash " + testHash + "\n",
			want: testArgs,
		},
		{
			name: "a URL with a path and a quote in it",
			line: PeerCommandArgs{Name: "p", AuthURL: "https://h.example/o'ffload", ClusterID: testID, AuthToken: testToken, CACertHash: testHash}.Command(),
			want: PeerCommandArgs{Name: "p", AuthURL: "https://h.example/o'ffload", ClusterID: testID, AuthToken: testToken, CACertHash: testHash},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePeerCommand(tt.line)
			if err != nil {
				t.Fatalf("ParsePeerCommand: %v", err)
			}
			if got != tt.want {
				t.Errorf("ParsePeerCommand = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParsePeerCommandRefusesBadLines(t *testing.T) {
	valid := testArgs.Command()
	replace := func(old, new string) string { return strings.Replace(valid, old, new, 1) }
	tests := []struct {
		name      string
		line      string
		wantField string // "" for a malformed line
	}{
		{name: "an empty line", line: ""},
		{name: "another command", line: "kubectl offload peer generate"},
		{name: "an unknown flag", line: valid + " --insecure"},
		{name: "a single-dash flag", line: valid + " -k"},
		{name: "a token pasted as a flag", line: valid + " --" + testToken},
		{name: "two names", line: valid + " other"},
		{name: "an open quote", line: valid + " '" + testToken},
		{name: "a trailing backslash", line: valid + ` \`},
		{name: "no name", line: replace(" provider ", " "), wantField: "NAME"},
		{name: "an upper-case name", line: replace(" provider ", " Provider "), wantField: "NAME"},
		{name: "an http URL", line: replace("https://", "http://"), wantField: "--auth-url"},
		{name: "a URL with user info", line: replace("https://", "https://u:p@"), wantField: "--auth-url"},
		{name: "a URL with a query", line: replace(":31443", ":31443/?x=1"), wantField: "--auth-url"},
		{name: "a missing URL", line: replace("--auth-url "+testURL, ""), wantField: "--auth-url"},
		{name: "a cluster ID that is not a UUID", line: replace(testID, "provider-1"), wantField: "--cluster-id"},
		{name: "an upper-case cluster ID", line: replace(testID, strings.ToUpper(testID)), wantField: "--cluster-id"},
		{name: "a malformed token", line: replace(testToken, testSecret), wantField: "--auth-token"},
		{name: "a token with blanks", line: replace(testToken, "' "+testToken+" '"), wantField: "--auth-token"},
		{name: "a token in the cluster ID", line: replace(testID, testToken), wantField: "--cluster-id"},
		{name: "a token as the name", line: replace(" provider ", " "+testToken+" "), wantField: "NAME"},
		{name: "a hash without sha256:", line: replace("sha256:", ""), wantField: "--ca-cert-hash"},
		{name: "a short hash", line: replace(testHash, testHash[:70]), wantField: "--ca-cert-hash"},
		{name: "an upper-case hash", line: replace(testHash, strings.ToUpper(testHash)), wantField: "--ca-cert-hash"},
		{name: "a flag given twice", line: valid + " --auth-token " + testToken, wantField: "--auth-token"},
		{name: "a flag without a value", line: replace(" --ca-cert-hash "+testHash, "") + " --ca-cert-hash", wantField: "--ca-cert-hash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePeerCommand(tt.line)
			if err == nil {
				t.Fatal("ParsePeerCommand accepted the line")
			}
			var fe *FieldError
			switch {
			case tt.wantField == "" && !errors.Is(err, ErrMalformedPeerCommand):
				t.Errorf("error %v, want ErrMalformedPeerCommand", err)
			case tt.wantField != "" && (!errors.As(err, &fe) || fe.Field != tt.wantField):
				t.Errorf("error %v, want a FieldError for %s", err, tt.wantField)
			}
			if strings.Contains(err.Error(), testSecret) {
				t.Errorf("the error contains the token secret: %v", err)
			}
		})
	}
}

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
