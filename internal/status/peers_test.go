package status

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubectl-offload/kubectl-offload/internal/install"
	"github.com/kubectl-offload/kubectl-offload/internal/status/statustest"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// runStatus executes `kubectl offload status args...` against the API
// server, with the peers section alone and the clock at testNow.
func runStatus(t *testing.T, a apiServer, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	o := NewOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	o.Checkers = []Checker{peersChecker{}}
	o.now = testClock
	err = statustest.Execute(newCmdStatus(a.Factory(), o), &out, &errOut, args...)
	return out.String(), errOut.String(), err
}

// findCheck returns the check called name in s, or nil.
func findCheck(s Section, name string) *Check {
	for i := range s.Checks {
		if s.Checks[i].Name == name {
			return &s.Checks[i]
		}
	}
	return nil
}

func TestPeersSection(t *testing.T) {
	a := newAPIServer(t)
	for _, p := range peerWorld() {
		a.Create(t, p)
	}
	r := collectPeers(context.Background(), a.env())
	s := r.Sections[0]

	t.Run("the table has one row per peer, by name", func(t *testing.T) {
		want := [][]string{
			{"consumer-c", idConsumer, "Provider", "-", "-", "Established", "-", "expires in 30m", "2m ago"},
			{"provider-a", idReady, "Consumer", "Established", "Established", "None", "Ready", "expires in 23h", "5m ago"},
			{"provider-b", idAuthFail, "-", "Failed", "-", "-", "Missing", "-", "-"},
			{"provider-d", idExpired, "Consumer", "Established", "Established", "None", "Ready", "expired 5m ago", "5m ago"},
			{"provider-e", idNoNode, "Consumer", "Established", "Established", "None", "Missing", "expires in 20h", "5m ago"},
			{"provider-f", idUnpeering, "Consumer", "Established", "Established", "None", "Missing", "expires in 22h", "5m ago"},
		}
		if s.Table == nil || strings.Join(s.Table.Columns, ",") != strings.Join(peerColumns, ",") {
			t.Fatalf("table = %+v, want the columns %v", s.Table, peerColumns)
		}
		if len(s.Table.Rows) != len(want) {
			t.Fatalf("%d rows, want %d: %v", len(s.Table.Rows), len(want), s.Table.Rows)
		}
		for i, row := range s.Table.Rows {
			if strings.Join(row, "|") != strings.Join(want[i], "|") {
				t.Errorf("row %d = %v\nwant      %v", i, row, want[i])
			}
		}
	})

	checks := []struct {
		name  string
		check string
		// want is the status; empty means that the check does not apply.
		want Status
		// says is part of the message: the agent's explanation, passed on.
		says string
	}{
		{"an authenticated consumer passes", "peer/provider-a/auth", StatusOK, ""},
		{"a Ready virtual node passes", "peer/provider-a/virtualNode", StatusOK, ""},
		{"credentials valid for a day pass", "peer/provider-a/credentials", StatusOK, "expire in 23h"},
		{"a failed authentication fails with the agent's advice", "peer/provider-b/auth", StatusFailed, "generate a new one on the provider"},
		{"an unauthenticated peer is not blamed for its virtual node", "peer/provider-b/virtualNode", "", ""},
		{"a peer that only consumes this cluster has no auth check", "peer/consumer-c/auth", "", ""},
		{"a peer that only consumes this cluster has no virtual node", "peer/consumer-c/virtualNode", "", ""},
		{"a consumer's credentials expiring within the hour are a warning", "peer/consumer-c/tenantCredentials", StatusWarning, "expire in 30m"},
		{"expired credentials fail", "peer/provider-d/credentials", StatusFailed, "expired 5m ago"},
		{"a missing virtual node fails with the agent's reason", "peer/provider-e/virtualNode", StatusFailed, "cannot reach the provider's API server"},
		{"a peer being unpeered is a warning with what holds it up", "peer/provider-f/unpeer", StatusWarning, "--force skips it"},
		{"a peer being unpeered is not blamed for its virtual node going", "peer/provider-f/virtualNode", "", ""},
	}
	for _, tt := range checks {
		t.Run(tt.name, func(t *testing.T) {
			c := findCheck(s, tt.check)
			switch {
			case tt.want == "" && c != nil:
				t.Errorf("%s = %+v, want no such check", tt.check, *c)
			case tt.want == "":
			case c == nil:
				t.Errorf("no check %s in %+v", tt.check, s.Checks)
			case c.Status != tt.want || !strings.Contains(c.Message, tt.says):
				t.Errorf("%s = %s %q, want %s saying %q", tt.check, c.Status, c.Message, tt.want, tt.says)
			}
		})
	}

	t.Run("the failed checks make the report unhealthy", func(t *testing.T) {
		if r.Healthy || s.Status != StatusFailed {
			t.Errorf("healthy = %t, section %s; want false and failed", r.Healthy, s.Status)
		}
		if err := r.Err(); err == nil || err.Error() != "3 checks failed: peers" {
			t.Errorf("error = %v, want 3 checks failed: peers", err)
		}
	})

	t.Run("the table shows every row and check", func(t *testing.T) {
		var b bytes.Buffer
		if err := writeTable(&b, r, false, plainWidth); err != nil {
			t.Fatal(err)
		}
		framework.Golden(t, "peers.txt", b.String())
	})

	t.Run("the JSON carries the table and the checks", func(t *testing.T) {
		out, _, err := runStatus(t, a, "-o", "json")
		statustest.AssertResult(t, err, "3 checks failed: peers")
		framework.Golden(t, "peers.json", out)
		var got Report
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("-o json is not JSON: %v\n%s", err, out)
		}
		if len(got.Sections) != 1 || got.Sections[0].Name != "peers" || got.Sections[0].Title != "Peers" {
			t.Fatalf("sections = %+v, want the peers section", got.Sections)
		}
		js := got.Sections[0]
		if js.Table == nil || len(js.Table.Rows) != 6 || len(js.Table.Columns) != len(peerColumns) {
			t.Errorf("table = %+v, want %d columns and 6 rows", js.Table, len(peerColumns))
		}
		for _, c := range js.Checks {
			if !strings.HasPrefix(c.Name, "peer/") || c.Message == "" {
				t.Errorf("check %+v: want a name peer/NAME/… and a message", c)
			}
		}
	})
}

