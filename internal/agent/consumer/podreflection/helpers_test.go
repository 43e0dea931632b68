package podreflection

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// waitTimeout bounds each wait of these tests.
const waitTimeout = 30 * time.Second

// nodeIP is the virtual node address the tests publish as host IP.
const nodeIP = "10.99.0.1"

// env is one API server playing both clusters: a consumer namespace whose
// NamespaceOffloading maps it to a twin namespace, and a started Handler.
type env struct {
	cfg      *rest.Config
	admin    client.Client
	kube     kubernetes.Interface
	consumer string // the consumer namespace
	twin     string // its twin namespace
	node     string // the virtual node name
	h        *Handler
	notified chan *corev1.Pod
	// events are the remote pod events the handler recorded on consumer pods.
	events *record.FakeRecorder
}

// tweaks change the handler's options before it is created.
func newEnv(t *testing.T, tweaks ...func(*Options)) *env {
	t.Helper()
	ctx := t.Context()
	cfg := envtest.APIServer(t)
	admin := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, admin)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{
		cfg: cfg, admin: admin, kube: kube,
		consumer: envtest.NewNamespace(t, admin, "consumer"),
		twin:     envtest.NewNamespace(t, admin, "twin"),
		node:     "offload-provider-" + rand.String(6),
		notified: make(chan *corev1.Pod, 100),
		events:   record.NewFakeRecorder(100),
	}
	providerID := string(uuid.NewUUID())
	no := &offloadv1alpha1.NamespaceOffloading{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.NamespaceOffloadingName, Namespace: e.consumer}}
	if err := admin.Create(ctx, no); err != nil {
		t.Fatal(err)
	}
	no.Status.RemoteNamespaces = []offloadv1alpha1.RemoteNamespaceStatus{{
		ClusterID: providerID, ClusterName: "provider", RemoteNamespace: e.twin, Phase: offloadv1alpha1.RemoteNamespaceReady,
	}}
	if err := admin.Status().Update(ctx, no); err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Provider: kube, Consumer: kube, ConsumerReader: admin,
		ConsumerClusterID: string(uuid.NewUUID()), ProviderClusterID: providerID,
		VirtualNodeName: e.node, NodeIP: nodeIP, Events: e.events,
		Logger: ktesting.NewLogger(t, ktesting.NewConfig()),
	}
	for _, tweak := range tweaks {
		tweak(&opts)
	}
	e.h, err = New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// notify registers a callback that records every notified pod.
func (e *env) notify(t *testing.T) {
	e.h.NotifyPods(t.Context(), func(p *corev1.Pod) {
		select {
		case e.notified <- p:
		default:
		}
	})
}

// waitNotified waits for a notified pod that satisfies ok.
func (e *env) waitNotified(t *testing.T, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case p := <-e.notified:
			if ok(p) {
				return p
			}
		case <-deadline:
			t.Fatalf("no notification: %s", what)
			return nil
		}
	}
}

// localPod creates a consumer pod bound to the virtual node, reading
// ConfigMap config through env.
func (e *env) localPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.consumer, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName: e.node,
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example/app:1",
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "config"}}}},
			}},
		},
	}
	p, err := e.kube.CoreV1().Pods(e.consumer).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// remotePod creates a pod in the twin namespace directly, labelled as the
// reflection of pod UID uid of consumer clusterID.
func (e *env) remotePod(t *testing.T, name, clusterID, uid string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.twin, Labels: map[string]string{
			offloadv1alpha1.LabelOriginClusterID: clusterID, offloadv1alpha1.LabelOriginPodUID: uid,
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	p, err := e.kube.CoreV1().Pods(e.twin).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// getRemote reads the remote pod name, nil when there is none.
func (e *env) getRemote(ctx context.Context, t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := e.kube.CoreV1().Pods(e.twin).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return p
}

// providerThrough makes the handler reach the provider through wrap, which
// gets the transport to the API server: to count or fault requests.
func (e *env) providerThrough(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper) {
	t.Helper()
	e.h.opts.Provider = e.through(t, wrap)
}

// readsOf counts the GETs of single objects that pass through it whose
// path holds of ("/pods/", "/secrets/").
type readsOf struct {
	of   string
	next http.RoundTripper
	n    atomic.Int32
}

func (c *readsOf) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && strings.Contains(r.URL.Path, c.of) {
		c.n.Add(1)
	}
	return c.next.RoundTrip(r)
}

// consumerThrough makes the handler reach the consumer through wrap.
func (e *env) consumerThrough(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper) {
	t.Helper()
	e.h.opts.Consumer = e.through(t, wrap)
}

// through is a client of the test API server through wrap.
func (e *env) through(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(e.cfg)
	cfg.WrapTransport = wrap
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
