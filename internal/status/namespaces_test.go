package status

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubectl-offload/kubectl-offload/internal/install"
	"github.com/kubectl-offload/kubectl-offload/internal/status/statustest"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestOffloadedNamespacesSection(t *testing.T) {
	a := newAPIServer(t)
	a.createWorld(t, offloadScenarios[2].world())
	s := Collect(context.Background(), a.env(), []Checker{offloadedNamespacesChecker{}}).Sections[0]

	t.Run("there is one row per namespace and peer, by namespace and then peer", func(t *testing.T) {
		want := [][]string{
			{"batch", "provider-east", "batch-alpha-8c1d0e", "Ready", "Remote", "1/1"},
			{"idle", "-", "-", "Pending", "LocalAndRemote", "-/0"},
			{"legacy", "provider-east", "legacy-alpha-0a1b2c", "Terminating", "LocalAndRemote", "0/0"},
			{"reports", "provider-east", "reports", "Failed", "Remote", "0/0"},
			{"reports", "provider-west", "reports", "Pending", "Remote", "0/0"},
			{"shop", "provider-east", "shop-alpha-3f9a2c", "Ready", "LocalAndRemote", "2/4"},
			{"shop", "provider-west", "shop-alpha-3f9a2c", "Ready", "LocalAndRemote", "1/4"},
		}
		if s.Table == nil || strings.Join(s.Table.Columns, ",") != strings.Join(offloadedNamespaceColumns, ",") {
			t.Fatalf("table = %+v, want the columns %v", s.Table, offloadedNamespaceColumns)
		}
		if len(s.Table.Rows) != len(want) || len(s.OffloadedNamespaces) != len(want) {
			t.Fatalf("%d rows and %d offloaded namespaces, want %d: %v", len(s.Table.Rows), len(s.OffloadedNamespaces), len(want), s.Table.Rows)
		}
		for i, row := range s.Table.Rows {
			if strings.Join(row, "|") != strings.Join(want[i], "|") {
				t.Errorf("row %d = %v\nwant      %v", i, row, want[i])
			}
		}
	})

	t.Run("the report holds the cluster ID, the message and the pod counts of each row", func(t *testing.T) {
		want := OffloadedNamespace{Namespace: "reports", Peer: "provider-east", ClusterID: idEast, RemoteNamespace: "reports", Phase: "Failed",
			Message: "namespace reports already exists in the provider: EnforceSameName needs a free name", PodOffloadingStrategy: "Remote"}
		if got := s.OffloadedNamespaces[3]; got != want {
			t.Errorf("offloaded namespace = %+v\nwant                  %+v", got, want)
		}
		if got := s.OffloadedNamespaces[5]; got.PeerPods != 2 || got.TotalPods != 4 {
			t.Errorf("shop on provider-east has %d of %d pods, want 2 of 4", got.PeerPods, got.TotalPods)
		}
	})

	checks := []struct {
		name  string
		check string
		want  Status
		// says is part of the message.
		says string
	}{
		{"a Ready twin namespace passes", "namespace/shop/provider-east", StatusOK, "offloaded to peer provider-east as shop-alpha-3f9a2c"},
		{"a Failed twin namespace fails with the agent's message and the peer", "namespace/reports/provider-east", StatusFailed,
			"namespace reports failed to offload to peer provider-east: namespace reports already exists in the provider"},
		{"a Failed twin namespace says where to look", "namespace/reports/provider-east", StatusFailed, "kubectl offload status peer provider-east"},
		{"a Pending twin namespace is a warning", "namespace/reports/provider-west", StatusWarning, "not offloaded to peer provider-west yet"},
		{"a namespace being unoffloaded is a warning", "namespace/legacy/provider-east", StatusWarning, "being unoffloaded from peer provider-east"},
		{"a namespace without a peer is a warning with the Ready condition's message", "namespace/idle", StatusWarning, "no virtual node matches the cluster selector"},
	}
	for _, tt := range checks {
		t.Run(tt.name, func(t *testing.T) {
			c := findCheck(s, tt.check)
			switch {
			case c == nil:
				t.Errorf("no check %s in %+v", tt.check, s.Checks)
			case c.Status != tt.want || !strings.Contains(c.Message, tt.says):
				t.Errorf("%s = %s %q, want %s saying %q", tt.check, c.Status, c.Message, tt.want, tt.says)
			}
		})
	}
}

