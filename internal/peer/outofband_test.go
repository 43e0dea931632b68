package peer

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
)

const consumerID = "00000000-0000-4000-8000-000000000001"

// oobFactory is a Factory with only what out-of-band uses.
type oobFactory struct {
	factory.Factory
	c client.Client
}

func (f oobFactory) Namespace() string              { return testNS }
func (f oobFactory) Client() (client.Client, error) { return f.c, nil }

func consumerIdentity() *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.IdentityConfigMap, Namespace: testNS},
		Data: map[string]string{"clusterID": consumerID, "clusterName": "consumer"}}
}

func newFakeClient(objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).
		WithStatusSubresource(&offloadv1alpha1.ForeignCluster{}).Build()
}

// outOfBandArgs returns the command line of a, without "kubectl offload peer".
func outOfBandArgs(a PeerCommandArgs, extra ...string) []string {
	args := []string{"out-of-band", a.Name, "--auth-url", a.AuthURL, "--cluster-id", a.ClusterID, "--auth-token", a.AuthToken, "--ca-cert-hash", a.CACertHash}
	return append(args, extra...)
}

// runPeer runs kubectl offload peer with args against c, polling fast.
func runPeer(t *testing.T, c client.Client, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	cmd := NewCmdPeer(oobFactory{c: c}, streams)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	for _, sub := range cmd.Commands() {
		if sub.Name() == "out-of-band" {
			sub.SilenceUsage = true
		}
	}
	pollInterval = 10 * time.Millisecond
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func assertNothingWritten(t *testing.T, c client.Client) {
	t.Helper()
	var secrets corev1.SecretList
	if err := c.List(context.Background(), &secrets); err != nil {
		t.Fatal(err)
	}
	var fcs offloadv1alpha1.ForeignClusterList
	if err := c.List(context.Background(), &fcs); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 || len(fcs.Items) != 0 {
		t.Errorf("the command wrote %d Secrets and %d ForeignClusters, want none", len(secrets.Items), len(fcs.Items))
	}
}

func TestOutOfBandRefusesBadArgumentsAndWritesNothing(t *testing.T) {
	with := func(f func(*PeerCommandArgs)) PeerCommandArgs {
		a := testArgs
		f(&a)
		return a
	}
	tests := []struct {
		name      string
		args      []string
		wantField string
	}{
		{name: "an http auth URL", args: outOfBandArgs(with(func(a *PeerCommandArgs) { a.AuthURL = "http://203.0.113.7" })), wantField: "--auth-url"},
		{name: "a cluster ID that is not a UUID", args: outOfBandArgs(with(func(a *PeerCommandArgs) { a.ClusterID = "provider" })), wantField: "--cluster-id"},
		{name: "a token without its ID", args: outOfBandArgs(with(func(a *PeerCommandArgs) { a.AuthToken = testSecret })), wantField: "--auth-token"},
		{name: "a token pasted as the hash", args: outOfBandArgs(with(func(a *PeerCommandArgs) { a.CACertHash = testToken })), wantField: "--ca-cert-hash"},
		{name: "an upper-case name", args: outOfBandArgs(with(func(a *PeerCommandArgs) { a.Name = "Provider" })), wantField: "NAME"},
		{name: "no name", args: []string{"out-of-band", "--auth-url", testURL, "--cluster-id", testID, "--auth-token", testToken, "--ca-cert-hash", testHash}, wantField: "NAME"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeClient(consumerIdentity())
			_, _, err := runPeer(t, c, tt.args...)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.wantField {
				t.Fatalf("error %v, want a FieldError for %s", err, tt.wantField)
			}
			if strings.Contains(err.Error(), testSecret) {
				t.Errorf("the error contains the token secret: %v", err)
			}
			assertNothingWritten(t, c)
		})
	}
}

func TestOutOfBandRefusesAClusterWithoutKubectlOffloadOrPeeringWithItself(t *testing.T) {
	tests := []struct {
		name    string
		objects []client.Object
		want    string
	}{
		{name: "kubectl-offload is not installed", want: "not installed"},
		{name: "the cluster ID is this cluster's own", objects: []client.Object{identityCM()}, want: "own ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeClient(tt.objects...)
			_, _, err := runPeer(t, c, outOfBandArgs(testArgs, "--wait=false")...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one that says %q", err, tt.want)
			}
			var secrets corev1.SecretList
			var fcs offloadv1alpha1.ForeignClusterList
			_ = c.List(context.Background(), &secrets)
			_ = c.List(context.Background(), &fcs)
			if len(secrets.Items)+len(fcs.Items) != 0 {
				t.Errorf("the command wrote objects")
			}
		})
	}
}

