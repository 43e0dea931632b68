package status

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	k8stesting "k8s.io/client-go/testing"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/exit"
	"github.com/kubectl-offload/kubectl-offload/internal/status/statustest"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// runWait executes `kubectl offload status --wait args...` against f,
// checking again every millisecond instead of every 2s.
func runWait(t *testing.T, f *fixture, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	fac := f.factory(t)
	var out, errOut bytes.Buffer
	o := NewOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	o.interval = time.Millisecond
	err = statustest.Execute(newCmdStatus(fac, o), &out, &errOut, append([]string{"--wait"}, args...)...)
	return out.String(), errOut.String(), err
}

func TestWaitReturnsOnceTheInstallBecomesHealthy(t *testing.T) {
	f := healthy(t)
	auth := f.deployments[offloadv1alpha1.Auth]
	auth.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1}
	fac := f.factory(t)
	// Every round of checks starts with one read of the default namespace;
	// the third round finds offload-auth available.
	rounds := 0
	f.kube.PrependReactor("get", "namespaces", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() != "default" {
			return false, nil, nil
		}
		if rounds++; rounds == 3 {
			ready := auth.DeepCopy()
			ready.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
			if err := f.kube.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("deployments"), ready, statustest.Namespace); err != nil {
				t.Error(err)
			}
		}
		return false, nil, nil
	})

	var out, errOut bytes.Buffer
	o := NewOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	o.interval = time.Millisecond
	err := statustest.Execute(newCmdStatus(fac, o), &out, &errOut, "--wait", "--timeout", "1m")
	statustest.AssertResult(t, err, "")
	if rounds < 3 {
		t.Errorf("checked %d times, want at least 3", rounds)
	}
	framework.Golden(t, "healthy.txt", out.String())
	if strings.Count(errOut.String(), "not healthy yet") != 1 {
		t.Errorf("stderr = %q, want one progress line for the unchanged failure", errOut.String())
	}
}

func TestWaitGivesUpAfterTheTimeoutWithTheLastReport(t *testing.T) {
	f := healthy(t)
	delete(f.crds, "tenants.offload.io")
	out, errOut, err := runWait(t, f, "--timeout", "200ms", "-o", "json")
	statustest.AssertResult(t, err, "not healthy after 200ms: 1 check failed: crds")
	if !strings.Contains(out, `"healthy": false`) {
		t.Errorf("stdout = %s, want the last report", out)
	}
	if !strings.Contains(errOut, "Waiting up to 200ms") || strings.Contains(errOut, `"healthy"`) {
		t.Errorf("stderr = %q, want the progress and not the report", errOut)
	}
}

func TestAnUnreachableClusterIsOneErrorAndNoReport(t *testing.T) {
	f := healthy(t)
	fac := f.factory(t)
	f.kube.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	})
	out, errOut, err := run(t, fac, "-o", "json")
	if exit.Code(err) != 1 || err == nil || !strings.HasPrefix(err.Error(), "cannot reach the cluster") {
		t.Errorf("error = %v, want exit code 1 and cannot reach the cluster", err)
	}
	if out != "" || errOut != "" {
		t.Errorf("stdout = %q, stderr = %q; want nothing but the returned error", out, errOut)
	}
}
