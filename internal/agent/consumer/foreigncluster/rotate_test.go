package foreigncluster

import (
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

func TestCredentialsAreNotRenewedBeforeTwoThirdsOfTheirLifetime(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	issued, expiry := now.Add(-10*time.Minute), now.Add(50*time.Minute)
	due := now.Add(30 * time.Minute) // issued + 2/3 of an hour
	e, p, name := newPeeredEnv(t, issued, expiry)

	before := time.Now()
	res, err := e.reconcile(t, name)
	after := time.Now()
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if n := len(p.callsTo(peering.RefreshPath)); n != 0 {
		t.Errorf("the provider got %d refresh calls, want none before the renewal is due", n)
	}
	if res.RequeueAfter < due.Sub(after) || res.RequeueAfter > due.Sub(before) {
		t.Errorf("Reconcile = %+v, want a requeue when the renewal is due, in %v", res, due.Sub(before))
	}
	if got := kubeconfigToken(t, e.secret(t, peering.PeerKubeconfigSecretName(name))); got != tenantSAToken {
		t.Errorf("the kubeconfig holds token %q, want the one issued at peering", got)
	}
	fc := e.foreignCluster(t, name)
	if fc.Status.CredentialExpiry == nil || !fc.Status.CredentialExpiry.Time.Equal(expiry) {
		t.Errorf("status.credentialExpiry = %v, want %v", fc.Status.CredentialExpiry, expiry)
	}
}

func TestDueCredentialsAreRenewedWithTheCurrentTokenAndStoredInTheSameSecret(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	e, p, name := newPeeredEnv(t, now.Add(-50*time.Minute), now.Add(10*time.Minute))
	renewedExpiry := now.Add(2 * time.Hour)
	p.answerRefresh(renew(renewedExpiry))
	old := e.secret(t, peering.PeerKubeconfigSecretName(name))

	before := time.Now()
	res, err := e.reconcile(t, name)
	after := time.Now()
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}

	calls := p.callsTo(peering.RefreshPath)
	if len(calls) != 1 {
		t.Fatalf("the provider got %d refresh calls, want 1", len(calls))
	}
	if want := (providerCall{path: peering.RefreshPath, bearer: tenantSAToken, body: peering.RefreshRequest{ClusterID: e.consumerID}}); calls[0] != want {
		t.Errorf("the provider got %+v, want %+v", calls[0], want)
	}
	s := e.secret(t, peering.PeerKubeconfigSecretName(name))
	if s.UID != old.UID || s.Type != old.Type || s.Labels[peering.ForeignClusterLabel] != name || len(s.OwnerReferences) != 1 {
		t.Errorf("the kubeconfig Secret was replaced or lost its type, label or owner: %+v", s.ObjectMeta)
	}
	if got := kubeconfigToken(t, s); got != renewedToken {
		t.Errorf("the kubeconfig holds token %q, want the renewed one", got)
	}
	if got, want := string(s.Data[peering.PeerExpirationKey]), renewedExpiry.UTC().Format(time.RFC3339); got != want {
		t.Errorf("%s = %s, want %s", peering.PeerExpirationKey, got, want)
	}
	issued, err := time.Parse(time.RFC3339, string(s.Data[peering.PeerIssuedKey]))
	if err != nil || issued.Before(before.Truncate(time.Second)) || issued.After(after) {
		t.Errorf("%s = %s, want the time of the renewal", peering.PeerIssuedKey, s.Data[peering.PeerIssuedKey])
	}

	fc := e.foreignCluster(t, name)
	if fc.Status.CredentialExpiry == nil || !fc.Status.CredentialExpiry.Time.Equal(renewedExpiry) {
		t.Errorf("status.credentialExpiry = %v, want %v", fc.Status.CredentialExpiry, renewedExpiry)
	}
	if c := authenticated(t, fc); c.Status != metav1.ConditionTrue || c.Reason != ReasonAuthenticated {
		t.Errorf("Authenticated = %+v, want True", c)
	}
	assertNoTokens(t, fc)

	next := time.Duration(float64(renewedExpiry.Sub(before)) * refreshAt)
	if res.RequeueAfter > next || res.RequeueAfter < next-after.Sub(before) {
		t.Errorf("Reconcile = %+v, want a requeue when the renewed credentials are due, in %v", res, next)
	}
	if _, err := e.reconcile(t, name); err != nil {
		t.Fatalf("second Reconcile: %v", err)
	}
	if n := len(p.callsTo(peering.RefreshPath)); n != 1 {
		t.Errorf("the provider got %d refresh calls, want 1: renewed credentials are not due", n)
	}
}

