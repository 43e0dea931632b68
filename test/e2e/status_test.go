package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// statusReport is the part of `kubectl offload status -o json` the tests read.
type statusReport struct {
	Kind     string `json:"kind"`
	Healthy  bool   `json:"healthy"`
	Sections []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		Checks []struct {
			Name    string `json:"name"`
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"checks"`
		Tunnels []reportedTunnel `json:"tunnels"`
	} `json:"sections"`
}

// reportedTunnel is the part of a tunnel in the status report the tests read.
type reportedTunnel struct {
	Name           string        `json:"name"`
	Implementation string        `json:"implementation"`
	Endpoint       string        `json:"endpoint"`
	PeerPods       []cidrMapping `json:"peerPods"`
	LocalPods      []cidrMapping `json:"localPods"`
	MTU            int           `json:"mtu"`
	RxBytes        int64         `json:"rxBytes"`
	TxBytes        int64         `json:"txBytes"`
	Connected      bool          `json:"connected"`
	Hop            string        `json:"hop"`
}

// cidrMapping is a real CIDR and its view, in a reported tunnel.
type cidrMapping struct {
	Real string `json:"real"`
	View string `json:"view"`
}

// tunnel returns the tunnel called name in section, or nil.
func (r statusReport) tunnel(section, name string) *reportedTunnel {
	for _, s := range r.Sections {
		for i, tn := range s.Tunnels {
			if s.Name == section && tn.Name == name {
				return &s.Tunnels[i]
			}
		}
	}
	return nil
}

// checkMessage returns the message of check name in section, or "".
func (r statusReport) checkMessage(section, name string) string {
	_, msg := r.check(section, name)
	return msg
}

// sectionStatus returns the status of the section called name, or "".
func (r statusReport) sectionStatus(name string) string {
	for _, s := range r.Sections {
		if s.Name == name {
			return s.Status
		}
	}
	return ""
}

// checkStatus returns the status of check name in section, or "".
func (r statusReport) checkStatus(section, name string) string {
	status, _ := r.check(section, name)
	return status
}

// check returns the status and message of check name in section, or "".
func (r statusReport) check(section, name string) (status, message string) {
	for _, s := range r.Sections {
		for _, c := range s.Checks {
			if s.Name == section && c.Name == name {
				return c.Status, c.Message
			}
		}
	}
	return "", ""
}

// failedSections lists the sections whose status is failed.
func (r statusReport) failedSections() []string {
	var out []string
	for _, s := range r.Sections {
		if s.Status == "failed" {
			out = append(out, s.Name)
		}
	}
	return out
}

// failures lists the messages of the failed checks, for test logs.
func (r statusReport) failures() []string {
	var out []string
	for _, s := range r.Sections {
		for _, c := range s.Checks {
			if c.Status == "failed" {
				out = append(out, s.Name+"/"+c.Name+": "+c.Message)
			}
		}
	}
	return out
}

// offloadStatus runs `kubectl offload status -o json args...` against c and
// returns the report and the exit code.
func offloadStatus(t *testing.T, c *framework.Cluster, args ...string) (statusReport, int) {
	t.Helper()
	return statusJSON(t, c, append([]string{"status", "-o", "json"}, args...)...)
}

// statusJSON runs `kubectl offload args...`, a status command with -o json,
// against c and returns the report and the exit code.
func statusJSON(t *testing.T, c *framework.Cluster, args ...string) (statusReport, int) {
	t.Helper()
	return reportJSON(t, c, "StatusReport", args...)
}

// reportJSON runs `kubectl offload args...`, a reporting command (status,
// doctor) with -o json, against c and returns its report, of kind, and the
// exit code.
func reportJSON(t *testing.T, c *framework.Cluster, kind string, args ...string) (statusReport, int) {
	t.Helper()
	out, errOut, err := offload(t, c, args...)
	code := 0
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("kubectl offload %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Kind != kind {
		t.Fatalf("kubectl offload %s printed no %s (exit %d, %v):\nstdout: %s\nstderr: %s", strings.Join(args, " "), kind, code, err, out, errOut)
	}
	return r, code
}

func TestStatusBeforeInstallFailsTheNamespaceSection(t *testing.T) {
	c := framework.StartClusters(t, framework.ClusterOptions{Name: "status", FakeNodes: 2})[0]
	r, code := offloadStatus(t, c)
	if code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	if r.Healthy {
		t.Errorf("an empty cluster is reported healthy: %+v", r)
	}
	if got := r.sectionStatus("namespace"); got != "failed" {
		t.Errorf("namespace section is %q, want failed", got)
	}
}

func TestStatusFollowsTheHealthOfAnInstall(t *testing.T) {
	before := snapshotHost(t)
	t.Cleanup(func() { expectHostRestored(t, before) })
	c := framework.StartClusters(t, framework.ClusterOptions{Name: "status", FakeNodes: 2, RealNode: true})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	installAgent(t, c)

	r, code := offloadStatus(t, c, "--wait", "--timeout", "3m")
	if code != 0 || !r.Healthy || len(r.failedSections()) > 0 {
		t.Fatalf("after install: exit code %d, healthy %t, failed checks %q; want 0, true, none", code, r.Healthy, r.failures())
	}
	for _, s := range r.Sections {
		if s.Status != "ok" {
			t.Logf("section %s is %s: %+v", s.Name, s.Status, s.Checks)
		}
	}

	// Scaling offload-auth to 0 replicas breaks the control plane, and only it.
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "offload-auth", Namespace: "offload-system"}}
	if _, err := c.Kube.AppsV1().Deployments("offload-system").UpdateScale(ctx, "offload-auth", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("scaling offload-auth to 0: %v", err)
	}
	r, code = offloadStatus(t, c)
	if code != 1 || strings.Join(r.failedSections(), ",") != "controlPlane" {
		t.Errorf("offload-auth at 0 replicas: exit code %d, failed checks %q; want 1 and controlPlane only", code, r.failures())
	}
	if got := r.checkStatus("controlPlane", "deployment/offload-auth"); got != "failed" {
		t.Errorf("check deployment/offload-auth is %q, want failed", got)
	}

	// Deleting a CRD fails the CRDs section as well.
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if err := dyn.Resource(crds).Delete(ctx, "remotenamespaces.offload.io", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting CRD remotenamespaces.offload.io: %v", err)
	}
	r, code = offloadStatus(t, c)
	if code != 1 || strings.Join(r.failedSections(), ",") != "controlPlane,crds" {
		t.Errorf("without a CRD: exit code %d, failed checks %q; want 1 and controlPlane,crds only", code, r.failures())
	}
	if got := r.checkStatus("crds", "crd/remotenamespaces.offload.io"); got != "failed" {
		t.Errorf("check crd/remotenamespaces.offload.io is %q, want failed", got)
	}
}
