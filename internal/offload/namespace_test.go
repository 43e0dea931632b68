package offload

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestOffloadingANamespaceThatDoesNotExistFailsAndWritesNothing(t *testing.T) {
	c := apiServer(t)
	newVirtualNode(t, c, "provider", nil)
	ns := "missing-" + rand.String(6)
	_, _, err := offload(t, c, ns)
	if !errors.Is(err, ErrNamespaceNotFound) || !strings.Contains(err.Error(), "kubectl create namespace "+ns) {
		t.Fatalf("error %v, want ErrNamespaceNotFound telling to create it", err)
	}
	assertNotOffloaded(t, c, ns)
}

func TestOffloadingNeedsAPeerThatMatchesTheSelector(t *testing.T) {
	c := apiServer(t)
	t.Run("a cluster without virtual nodes is told to peer first", func(t *testing.T) {
		ns := envtest.NewNamespace(t, c, "nopeer")
		_, _, err := offload(t, c, ns, "--wait=false")
		if !errors.Is(err, ErrNoPeer) || !strings.Contains(err.Error(), "kubectl offload peer out-of-band") {
			t.Fatalf("error %v, want ErrNoPeer telling to peer first", err)
		}
		assertNotOffloaded(t, c, ns)
	})
	t.Run("a selector no virtual node matches lists the virtual nodes", func(t *testing.T) {
		newVirtualNode(t, c, "eu-provider", map[string]string{"region": "eu"})
		ns := envtest.NewNamespace(t, c, "nomatch")
		_, _, err := offload(t, c, ns, "--selector", "region=us", "--wait=false")
		if !errors.Is(err, ErrNoPeer) || !strings.Contains(err.Error(), "offload-eu-provider (offload.io/remote-cluster-id=id-eu-provider, region=eu)") {
			t.Fatalf("error %v, want ErrNoPeer listing the virtual node and its labels", err)
		}
		assertNotOffloaded(t, c, ns)
	})
	t.Run("a node that is not a virtual node is no peer", func(t *testing.T) {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real-" + rand.String(5), Labels: map[string]string{"region": "us"}}}
		if err := c.Create(context.Background(), node); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), node) })
		ns := envtest.NewNamespace(t, c, "realnode")
		if _, _, err := offload(t, c, ns, "--selector", "region=us", "--wait=false"); !errors.Is(err, ErrNoPeer) {
			t.Fatalf("error %v, want ErrNoPeer", err)
		}
		assertNotOffloaded(t, c, ns)
	})
	t.Run("the Local strategy needs no peer", func(t *testing.T) {
		ns := envtest.NewNamespace(t, c, "local")
		_, stderr, err := offload(t, c, ns, "--pod-offloading-strategy", "Local", "--wait=false")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stderr, "stay here") {
			t.Errorf("stderr %q, want a warning that the pods stay here", stderr)
		}
		if no := getOffloading(t, c, ns); no == nil || no.Spec.PodOffloadingStrategy != offloadv1alpha1.Local {
			t.Errorf("NamespaceOffloading %+v, want one with the Local strategy", no)
		}
	})
}