func TestOutOfBandStoresTheTokenAndTheForeignClusterIdempotently(t *testing.T) {
	c := newFakeClient(consumerIdentity())
	ctx := context.Background()
	var firstRV string
	for run := 1; run <= 2; run++ {
		stdout, _, err := runPeer(t, c, outOfBandArgs(testArgs, "--wait=false")...)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if strings.Contains(stdout, testSecret) {
			t.Errorf("run %d printed the token: %s", run, stdout)
		}
		var s corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: "offload-peer-provider-token"}, &s); err != nil {
			t.Fatalf("run %d: the token Secret: %v", run, err)
		}
		if s.Type != peering.PeerAuthTokenSecretType || string(s.Data[peering.PeerTokenKey]) != testToken || s.Labels[peering.ForeignClusterLabel] != "provider" {
			t.Errorf("run %d: token Secret type %s labels %v, want type %s, the token and the label", run, s.Type, s.Labels, peering.PeerAuthTokenSecretType)
		}
		var fc offloadv1alpha1.ForeignCluster
		if err := c.Get(ctx, client.ObjectKey{Name: "provider"}, &fc); err != nil {
			t.Fatalf("run %d: the ForeignCluster: %v", run, err)
		}
		want := offloadv1alpha1.ForeignClusterSpec{ClusterID: testID, ClusterName: "provider", AuthURL: testURL, CACertHash: testHash,
			OutgoingPeering: offloadv1alpha1.OutgoingPeering{Enabled: true}}
		if fc.Spec != want {
			t.Errorf("run %d: spec %+v, want %+v", run, fc.Spec, want)
		}
		if run == 1 {
			firstRV = fc.ResourceVersion
		} else if fc.ResourceVersion != firstRV {
			t.Errorf("the second run changed the ForeignCluster")
		}
	}
}

func TestOutOfBandWithoutNetworkingAsksForNoTunnel(t *testing.T) {
	c := newFakeClient(consumerIdentity())
	ctx := context.Background()
	for _, tc := range []struct {
		flag     string
		disabled bool
	}{{"--networking=false", true}, {"--networking=true", false}, {"--networking=false", true}} {
		if _, _, err := runPeer(t, c, outOfBandArgs(testArgs, "--wait=false", tc.flag)...); err != nil {
			t.Fatalf("%s: %v", tc.flag, err)
		}
		var fc offloadv1alpha1.ForeignCluster
		if err := c.Get(ctx, client.ObjectKey{Name: "provider"}, &fc); err != nil {
			t.Fatal(err)
		}
		if fc.Spec.Networking.Disabled != tc.disabled {
			t.Errorf("%s: spec.networking.disabled = %t, want %t", tc.flag, fc.Spec.Networking.Disabled, tc.disabled)
		}
	}
}

func TestOutOfBandRefusesANameThatStandsForAnotherCluster(t *testing.T) {
	other := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "provider"},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: consumerID[:35] + "2", ClusterName: "provider"}}
	c := newFakeClient(consumerIdentity(), other)
	if _, _, err := runPeer(t, c, outOfBandArgs(testArgs, "--wait=false")...); err == nil || !strings.Contains(err.Error(), "already stands for") {
		t.Fatalf("error %v, want a refusal", err)
	}
}

// peeredProvider returns the ForeignCluster as the agent leaves it after
// setting Authenticated.
func peeredProvider(status metav1.ConditionStatus, reason, message string) *offloadv1alpha1.ForeignCluster {
	fc := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "provider"},
		Spec: offloadv1alpha1.ForeignClusterSpec{ClusterID: testID, ClusterName: "provider", AuthURL: testURL, CACertHash: testHash,
			OutgoingPeering: offloadv1alpha1.OutgoingPeering{Enabled: true}}}
	meta.SetStatusCondition(&fc.Status.Conditions, metav1.Condition{Type: offloadv1alpha1.ConditionAuthenticated, Status: status, Reason: reason, Message: message})
	return fc
}

