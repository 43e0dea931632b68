package objectreflection

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// waitTimeout bounds each wait of these tests.
const waitTimeout = 30 * time.Second

// env is one API server playing both clusters: a consumer namespace and
// its twin namespace, and a Reflector between them.
type env struct {
	admin     client.Client
	kube      kubernetes.Interface
	clusterID string // the consumer's cluster ID
	consumer  string // the consumer namespace
	twin      string // its twin namespace
	r         *Reflector

	mu    sync.Mutex
	pairs map[string]string // what TwinNamespaces returns
}

// newEnv creates the namespaces and the Reflector, which is not started.
func newEnv(t *testing.T) *env {
	t.Helper()
	cfg := envtest.APIServer(t)
	admin := envtest.NewClient(t, cfg)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{
		admin: admin, kube: kube, clusterID: string(uuid.NewUUID()),
		consumer: envtest.NewNamespace(t, admin, "consumer"),
		twin:     envtest.NewNamespace(t, admin, "twin"),
	}
	e.pairs = map[string]string{e.twin: e.consumer}
	e.r, err = New(Options{
		Provider: kube, Consumer: kube, ConsumerClusterID: e.clusterID, NodeName: virtualNode,
		TwinNamespaces: func(context.Context) (map[string]string, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			return maps.Clone(e.pairs), nil
		},
		Resync: 100 * time.Millisecond,
		Logger: ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(1))),
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// addPair makes the Reflector reflect a new namespace pair too, and returns
// the consumer and twin namespaces.
func (e *env) addPair(t *testing.T) (consumer, twin string) {
	t.Helper()
	consumer = envtest.NewNamespace(t, e.admin, "consumer")
	twin = envtest.NewNamespace(t, e.admin, "twin")
	e.mu.Lock()
	e.pairs[twin] = consumer
	e.mu.Unlock()
	return consumer, twin
}

// removePair makes the Reflector stop reflecting twin.
func (e *env) removePair(twin string) {
	e.mu.Lock()
	delete(e.pairs, twin)
	e.mu.Unlock()
}

// start runs the Reflector until the test ends and waits until every pair
// has synced.
func (e *env) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.r.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	framework.Eventually(t, waitTimeout, "every namespace pair has synced", func(context.Context) bool {
		e.mu.Lock()
		want := len(e.pairs)
		e.mu.Unlock()
		e.r.mu.Lock()
		defer e.r.mu.Unlock()
		synced := 0
		for _, p := range e.r.pairs {
			if p.synced.Load() {
				synced++
			}
		}
		return synced == want
	})
}

// virtualNode is the virtual node of the Reflector's provider.
const virtualNode = "offload-provider"

// optIn is the label that copies a ConfigMap or Secret no pod references:
// the tests of the reflection engine use it; TestOnlyWhatPodsReference...
// tests the references.
var optIn = map[string]string{offloadv1alpha1.LabelReflect: "true"}

// withOptIn returns labels with the opt-in label.
func withOptIn(labels map[string]string) map[string]string {
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, optIn)
	return out
}

// originLabels are the labels of a copy made by the consumer clusterID.
func originLabels(clusterID string) map[string]string {
	return map[string]string{offloadv1alpha1.LabelOriginClusterID: clusterID}
}

// configMap creates a ConfigMap.
func (e *env) configMap(t *testing.T, ns, name string, labels, data map[string]string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Data: data}
	cm, err := e.kube.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// getConfigMap reads a ConfigMap, nil when there is none.
func (e *env) getConfigMap(ctx context.Context, t *testing.T, ns, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := e.kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm
}
