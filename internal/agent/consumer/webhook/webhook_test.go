package webhook

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
)

// offloadedNamespace creates a namespace labelled offloaded whose
// NamespaceOffloading has strategy.
func offloadedNamespace(t *testing.T, c client.Client, strategy offloadv1alpha1.PodOffloadingStrategy, labelled bool) string {
	t.Helper()
	ctx := context.Background()
	name := envtest.NewNamespace(t, c, "wh")
	no := offloading(strategy)
	no.Namespace = name
	if err := c.Create(ctx, no); err != nil {
		t.Fatal(err)
	}
	if labelled {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, offloadv1alpha1.LabelOffloaded))
		if err := c.Patch(ctx, ns, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
	}
	return name
}

// startAgent runs a controller-runtime manager with the webhook set up, as
// the controller-manager does, serving on 127.0.0.1, and returns a func
// that stops it.
func startAgent(t *testing.T, o Options, port int) (stop func()) {
	t.Helper()
	mgr, err := ctrlmanager.New(envtest.APIServer(t), ctrlmanager.Options{
		Scheme:                 scheme.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          ctrlwebhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: o.CertDir}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(mgr, o); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once bool
	stop = func() {
		if once {
			return
		}
		once = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager stopped with %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func createPod(t *testing.T, c client.Client, namespace string, edit ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	pod := newPod(edit...)
	pod.Name = "pod-" + rand.String(6)
	pod.Namespace = namespace
	if err := c.Create(context.Background(), pod); err != nil {
		t.Fatalf("creating pod %s/%s: %v", namespace, pod.Name, err)
	}
	return pod
}

func hasToleration(pod *corev1.Pod, want corev1.Toleration) bool {
	return slices.ContainsFunc(pod.Spec.Tolerations, func(t corev1.Toleration) bool {
		return t.MatchToleration(&want) && ptrEqual(t.TolerationSeconds, want.TolerationSeconds)
	})
}

func ptrEqual(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// unmutated checks that pod kept the scheduling the API server gives every pod.
func unmutated(t *testing.T, what string, pod *corev1.Pod) {
	t.Helper()
	if pod.Spec.Affinity != nil || hasToleration(pod, virtualToleration) {
		t.Errorf("%s was mutated: affinity %+v, tolerations %+v", what, pod.Spec.Affinity, pod.Spec.Tolerations)
	}
	for _, want := range defaultTolerations {
		if !hasToleration(pod, want) {
			t.Errorf("%s lost the default toleration %s", what, want.Key)
		}
	}
}

func TestTheAPIServerStoresPodsAsTheWebhookMutatesThem(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	remote := offloadedNamespace(t, c, offloadv1alpha1.Remote, true)
	unlabelled := offloadedNamespace(t, c, offloadv1alpha1.Remote, false)

	port, err := netlab.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.Namespace = envtest.NewNamespace(t, c, "wh-agent")
	o.ConfigurationName = "offload-webhook-" + rand.String(6)
	o.CertDir = filepath.Join(t.TempDir(), "certs")
	o.ExtraHosts = []string{"127.0.0.1"}
	stop := startAgent(t, o, port)

	cfg := webhookConfiguration(o.ConfigurationName, fmt.Sprintf("https://127.0.0.1:%d%s", port, Path), []string{remote, unlabelled})
	if err := c.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), cfg) })

	// The CertManager sets the caBundle; the API server then takes a moment
	// to call the webhook. Until it does, failurePolicy Ignore admits pods
	// unchanged, so wait for a dry-run pod to come back mutated.
	framework.Eventually(t, waitTimeout, "waiting for the API server to call the webhook", func(ctx context.Context) bool {
		probe := newPod()
		probe.Namespace = remote
		if err := c.Create(ctx, probe, client.DryRunAll); err != nil {
			t.Logf("dry-run pod: %v", err)
			return false
		}
		return probe.Spec.Affinity != nil
	})
	var stored admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), &stored); err != nil || len(stored.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Fatalf("the configuration has no caBundle (%v)", err)
	}

	pod := createPod(t, c, remote)
	if want := required(term(inVirtual)); !apiequality.Semantic.DeepEqual(pod.Spec.Affinity, want) {
		t.Errorf("a Remote pod was stored with affinity\n%s\nwant\n%s", toYAML(t, pod.Spec.Affinity), toYAML(t, want))
	}
	for _, want := range offloadTolerations(nil) {
		if !hasToleration(pod, want) {
			t.Errorf("a Remote pod was stored without toleration %s for ever; tolerations:\n%s", want.Key, toYAML(t, pod.Spec.Tolerations))
		}
	}
	for _, d := range defaultTolerations {
		if hasToleration(pod, d) {
			t.Errorf("a Remote pod kept the default %ds toleration of %s", *d.TolerationSeconds, d.Key)
		}
	}

	ds := createPod(t, c, remote, ownedBy("apps/v1", "DaemonSet"))
	unmutated(t, "a DaemonSet pod", ds)
	agent := createPod(t, c, remote, func(p *corev1.Pod) { p.Labels = map[string]string{"app.kubernetes.io/part-of": "kubectl-offload"} })
	unmutated(t, "a pod of the agent", agent)
	unmutated(t, "a pod of an unlabelled namespace", createPod(t, c, unlabelled))

	// A broken agent does not block pod creation: failurePolicy Ignore.
	stop()
	unmutated(t, "a pod created while the webhook is down", createPod(t, c, remote))
}

func TestSetupRefusesACertDirTheWebhookServerDoesNotRead(t *testing.T) {
	mgr, err := ctrlmanager.New(envtest.APIServer(t), ctrlmanager.Options{
		Scheme:                 scheme.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          ctrlwebhook.NewServer(ctrlwebhook.Options{CertDir: t.TempDir()}),
	})
	if err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.Namespace = "offload-system"
	o.CertDir = t.TempDir()
	if err := Setup(mgr, o); err == nil {
		t.Error("Setup accepted a CertDir the webhook server does not read")
	}
}