// withVirtualNode sets OutgoingPeering True and VirtualNodeReady to ready,
// as the agent's virtual node controller does.
func withVirtualNode(fc *offloadv1alpha1.ForeignCluster, ready metav1.ConditionStatus) *offloadv1alpha1.ForeignCluster {
	meta.SetStatusCondition(&fc.Status.Conditions, metav1.Condition{Type: offloadv1alpha1.ConditionOutgoingPeering, Status: metav1.ConditionTrue, Reason: "Established"})
	meta.SetStatusCondition(&fc.Status.Conditions, metav1.Condition{Type: offloadv1alpha1.ConditionVirtualNodeReady, Status: ready, Reason: "NodeReady"})
	return fc
}

func tokenSecretWith(token string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: peering.PeerTokenSecretName("provider"), Namespace: testNS,
		Labels: map[string]string{peering.ForeignClusterLabel: "provider"}}, Type: peering.PeerAuthTokenSecretType, Data: map[string][]byte{peering.PeerTokenKey: []byte(token)}}
}

func TestOutOfBandWaitReportsEachStep(t *testing.T) {
	const expired = "token expired: generate a new one on the provider with `kubectl offload peer generate`"
	kubeconfig := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: peering.PeerKubeconfigSecretName("provider"), Namespace: testNS}, Type: peering.PeerKubeconfigSecretType}
	tests := []struct {
		name       string
		objects    []client.Object
		wantErr    string // "" for success
		wantStderr string
	}{
		{
			name:    "an authenticated peering with a Ready virtual node succeeds without storing the token again",
			objects: []client.Object{withVirtualNode(peeredProvider(metav1.ConditionTrue, "Authenticated", "ok"), metav1.ConditionTrue), kubeconfig},
			wantStderr: " ✓ Authenticated with the provider\n ✓ OutgoingPeering established\n" +
				" ✓ Virtual node offload-provider Ready\n",
		},
		{
			name:       "a virtual node that is not Ready yet times out at its step",
			objects:    []client.Object{withVirtualNode(peeredProvider(metav1.ConditionTrue, "Authenticated", "ok"), metav1.ConditionUnknown), kubeconfig},
			wantErr:    `step "Virtual node offload-provider Ready" is still pending`,
			wantStderr: " ✓ OutgoingPeering established\n ✗ Virtual node offload-provider Ready: is still pending",
		},
		{
			name:       "a refused token fails with the agent's message",
			objects:    []client.Object{peeredProvider(metav1.ConditionFalse, peering.ReasonTokenExpired, expired), tokenSecretWith(testToken)},
			wantErr:    expired,
			wantStderr: " ✗ Authenticated with the provider: " + expired + "\n",
		},
		{
			name:       "a step that stays pending times out and is named",
			objects:    []client.Object{peeredProvider(metav1.ConditionUnknown, ReasonPending, "")},
			wantErr:    `step "Authenticated with the provider" is still pending`,
			wantStderr: " ✗ Authenticated with the provider: is still pending",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeClient(append(tt.objects, consumerIdentity())...)
			_, stderr, err := runPeer(t, c, outOfBandArgs(testArgs, "--timeout", "200ms")...)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("out-of-band: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			if !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("stderr %q, want it to contain %q", stderr, tt.wantStderr)
			}
			if strings.Contains(stderr, testSecret) {
				t.Errorf("stderr contains the token")
			}
		})
	}
}

func TestOutOfBandWithANewTokenRetriesAtOnce(t *testing.T) {
	c := newFakeClient(consumerIdentity(), tokenSecretWith("old000.0000000000000000"),
		peeredProvider(metav1.ConditionFalse, peering.ReasonTokenExpired, "token expired"))
	if _, _, err := runPeer(t, c, outOfBandArgs(testArgs, "--wait=false")...); err != nil {
		t.Fatal(err)
	}
	var fc offloadv1alpha1.ForeignCluster
	if err := c.Get(context.Background(), client.ObjectKey{Name: "provider"}, &fc); err != nil {
		t.Fatal(err)
	}
	if got := fc.Annotations[peering.TokenIDAnnotation]; got != "abc123" {
		t.Errorf("annotation %s = %q, want the new token's ID", peering.TokenIDAnnotation, got)
	}
	// The CLI writes intent, never the status: the old token's failure stays
	// until the agent answers the new one.
	if cond := meta.FindStatusCondition(fc.Status.Conditions, offloadv1alpha1.ConditionAuthenticated); cond == nil || cond.Reason != peering.ReasonTokenExpired {
		t.Errorf("Authenticated = %+v, want the agent's last word, untouched by the CLI", cond)
	}
	// --wait does not report the old token's failure: it waits for the agent.
	_, _, err := runPeer(t, c, outOfBandArgs(testArgs, "--timeout", "200ms")...)
	if err == nil || strings.Contains(err.Error(), "token expired") || !strings.Contains(err.Error(), "has not acted on the new token yet") {
		t.Errorf("out-of-band --wait with a new token = %v, want pending until the agent acts on it", err)
	}
	var s corev1.Secret
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: peering.PeerTokenSecretName("provider")}, &s); err != nil || string(s.Data[peering.PeerTokenKey]) != testToken {
		t.Errorf("the token Secret was not updated (%v)", err)
	}
}