func TestARefusedRenewalSetsCredentialsRefusedAndSaysToPeerAgain(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	expiry := now.Add(10 * time.Minute)
	e, p, name := newPeeredEnv(t, now.Add(-50*time.Minute), expiry)
	p.answerRefresh(refuse(http.StatusUnauthorized))

	res, err := e.reconcile(t, name)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > maxRefreshRetry {
		t.Errorf("Reconcile = %+v, want a retry within %v", res, maxRefreshRetry)
	}
	if n := len(p.callsTo(peering.RefreshPath)); n != 1 {
		t.Errorf("the provider got %d refresh calls, want 1", n)
	}
	fc := e.foreignCluster(t, name)
	c := authenticated(t, fc)
	if c.Status != metav1.ConditionFalse || c.Reason != ReasonCredentialsRefused {
		t.Errorf("Authenticated = %+v, want False %s", c, ReasonCredentialsRefused)
	}
	if !strings.Contains(c.Message, "kubectl offload unpeer "+name) || !strings.Contains(c.Message, "kubectl offload peer generate") {
		t.Errorf("the message %q does not say to unpeer and peer again", c.Message)
	}
	if fc.Status.Auth != offloadv1alpha1.PhaseFailed {
		t.Errorf("status.auth = %s, want Failed", fc.Status.Auth)
	}
	assertNoTokens(t, fc)
	if got := kubeconfigToken(t, e.secret(t, peering.PeerKubeconfigSecretName(name))); got != tenantSAToken {
		t.Errorf("the kubeconfig holds token %q, want the current one, still valid until %v", got, expiry)
	}

	// The refusal stands while the agent retries: the condition does not
	// flap back to True, and keeps the time it turned False.
	p.answerRefresh(func(w http.ResponseWriter, r *http.Request) {
		if c := authenticated(t, e.foreignCluster(t, name)); c.Status != metav1.ConditionFalse {
			t.Errorf("while the renewal is retried Authenticated = %+v, want it to stay False", c)
		}
		refuse(http.StatusUnauthorized)(w, r)
	})
	if _, err := e.reconcile(t, name); err != nil {
		t.Fatalf("second Reconcile: %v", err)
	}
	if again := authenticated(t, e.foreignCluster(t, name)); again.Status != metav1.ConditionFalse || !again.LastTransitionTime.Equal(&c.LastTransitionTime) {
		t.Errorf("after a second refusal Authenticated = %+v, want False since %v", again, c.LastTransitionTime)
	}

	// A renewal that succeeds later sets it True again.
	p.answerRefresh(renew(time.Now().Add(time.Hour)))
	if _, err := e.reconcile(t, name); err != nil {
		t.Fatalf("third Reconcile: %v", err)
	}
	if c := authenticated(t, e.foreignCluster(t, name)); c.Status != metav1.ConditionTrue {
		t.Errorf("after a successful renewal Authenticated = %+v, want True", c)
	}
}

func TestAFailedRenewalIsRetriedSoonWithoutChangingTheCondition(t *testing.T) {
	tests := []struct {
		name     string
		provider func(*fakeProvider)
	}{
		{name: "the auth service fails", provider: func(p *fakeProvider) { p.answerRefresh(refuse(http.StatusInternalServerError)) }},
		{name: "the auth service is unreachable", provider: func(p *fakeProvider) { p.srv.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Now().Truncate(time.Second)
			e, p, name := newPeeredEnv(t, now.Add(-50*time.Minute), now.Add(10*time.Minute))
			tt.provider(p)

			res, err := e.reconcile(t, name)
			if err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			if res.RequeueAfter < minRefreshRetry || res.RequeueAfter > maxRefreshRetry {
				t.Errorf("Reconcile = %+v, want a retry in %v to %v", res, minRefreshRetry, maxRefreshRetry)
			}
			fc := e.foreignCluster(t, name)
			if c := authenticated(t, fc); c.Status != metav1.ConditionTrue || c.Reason != ReasonAuthenticated {
				t.Errorf("Authenticated = %+v, want it still True", c)
			}
			if fc.Status.Auth != offloadv1alpha1.PhaseEstablished {
				t.Errorf("status.auth = %s, want Established", fc.Status.Auth)
			}
			assertNoTokens(t, fc)
			if got := kubeconfigToken(t, e.secret(t, peering.PeerKubeconfigSecretName(name))); got != tenantSAToken {
				t.Errorf("the kubeconfig holds token %q, want the current one", got)
			}
		})
	}
}

