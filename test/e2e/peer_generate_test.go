package e2e

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-offload/kubectl-offload/internal/peer"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

func TestPeerGenerateCreatesATokenAndPrintsTheConsumerCommand(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	c := localcluster.StartClusters(t, localcluster.ClusterOptions{Name: "provider", FakeNodes: 1, RealNode: true})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// The chapters, each a subtest that reports on its own. The two that
	// create the tokens the others read stop the test when they fail.

	// Before install there is nothing to peer with, and no token is created.
	t.Run("before install, nothing to peer with", func(t *testing.T) {
		if out, _, err := offload(t, c, "peer", "generate"); err == nil {
			t.Errorf("peer generate before install succeeded:\n%s", out)
		}
		expectTokens(ctx, t, c, 0)
	})

	installAgent(t, c)
	waitPodsReady(ctx, t, c, localcluster.InstallNamespace, "app.kubernetes.io/component=auth", 1)
	caCert := waitCASecret(ctx, t, c)
	wantHash, err := peering.CACertHash(caCert)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := c.Kube.CoreV1().Services(localcluster.InstallNamespace).Get(ctx, "offload-auth", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantURL := "https://" + net.JoinHostPort(c.Node.IP, strconv.Itoa(int(svc.Spec.Ports[0].NodePort)))
	id := identity(ctx, t, c)

	// Bad flags are refused before anything is created.
	t.Run("bad flags create nothing", func(t *testing.T) {
		for _, args := range [][]string{{"--ttl", "0"}, {"--ttl", "25h"}, {"--auth-url", "http://insecure.example"}} {
			if _, _, err := offload(t, c, append([]string{"peer", "generate"}, args...)...); err == nil {
				t.Errorf("peer generate %s succeeded", strings.Join(args, " "))
			}
		}
		expectTokens(ctx, t, c, 0)
	})

	// The table output is the command, on one line, and nothing else.
	var args peer.PeerCommandArgs
	var tok peering.Token
	if !t.Run("the table output is the command", func(t *testing.T) {
		start := time.Now()
		out, errOut, err := offload(t, c, "peer", "generate")
		if err != nil {
			t.Fatalf("peer generate: %v\n%s", err, errOut)
		}
		if strings.Count(strings.TrimSuffix(out, "\n"), "\n") != 0 {
			t.Errorf("peer generate printed more than one line:\n%s", out)
		}
		args = shellPeerArgs(t, out)
		tok, _ = peering.ParseToken(args.AuthToken)
		if strings.Contains(errOut, tok.Secret) {
			t.Errorf("the note on stderr contains the token secret")
		}
		if args.Name != c.Name || args.ClusterID != id["clusterID"] || args.CACertHash != wantHash || args.AuthURL != wantURL {
			t.Errorf("peer generate printed name %s, cluster ID %s, CA hash %s, auth URL %s; want %s, %s, %s, %s",
				args.Name, args.ClusterID, args.CACertHash, args.AuthURL, c.Name, id["clusterID"], wantHash, wantURL)
		}
		stored := readToken(ctx, t, c, tok.ID)
		if stored.Reusable || !stored.Matches(tok) {
			t.Errorf("the token Secret is reusable=%v, matches=%v; want a single-use Secret for the printed token", stored.Reusable, stored.Matches(tok))
		}
		if lo, hi := start.Add(time.Hour-time.Minute), time.Now().Add(time.Hour+time.Minute); stored.Expires.Before(lo) || stored.Expires.After(hi) {
			t.Errorf("the token expires at %s, want about an hour from now", stored.Expires)
		}
	}) {
		t.FailNow()
	}

	// JSON carries the same fields, for a reusable token.
	var tok2 peering.Token
	if !t.Run("JSON carries the same fields, for a reusable token", func(t *testing.T) {
		var pc peer.PeerCommand
		if err := jsonUnmarshal(mustOffload(t, c, "generate", "peer-command", "--reusable", "--ttl", "2h", "-o", "json"), &pc); err != nil {
			t.Fatal(err)
		}
		jsonArgs := shellPeerArgs(t, pc.Command)
		want := peer.PeerCommandArgs{Name: pc.Name, AuthURL: pc.AuthURL, ClusterID: pc.ClusterID, AuthToken: pc.AuthToken, CACertHash: pc.CACertHash}
		if pc.Kind != "PeerCommand" || pc.APIVersion != "offload.io/v1alpha1" || !pc.Reusable || jsonArgs != want ||
			pc.Name != args.Name || pc.AuthURL != args.AuthURL || pc.ClusterID != args.ClusterID || pc.CACertHash != args.CACertHash {
			t.Errorf("peer generate -o json = %+v, want the fields of %+v with another, reusable token", pc, args)
		}
		tok2, _ = peering.ParseToken(pc.AuthToken)
		if s := readToken(ctx, t, c, tok2.ID); !s.Reusable || s.Expires.Sub(pc.ExpiresAt).Abs() > time.Second {
			t.Errorf("the second token Secret is reusable=%v expiring %s, want reusable expiring %s", s.Reusable, s.Expires, pc.ExpiresAt)
		}
	}) {
		t.FailNow()
	}

	// The list shows both tokens and never a secret.
	t.Run("the list shows both tokens and never a secret", func(t *testing.T) {
		listJSON := mustOffload(t, c, "peer", "tokens", "list", "-o", "json")
		listTable := mustOffload(t, c, "peer", "tokens", "list")
		for _, secret := range []string{tok.Secret, tok2.Secret} {
			if strings.Contains(listJSON+listTable, secret) {
				t.Errorf("peer tokens list shows a token secret")
			}
		}
		var list peer.TokenList
		if err := jsonUnmarshal(listJSON, &list); err != nil {
			t.Fatal(err)
		}
		if got := tokenStatuses(list); len(got) != 2 || got[tok.ID] != peer.TokenValid || got[tok2.ID] != peer.TokenValid {
			t.Errorf("peer tokens list = %v, want %s and %s valid", got, tok.ID, tok2.ID)
		}
	})

	// Revoking deletes the token's ConfigMap; revoking again is an error unless told otherwise.
	t.Run("revoking deletes the token", func(t *testing.T) {
		mustOffload(t, c, "peer", "tokens", "revoke", tok.ID)
		if _, err := c.Kube.CoreV1().ConfigMaps(localcluster.InstallNamespace).Get(ctx, peering.TokenConfigMapName(tok.ID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the revoked token's ConfigMap is still there: %v", err)
		}
		if _, errOut, err := offload(t, c, "peer", "tokens", "revoke", tok.ID); err == nil {
			t.Errorf("revoking a revoked token succeeded")
		} else if strings.Contains(errOut, tok.Secret) {
			t.Errorf("the revoke error shows the secret")
		}
		if _, errOut, err := offload(t, c, "peer", "tokens", "revoke", tok.String()); err == nil || strings.Contains(errOut, tok.Secret) {
			t.Errorf("revoke with a whole token: err=%v, stderr shows the secret: %v", err, strings.Contains(errOut, tok.Secret))
		}
		mustOffload(t, c, "peer", "tokens", "revoke", "--ignore-not-found", tok.ID)
		expectTokens(ctx, t, c, 1)
	})
}

// shellPeerArgs reads line as a POSIX shell does and returns the arguments
// of kubectl offload peer out-of-band it passes.
func shellPeerArgs(t *testing.T, line string) peer.PeerCommandArgs {
	t.Helper()
	positional, flags := localcluster.ShellCommand(t, line)
	if len(positional) != 4 || strings.Join(positional[:3], " ") != "offload peer out-of-band" || len(flags) != 4 {
		t.Fatalf("the shell reads %q as kubectl %v %v, want kubectl offload peer out-of-band NAME and 4 flags", line, positional, flags)
	}
	return peer.PeerCommandArgs{Name: positional[3], AuthURL: flags[peer.AuthURLFlag], ClusterID: flags[peer.ClusterIDFlag],
		AuthToken: flags[peer.AuthTokenFlag], CACertHash: flags[peer.CACertHashFlag]}
}

func readToken(ctx context.Context, t *testing.T, c *localcluster.Cluster, id string) peering.StoredToken {
	t.Helper()
	s, err := c.Kube.CoreV1().ConfigMaps(localcluster.InstallNamespace).Get(ctx, peering.TokenConfigMapName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("token ConfigMap for %s: %v", id, err)
	}
	st, err := peering.ReadTokenConfigMap(s)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// expectTokens checks the number of peering tokens in the install namespace.
func expectTokens(ctx context.Context, t *testing.T, c *localcluster.Cluster, want int) {
	t.Helper()
	list, err := c.Kube.CoreV1().ConfigMaps(localcluster.InstallNamespace).List(ctx, metav1.ListOptions{LabelSelector: peering.TokenIDLabel})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(list.Items); got != want {
		t.Errorf("%d peering tokens in %s, want %d", got, localcluster.InstallNamespace, want)
	}
}

func tokenStatuses(l peer.TokenList) map[string]string {
	out := map[string]string{}
	for _, i := range l.Items {
		out[i.ID] = i.Status
	}
	return out
}