func TestOutOfBandWithAPeerThatConsumesThisClusterRecordsBothDirections(t *testing.T) {
	incoming := &offloadv1alpha1.ForeignCluster{
		ObjectMeta: metav1.ObjectMeta{Name: testArgs.Name, Labels: map[string]string{offloadv1alpha1.LabelIncomingOnly: "true"}},
		Spec:       offloadv1alpha1.ForeignClusterSpec{ClusterID: testArgs.ClusterID, ClusterName: testArgs.Name},
	}
	c := newFakeClient(consumerIdentity(), incoming)
	if _, _, err := runPeer(t, c, outOfBandArgs(testArgs, "--wait=false")...); err != nil {
		t.Fatal(err)
	}
	var fc offloadv1alpha1.ForeignCluster
	if err := c.Get(context.Background(), client.ObjectKey{Name: testArgs.Name}, &fc); err != nil {
		t.Fatal(err)
	}
	if _, ok := fc.Labels[offloadv1alpha1.LabelIncomingOnly]; ok || !fc.Spec.OutgoingPeering.Enabled {
		t.Errorf("labels %v, outgoing %v; want the ForeignCluster to stand for both directions", fc.Labels, fc.Spec.OutgoingPeering.Enabled)
	}
}

// runPeerWithInput is runPeer with stdin.
func runPeerWithInput(t *testing.T, c client.Client, stdin string, args ...string) (stderr string, err error) {
	t.Helper()
	streams, in, out, errOut := genericiooptions.NewTestIOStreams()
	in.WriteString(stdin)
	cmd := NewCmdPeer(oobFactory{c: c}, streams)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err = cmd.ExecuteContext(context.Background())
	return errOut.String(), err
}

func TestOutOfBandReadsTheTokenFromAFileOrStandardInput(t *testing.T) {
	withoutToken := func(extra ...string) []string {
		return append([]string{"out-of-band", testArgs.Name, "--auth-url", testArgs.AuthURL, "--cluster-id", testArgs.ClusterID,
			"--ca-cert-hash", testArgs.CACertHash, "--wait=false"}, extra...)
	}
	file := t.TempDir() + "/token"
	if err := os.WriteFile(file, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, stdin string
		args        []string
	}{
		{"from a file, with its trailing newline", "", withoutToken("--auth-token-file", file)},
		{"from the standard input", "  " + testToken + "\n", withoutToken("--auth-token-file", "-")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeClient(consumerIdentity())
			if _, err := runPeerWithInput(t, c, tc.stdin, tc.args...); err != nil {
				t.Fatal(err)
			}
			var s corev1.Secret
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: "offload-peer-provider-token"}, &s); err != nil {
				t.Fatal(err)
			}
			if string(s.Data[peering.PeerTokenKey]) != testToken {
				t.Error("the stored token is not the one read")
			}
		})
	}
	empty := t.TempDir() + "/empty"
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := t.TempDir() + "/bad"
	if err := os.WriteFile(bad, []byte(testToken+"x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, stdin, want string
		args              []string
	}{
		{"both a token and a file", "", "not both", append(withoutToken("--auth-token-file", file), "--auth-token", testToken)},
		{"a missing file", "", "no such file", withoutToken("--auth-token-file", t.TempDir()+"/missing")},
		{"an empty file", "", "holds no peering token", withoutToken("--auth-token-file", empty)},
		{"empty standard input", "", "holds no peering token", withoutToken("--auth-token-file", "-")},
		{"a file with a malformed token", "", "--auth-token", withoutToken("--auth-token-file", bad)},
	} {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			c := newFakeClient()
			_, err := runPeerWithInput(t, c, tc.stdin, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one that says %q", err, tc.want)
			}
			if strings.Contains(err.Error(), testSecret) {
				t.Errorf("the error shows the token: %v", err)
			}
			assertNothingWritten(t, c)
		})
	}
}