func TestDryRunPrintsTheNamespaceOffloadingAndWritesNothing(t *testing.T) {
	c := apiServer(t)
	newVirtualNode(t, c, "dry-provider", map[string]string{"region": "eu"})
	const ns = "dry-run-demo"
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	args := []string{ns, "--dry-run", "--namespace-mapping-strategy", "EnforceSameName", "--pod-offloading-strategy", "remote", "--selector", "region in (eu,us),!gpu"}

	stdout, _, err := offload(t, c, append(args, "-o", "yaml")...)
	if err != nil {
		t.Fatal(err)
	}
	framework.Golden(t, "dry-run.yaml", stdout)
	if def, _, err := offload(t, c, args...); err != nil || def != stdout {
		t.Errorf("--dry-run without -o printed %q (err %v), want the same YAML", def, err)
	}
	stdout, _, err = offload(t, c, append(args, "-o", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := json.Unmarshal([]byte(stdout), &m); err != nil || m.Spec.PodOffloadingStrategy != offloadv1alpha1.Remote {
		t.Errorf("-o json printed %q (err %v), want the NamespaceOffloading as JSON", stdout, err)
	}
	assertNotOffloaded(t, c, ns)

	if _, _, err := offload(t, c, "missing-"+rand.String(6), "--dry-run"); !errors.Is(err, ErrNamespaceNotFound) {
		t.Errorf("a dry run on a missing namespace gave %v, want ErrNamespaceNotFound", err)
	}
	if _, _, err := offload(t, c, ns, "--dry-run", "--selector", "region=ap"); !errors.Is(err, ErrNoPeer) {
		t.Errorf("a dry run without a matching peer gave %v, want ErrNoPeer", err)
	}
}

func TestOffloadingAgainChangesOnlyWhatTheFlagsChange(t *testing.T) {
	c := apiServer(t)
	newVirtualNode(t, c, "idem-provider", nil)
	ns := envtest.NewNamespace(t, c, "idem")

	stdout, _, err := offload(t, c, ns, "--wait=false")
	if err != nil || stdout != "namespaceoffloading.offload.io/offloading created\n" {
		t.Fatalf("first run printed %q (err %v), want created", stdout, err)
	}
	first := getOffloading(t, c, ns)
	if first.Spec.NamespaceMappingStrategy != offloadv1alpha1.DefaultName || first.Spec.PodOffloadingStrategy != offloadv1alpha1.LocalAndRemote || first.Spec.ClusterSelector != nil {
		t.Errorf("spec %+v, want the defaults and no selector", first.Spec)
	}

	stdout, _, err = offload(t, c, ns, "--wait=false")
	if err != nil || stdout != "namespaceoffloading.offload.io/offloading unchanged\n" {
		t.Fatalf("second run printed %q (err %v), want unchanged", stdout, err)
	}
	if again := getOffloading(t, c, ns); again.ResourceVersion != first.ResourceVersion {
		t.Errorf("an unchanged run wrote the NamespaceOffloading")
	}

	stdout, _, err = offload(t, c, ns, "--wait=false", "--pod-offloading-strategy", "Remote", "--selector", "offload.io/remote-cluster-id=id-idem-provider")
	if err != nil || stdout != "namespaceoffloading.offload.io/offloading configured\n" {
		t.Fatalf("third run printed %q (err %v), want configured", stdout, err)
	}
	got := getOffloading(t, c, ns)
	if got.Spec.PodOffloadingStrategy != offloadv1alpha1.Remote || got.Spec.ClusterSelector == nil || got.UID != first.UID {
		t.Errorf("spec %+v, want the same object with strategy Remote and the selector", got.Spec)
	}
}

func TestWaitShowsEachTwinNamespaceUntilTheNamespaceIsReady(t *testing.T) {
	c := apiServer(t)
	newVirtualNode(t, c, "wait-provider", nil)
	ns := envtest.NewNamespace(t, c, "ready")
	twin := ns + "-consumer-1a2b3c"
	agent := actAsAgent(c, ns, anyOffloading, func(no *offloadv1alpha1.NamespaceOffloading) {
		no.Status.RemoteNamespaces = []offloadv1alpha1.RemoteNamespaceStatus{
			{ClusterID: "id-wait-provider", ClusterName: "provider", RemoteNamespace: twin, Phase: offloadv1alpha1.RemoteNamespaceReady},
		}
		setReady(no, metav1.ConditionTrue, "Ready", "")
	})
	_, stderr, err := offload(t, c, ns, "--timeout", "30s")
	if err != nil {
		t.Fatal(err)
	}
	if err := <-agent; err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"✓ provider: twin namespace " + twin + " Ready", "✓ Namespace " + ns + " offloaded to 1 peer"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q, want %q", stderr, want)
		}
	}
}

