package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peer"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// pinnedClient trusts only a server whose chain holds the CA with hash pin,
// the way the consumer's agent connects.
func pinnedClient(pin string) *http.Client {
	return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: peering.PinnedTLSConfig(pin)}}
}

// waitAuthReachable waits until the auth service answers through its
// NodePort: kube-proxy programs a new NodePort a few seconds after the
// Service appears.
func waitAuthReachable(ctx context.Context, t *testing.T, hc *http.Client, authURL string) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		resp, err := hc.Get(authURL + "/healthz")
		if err != nil {
			last = err
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("the auth service at %s never answered: %v", authURL, last)
	}
}

// post sends body as JSON and decodes the answer into out, returning the status.
func post(t *testing.T, hc *http.Client, url, bearer string, body, out any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("POST %s: %s, not JSON: %s", url, resp.Status, data)
		}
	}
	return resp.StatusCode
}

func TestAProviderGrantsScopedCredentialsPublishesAnOfferAndRevokesOnUnpeer(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	c := localcluster.StartClusters(t, localcluster.ClusterOptions{Name: "provider", FakeNodes: 2, RealNode: true})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	installAgent(t, c, "--api-server-url", c.PeerAPIServerURL())
	waitPodsReady(ctx, t, c, localcluster.InstallNamespace, "app.kubernetes.io/component=auth", 1)
	waitPodsReady(ctx, t, c, localcluster.InstallNamespace, "app.kubernetes.io/component=controller-manager", 1)
	waitCASecret(ctx, t, c)

	var cmd peer.PeerCommand
	if err := json.Unmarshal([]byte(mustOffload(t, c, "peer", "generate", "-o", "json")), &cmd); err != nil {
		t.Fatal(err)
	}
	hc := pinnedClient(cmd.CACertHash)
	consumerID := "0f0e0d0c-0b0a-4908-8706-050403020100"
	waitAuthReachable(ctx, t, hc, cmd.AuthURL)

	// The chapters, each a subtest that reports on its own. A chapter that
	// leaves what the next ones need stops the test when it fails; the
	// others let the rest run.

	// A wrong pin is refused before anything is sent.
	t.Run("a wrong pin is refused", func(t *testing.T) {
		_, err := pinnedClient("sha256:" + strings.Repeat("0", 64)).Get(cmd.AuthURL + "/healthz")
		var pinErr *peering.PinError
		if !errors.As(err, &pinErr) {
			t.Errorf("a client pinning another CA: %v, want a pin mismatch", err)
		}
	})

	var resp peering.PeerResponse
	if !t.Run("the token is exchanged for credentials", func(t *testing.T) {
		start := time.Now()
		code := post(t, hc, cmd.AuthURL+peering.PeerPath, "", peering.PeerRequest{Token: cmd.AuthToken, ClusterID: consumerID, ClusterName: "consumer", ProviderClusterID: cmd.ClusterID}, &resp)
		if code != http.StatusOK {
			t.Fatalf("POST /v1/peer: %d %+v", code, resp)
		}
		t.Logf("token exchanged for credentials in %s; they expire at %s", time.Since(start).Round(time.Millisecond), resp.Credentials.ExpirationTimestamp)
	}) {
		t.FailNow()
	}

	// The single-use token is spent.
	t.Run("the single-use token is spent", func(t *testing.T) {
		var failure map[string]string
		if code := post(t, hc, cmd.AuthURL+peering.PeerPath, "", peering.PeerRequest{Token: cmd.AuthToken, ClusterID: consumerID, ClusterName: "consumer", ProviderClusterID: cmd.ClusterID}, &failure); code != http.StatusUnauthorized || failure["reason"] != peering.ReasonTokenUsed {
			t.Errorf("reusing the token: %d %v, want 401 %s", code, failure, peering.ReasonTokenUsed)
		}
	})

	// The credentials work against the provider API and see the offer the
	// provider's controller-manager publishes in the tenant namespace.
	var tenantClient client.Client
	ns := resp.Credentials.TenantNamespace
	var offer offloadv1alpha1.ResourceOffer
	if !t.Run("the credentials read the offer", func(t *testing.T) {
		cfg := &rest.Config{Host: resp.Credentials.APIServerURL, BearerToken: resp.Credentials.Token,
			TLSClientConfig: rest.TLSClientConfig{CAData: []byte(resp.Credentials.CACert)}}
		var err error
		tenantClient, err = client.New(cfg, client.Options{Scheme: scheme.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return tenantClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "provider"}, &offer) == nil, nil
		})
		if err != nil {
			t.Fatalf("no ResourceOffer readable with the tenant credentials in %s: %v", ns, err)
		}
	}) {
		t.FailNow()
	}
	t.Run("the offer is the provider's", func(t *testing.T) {
		cpu := offer.Spec.Resources[corev1.ResourceCPU]
		if offer.Spec.ClusterID != cmd.ClusterID || cpu.Sign() <= 0 {
			t.Errorf("offer %+v: want the provider's ID and a positive cpu share", offer.Spec)
		}
		t.Logf("offer: cpu %s, memory %s, pods %s", offer.Spec.Resources.Cpu(), offer.Spec.Resources.Memory(), offer.Spec.Resources.Pods())
	})

	t.Run("the consumer identity is scoped to its tenant namespace", func(t *testing.T) {
		user := "system:serviceaccount:" + ns + ":offload-consumer"
		for _, a := range []struct {
			verb, group, resource, namespace string
			allowed                          bool
		}{
			{"create", "offload.io", "remotenamespaces", ns, true},
			{"list", "offload.io", "resourceoffers", ns, true},
			{"create", "offload.io", "resourceoffers", ns, false},
			{"create", "offload.io", "remotenamespaces", "default", false},
			{"list", "offload.io", "remotenamespaces", "offload-tenant-other", false},
			{"list", "", "nodes", "", false},
			{"list", "", "secrets", "", false},
			{"get", "", "secrets", ns, false},
			{"create", "", "namespaces", "", false},
			{"list", "offload.io", "tenants", "", false},
			{"create", "", "pods", ns, false},
		} {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:serviceaccounts", "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: a.resource, Namespace: a.namespace},
			}}
			got, err := c.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed != a.allowed {
				t.Errorf("%s %s.%s in %q: allowed=%t, want %t", a.verb, a.resource, a.group, a.namespace, got.Status.Allowed, a.allowed)
			}
		}
	})

	t.Run("a second token holder naming the tenant cannot take its place", func(t *testing.T) {
		// The consumer's name and cluster ID are no secret; any token
		// holder can send them. The tenant and its credential stay, and
		// the refused token is not spent.
		var second peer.PeerCommand
		if err := json.Unmarshal([]byte(mustOffload(t, c, "peer", "generate", "-o", "json")), &second); err != nil {
			t.Fatal(err)
		}
		var before offloadv1alpha1.Tenant
		if err := ctrlClient(t, c).Get(ctx, client.ObjectKey{Name: "consumer"}, &before); err != nil {
			t.Fatal(err)
		}
		takeover := peering.PeerRequest{Token: second.AuthToken, ClusterID: consumerID, ClusterName: "consumer", ProviderClusterID: second.ClusterID}
		var refusal map[string]string
		if code := post(t, hc, second.AuthURL+peering.PeerPath, "", takeover, &refusal); code != http.StatusConflict || refusal["reason"] != peering.ReasonTenantExists {
			t.Errorf("a takeover with a second token: %d %v, want 409 %s", code, refusal, peering.ReasonTenantExists)
		}
		var after offloadv1alpha1.Tenant
		if err := ctrlClient(t, c).Get(ctx, client.ObjectKey{Name: "consumer"}, &after); err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != before.ResourceVersion {
			t.Errorf("the refused takeover changed the Tenant: %+v", after.Status)
		}
		if err := tenantClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "provider"}, &offer); err != nil {
			t.Errorf("the tenant's credential stopped working after a refused takeover: %v", err)
		}
		id, _, _ := strings.Cut(second.AuthToken, ".")
		if tokens := mustOffload(t, c, "peer", "tokens", "list"); !regexp.MustCompile(`(?m)^` + id + `\s.*\svalid\s`).MatchString(tokens) {
			t.Errorf("the refused token %s is not listed valid:\n%s", id, tokens)
		}
		mustOffload(t, c, "peer", "tokens", "revoke", id)
	})

	// unpeer: the tenant goes, and the old credentials stop working.
	t.Run("unpeer revokes the credentials and the tenant", func(t *testing.T) {
		if code := post(t, hc, cmd.AuthURL+peering.UnpeerPath, resp.Credentials.Token, peering.RefreshRequest{ClusterID: consumerID}, nil); code != http.StatusOK {
			t.Fatalf("POST /v1/unpeer: %d", code)
		}
		revoked := time.Now()
		// What the credentials could do a moment ago is refused at once (403,
		// the RoleBinding is gone), and the token itself stops authenticating
		// (401) once the API server's token cache lets go of it.
		var denied, unauthenticated time.Duration
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			err := tenantClient.List(ctx, &offloadv1alpha1.ResourceOfferList{}, client.InNamespace(ns))
			if denied == 0 && (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)) {
				denied = time.Since(revoked)
			}
			if apierrors.IsUnauthorized(err) {
				unauthenticated = time.Since(revoked)
				return true, nil
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("the old credentials still authenticate 30 s after unpeer: %v", err)
		}
		t.Logf("after unpeer the old credentials were refused (403) in %s and no longer authenticated (401) in %s",
			denied.Round(time.Millisecond), unauthenticated.Round(time.Millisecond))
		if denied > 2*time.Second {
			t.Errorf("the old credentials could still read the tenant namespace %s after unpeer", denied)
		}
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			var tenants offloadv1alpha1.TenantList
			if err := ctrlClient(t, c).List(ctx, &tenants); err != nil {
				return false, nil
			}
			_, err := c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return len(tenants.Items) == 0 && apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("tenant or tenant namespace %s left after unpeer: %v", ns, err)
		}
	})

	// Two consumers racing with one single-use token: exactly one peers.
	t.Run("two consumers racing with one token: one peers", func(t *testing.T) {
		if err := json.Unmarshal([]byte(mustOffload(t, c, "peer", "generate", "-o", "json")), &cmd); err != nil {
			t.Fatal(err)
		}
		racers := []peering.PeerRequest{
			{Token: cmd.AuthToken, ClusterID: "0f0e0d0c-0b0a-4908-8706-0504030201aa", ClusterName: "racer-a", ProviderClusterID: cmd.ClusterID},
			{Token: cmd.AuthToken, ClusterID: "0f0e0d0c-0b0a-4908-8706-0504030201bb", ClusterName: "racer-b", ProviderClusterID: cmd.ClusterID},
		}
		codes := make([]int, len(racers))
		answers := make([]peering.PeerResponse, len(racers))
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				b, _ := json.Marshal(racers[i])
				r, err := hc.Post(cmd.AuthURL+peering.PeerPath, "application/json", bytes.NewReader(b))
				if err != nil {
					return
				}
				defer r.Body.Close()
				codes[i] = r.StatusCode
				_ = json.NewDecoder(r.Body).Decode(&answers[i])
			})
		}
		wg.Wait()
		winners := 0
		for i, code := range codes {
			if code == http.StatusOK {
				winners++
				// Leave nothing behind.
				if code := post(t, hc, cmd.AuthURL+peering.UnpeerPath, answers[i].Credentials.Token, peering.RefreshRequest{ClusterID: racers[i].ClusterID}, nil); code != http.StatusOK {
					t.Errorf("POST /v1/unpeer for %s: %d", racers[i].ClusterName, code)
				}
			}
		}
		if winners != 1 || codes[0]+codes[1] != http.StatusOK+http.StatusUnauthorized {
			t.Errorf("two concurrent uses of one single-use token answered %v, want one 200 and one 401", codes)
		}
	})
}