// created matches the creation times of virtual nodes in the JSON report,
// which the API server sets.
var created = regexp.MustCompile(`"created": "[^"]*"`)

func TestOffloadSectionsJSONIsAStableContract(t *testing.T) {
	a := newAPIServer(t)
	a.createWorld(t, offloadScenarios[2].world())
	out, _, err := runOffloadStatus(t, a, "-o", "json")
	statustest.AssertResult(t, err, offloadScenarios[2].wantErr)
	framework.Golden(t, "offload.json", created.ReplaceAllString(out, `"created": "CREATED"`))

	var r struct {
		Sections []struct {
			Name                string           `json:"name"`
			Title               string           `json:"title"`
			VirtualNodes        []map[string]any `json:"virtualNodes"`
			OffloadedNamespaces []map[string]any `json:"offloadedNamespaces"`
		} `json:"sections"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, out)
	}
	if len(r.Sections) != 2 || r.Sections[0].Name != "virtualNodes" || r.Sections[1].Name != "offloadedNamespaces" {
		t.Fatalf("sections = %+v, want virtualNodes and offloadedNamespaces", r.Sections)
	}
	has := func(what string, items []map[string]any, keys ...string) {
		t.Helper()
		if len(items) == 0 {
			t.Errorf("no %s in the report", what)
			return
		}
		for _, k := range keys {
			if _, found := items[0][k]; !found {
				t.Errorf("%s have no field %s: %v", what, k, items[0])
			}
		}
	}
	has("virtualNodes", r.Sections[0].VirtualNodes,
		"name", "peer", "clusterID", "ready", "cpu", "memory", "pods", "runningPods", "totalPods", "created")
	has("offloadedNamespaces", r.Sections[1].OffloadedNamespaces,
		"namespace", "peer", "clusterID", "remoteNamespace", "phase", "podOffloadingStrategy", "peerPods", "totalPods")
	if ts, _ := r.Sections[0].VirtualNodes[0]["created"].(string); ts == "" {
		t.Errorf("created = %q, want the creation time of the node", ts)
	} else if _, err := time.Parse(time.RFC3339, ts); err != nil {
		t.Errorf("created = %q, want an RFC 3339 time: %v", ts, err)
	}
}

func TestWithoutTheNamespaceOffloadingCRDNamespacesSayToInstall(t *testing.T) {
	a := newAPIServer(t)
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: namespaceOffloadingCRD}}
	if err := a.Client.Delete(ctx, crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := install.ApplyCRDs(context.Background(), a.Client, time.Minute); err != nil {
			t.Errorf("reapplying the CRDs: %v", err)
		}
	})
	// Wait until the API server no longer serves NamespaceOffloadings.
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
			if r.Name == "namespaceoffloadings" {
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

	out, _, err := runOffloadStatus(t, fresh)
	statustest.AssertResult(t, err, "1 check failed: offloaded namespaces")
	framework.Golden(t, "offload-crd-missing.txt", out)
	r := Collect(ctx, fresh.env(), []Checker{offloadedNamespacesChecker{}})
	c := findCheck(r.Sections[0], "offloadedNamespaces")
	if c == nil || c.Status != StatusFailed || c.Message != "CRD namespaceoffloadings.offload.io not found: run kubectl offload install" {
		t.Errorf("offloadedNamespaces check = %+v, want failed, saying to run kubectl offload install", c)
	}
}