func TestWaitFailsAtOnceWhenATwinNamespaceFailed(t *testing.T) {
	c := apiServer(t)
	newVirtualNode(t, c, "clash-provider", nil)
	ns := envtest.NewNamespace(t, c, "clash")
	const why = "namespace is taken on the provider: use --namespace-mapping-strategy DefaultName"
	agent := actAsAgent(c, ns, anyOffloading, func(no *offloadv1alpha1.NamespaceOffloading) {
		no.Status.RemoteNamespaces = []offloadv1alpha1.RemoteNamespaceStatus{
			{ClusterID: "id-clash-provider", ClusterName: "provider", RemoteNamespace: ns, Phase: offloadv1alpha1.RemoteNamespaceFailed, Message: why},
		}
		setReady(no, metav1.ConditionFalse, "RemoteNamespaceFailed", why)
	})
	start := time.Now()
	_, stderr, err := offload(t, c, ns, "--namespace-mapping-strategy", "EnforceSameName", "--timeout", "50s")
	if err := <-agent; err != nil {
		t.Fatal(err)
	}
	var failed *RemoteNamespaceFailedError
	if !errors.As(err, &failed) || failed.Message != why || failed.ClusterName != "provider" {
		t.Fatalf("error %v, want a RemoteNamespaceFailedError with the agent's message", err)
	}
	if time.Since(start) > 40*time.Second {
		t.Errorf("the failure took %s to show, want it at once", time.Since(start))
	}
	if !strings.Contains(stderr, "✗ provider: twin namespace "+ns+": "+why) {
		t.Errorf("stderr %q, want a ✗ line with the agent's message", stderr)
	}
}

func TestWaitGivesUpAfterTheTimeoutAndSaysWhereToLook(t *testing.T) {
	c := apiServer(t)
	newVirtualNode(t, c, "slow-provider", nil)
	ns := envtest.NewNamespace(t, c, "slow")
	_, _, err := offload(t, c, ns, "--timeout", "300ms")
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "kubectl get namespaceoffloading -n "+ns+" offloading -o yaml") {
		t.Fatalf("error %v, want ErrTimeout pointing at the NamespaceOffloading", err)
	}
	if getOffloading(t, c, ns) == nil {
		t.Errorf("a timed-out wait removed the NamespaceOffloading; the agent may still get there")
	}
}

func TestWaitIgnoresTheReadyStatusOfAnOlderSpec(t *testing.T) {
	c := apiServer(t)
	newVirtualNode(t, c, "stale-provider", nil)
	ns := envtest.NewNamespace(t, c, "stale")
	if _, _, err := offload(t, c, ns, "--wait=false"); err != nil {
		t.Fatal(err)
	}
	if err := <-actAsAgent(c, ns, anyOffloading, func(no *offloadv1alpha1.NamespaceOffloading) {
		setReady(no, metav1.ConditionTrue, "Ready", "")
	}); err != nil {
		t.Fatal(err)
	}
	_, _, err := offload(t, c, ns, "--pod-offloading-strategy", "Remote", "--timeout", "300ms")
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "has not seen the new spec") {
		t.Fatalf("error %v, want a timeout: the Ready condition is for the previous spec", err)
	}
	// Once the agent reports on the new spec, the wait is over.
	agent := actAsAgent(c, ns, func(no *offloadv1alpha1.NamespaceOffloading) bool { return no.Generation == 2 }, func(no *offloadv1alpha1.NamespaceOffloading) {
		setReady(no, metav1.ConditionTrue, "Ready", "")
	})
	if _, _, err := offload(t, c, ns, "--pod-offloading-strategy", "Remote", "--timeout", "30s"); err != nil {
		t.Fatal(err)
	}
	if err := <-agent; err != nil {
		t.Fatal(err)
	}
}

func TestANamespaceBeingUnoffloadedIsNotOffloadedAgain(t *testing.T) {
	c := apiServer(t)
	newVirtualNode(t, c, "busy-provider", nil)
	ns := envtest.NewNamespace(t, c, "busy")
	no := &offloadv1alpha1.NamespaceOffloading{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.NamespaceOffloadingName, Namespace: ns, Finalizers: []string{testFinalizer}}}
	if err := c.Create(context.Background(), no); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeFinalizer(t, c, ns) })
	if err := c.Delete(context.Background(), no); err != nil {
		t.Fatal(err)
	}
	if _, _, err := offload(t, c, ns, "--wait=false"); !errors.Is(err, ErrBeingUnoffloaded) {
		t.Fatalf("error %v, want ErrBeingUnoffloaded", err)
	}
}

// testFinalizer stands for the agent's finalizer.
const testFinalizer = "offload.io/test-cleanup"

// removeFinalizer removes testFinalizer from ns's NamespaceOffloading, as
// the agent does once it cleaned up.
func removeFinalizer(t *testing.T, c client.Client, ns string) {
	t.Helper()
	no := getOffloading(t, c, ns)
	if no == nil {
		return
	}
	no.Finalizers = nil
	if err := c.Update(context.Background(), no); err != nil {
		t.Error(err)
	}
}