func TestRefreshTimeIsTwoThirdsIntoTheLifetime(t *testing.T) {
	issued := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		lifetime time.Duration
		want     time.Duration // after issued
	}{
		{name: "credentials valid three hours are renewed after two", lifetime: 3 * time.Hour, want: 2 * time.Hour},
		{name: "credentials valid 90 seconds are renewed after 60", lifetime: 90 * time.Second, want: time.Minute},
		{name: "credentials that expire when issued are renewed at once", lifetime: 0, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refreshTime(issued, issued.Add(tt.lifetime)); !got.Equal(issued.Add(tt.want)) {
				t.Errorf("refreshTime = %v, want %v", got, issued.Add(tt.want))
			}
		})
	}
}

func TestRetryDelayIsATenthOfWhatIsLeftWithinBounds(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		left time.Duration
		want time.Duration
	}{
		{name: "five minutes left are retried after thirty seconds", left: 5 * time.Minute, want: 30 * time.Second},
		{name: "an hour left is retried after at most a minute", left: time.Hour, want: maxRefreshRetry},
		{name: "ten seconds left are retried after at least five seconds", left: 10 * time.Second, want: minRefreshRetry},
		{name: "expired credentials are retried after a minute", left: -time.Hour, want: maxRefreshRetry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retryDelay(now.Add(tt.left), now); got != tt.want {
				t.Errorf("retryDelay = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCredentialTimesReadsTheSecretAndFallsBackToItsCreation(t *testing.T) {
	created := time.Date(2025, 3, 1, 11, 0, 0, 0, time.UTC)
	issued := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	expiry := time.Date(2025, 3, 1, 13, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		data       map[string]string
		wantIssued time.Time
		wantErr    bool
	}{
		{
			name:       "both times are read",
			data:       map[string]string{peering.PeerExpirationKey: "2025-03-01T13:00:00Z", peering.PeerIssuedKey: "2025-03-01T12:00:00Z"},
			wantIssued: issued,
		},
		{
			name:       "other time zones are read",
			data:       map[string]string{peering.PeerExpirationKey: "2025-03-01T14:00:00+01:00", peering.PeerIssuedKey: "2025-03-01T13:00:00+01:00"},
			wantIssued: issued,
		},
		{
			name:       "a missing issue time is the Secret's creation",
			data:       map[string]string{peering.PeerExpirationKey: "2025-03-01T13:00:00Z"},
			wantIssued: created,
		},
		{
			name:       "a malformed issue time is the Secret's creation",
			data:       map[string]string{peering.PeerExpirationKey: "2025-03-01T13:00:00Z", peering.PeerIssuedKey: "yesterday"},
			wantIssued: created,
		},
		{
			name:       "an issue time after the expiry is the Secret's creation",
			data:       map[string]string{peering.PeerExpirationKey: "2025-03-01T13:00:00Z", peering.PeerIssuedKey: "2025-03-01T14:00:00Z"},
			wantIssued: created,
		},
		{name: "a missing expiry is an error", data: map[string]string{peering.PeerIssuedKey: "2025-03-01T12:00:00Z"}, wantErr: true},
		{name: "a malformed expiry is an error", data: map[string]string{peering.PeerExpirationKey: "1h"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "peer-kubeconfig", CreationTimestamp: metav1.Time{Time: created}}, Data: map[string][]byte{}}
			for k, v := range tt.data {
				s.Data[k] = []byte(v)
			}
			gotExpiry, gotIssued, err := peering.CredentialTimes(s)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), peering.PeerExpirationKey) {
					t.Errorf("credentialTimes = %v, %v, %v, want an error naming %q", gotExpiry, gotIssued, err, peering.PeerExpirationKey)
				}
				return
			}
			if err != nil {
				t.Fatalf("credentialTimes: %v", err)
			}
			if !gotExpiry.Equal(expiry) || !gotIssued.Equal(tt.wantIssued) {
				t.Errorf("credentialTimes = %v, %v, want %v, %v", gotExpiry, gotIssued, expiry, tt.wantIssued)
			}
		})
	}
}