func TestPeersSectionWithoutPeersSaysHowToPeer(t *testing.T) {
	a := newAPIServer(t)
	r := collectPeers(context.Background(), a.env())
	s := r.Sections[0]
	if !r.Healthy || len(s.Checks) != 1 || s.Checks[0].Name != "peers" || s.Checks[0].Status != StatusOK {
		t.Fatalf("report = %+v, want one ok peers check", r)
	}
	if !strings.Contains(s.Checks[0].Message, "kubectl offload peer generate") {
		t.Errorf("message = %q, want it to say how to peer", s.Checks[0].Message)
	}
	if s.Table == nil || s.Table.Rows == nil || len(s.Table.Rows) != 0 {
		t.Errorf("table = %+v, want the columns and no rows", s.Table)
	}
}

func TestWithoutTheForeignClusterCRDPeersSayToInstall(t *testing.T) {
	a := newAPIServer(t)
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: foreignClusterCRD}}
	if err := a.Client.Delete(ctx, crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := install.ApplyCRDs(context.Background(), a.Client, time.Minute); err != nil {
			t.Errorf("reapplying the CRDs: %v", err)
		}
	})
	// Wait until the API server no longer serves ForeignClusters.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := a.Client.Get(ctx, client.ObjectKeyFromObject(crd), &apiextensionsv1.CustomResourceDefinition{})
		if !apierrors.IsNotFound(err) {
			return false, client.IgnoreNotFound(err)
		}
		resources, err := a.Kube.Discovery().ServerResourcesForGroupVersion("offload.io/v1alpha1")
		if err != nil {
			return false, err
		}
		for _, r := range resources.APIResources {
			if r.Name == "foreignclusters" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for the CRD to go: %v", err)
	}
	// A new client, whose REST mapper has not seen the kind yet, as the CLI's.
	fresh := apiServer{statustest.APIServer{Kube: a.Kube, Client: envtest.NewClient(t, envtest.APIServer(t))}}

	r := collectPeers(ctx, fresh.env())
	c := findCheck(r.Sections[0], "peers")
	if c == nil || c.Status != StatusFailed || c.Message != "CRD foreignclusters.offload.io not found: run kubectl offload install" {
		t.Errorf("peers check = %+v, want failed, saying to run kubectl offload install", c)
	}

	_, _, err = runStatus(t, fresh, "peer", "provider-a")
	if err == nil || !strings.Contains(err.Error(), "run kubectl offload install") {
		t.Errorf("status peer error = %v, want it to say to run kubectl offload install", err)
	}
}
