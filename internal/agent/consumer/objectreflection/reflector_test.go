package objectreflection

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

func TestConfigMapChangesReachTheTwinNamespace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	ctx := t.Context()
	cms := e.kube.CoreV1().ConfigMaps(e.consumer)

	local := e.configMap(t, e.consumer, "config", withOptIn(map[string]string{"app": "web"}), map[string]string{"k": "v1"})
	framework.Eventually(t, waitTimeout, "the ConfigMap is copied with the origin label", func(ctx context.Context) bool {
		cm := e.getConfigMap(ctx, t, e.twin, "config")
		return cm != nil && cm.Data["k"] == "v1" && cm.Labels["app"] == "web" &&
			cm.Labels[offloadv1alpha1.LabelOriginClusterID] == e.clusterID
	})

	local.Data["k"] = "v2"
	if _, err := cms.Update(ctx, local, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the change reaches the copy", func(ctx context.Context) bool {
		cm := e.getConfigMap(ctx, t, e.twin, "config")
		return cm != nil && cm.Data["k"] == "v2"
	})

	if err := cms.Delete(ctx, "config", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the copy is deleted", func(ctx context.Context) bool {
		return e.getConfigMap(ctx, t, e.twin, "config") == nil
	})
}

func TestCopiesChangedOnTheProviderAreRestored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	e.configMap(t, e.consumer, "config", optIn, map[string]string{"k": "v1"})
	var remote *corev1.ConfigMap
	framework.Eventually(t, waitTimeout, "the ConfigMap is copied", func(ctx context.Context) bool {
		remote = e.getConfigMap(ctx, t, e.twin, "config")
		return remote != nil
	})
	remote.Data["k"] = "edited on the provider"
	if _, err := e.kube.CoreV1().ConfigMaps(e.twin).Update(t.Context(), remote, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the copy is restored", func(ctx context.Context) bool {
		cm := e.getConfigMap(ctx, t, e.twin, "config")
		return cm != nil && cm.Data["k"] == "v1"
	})
}

func TestSecretsAreReflectedButNotServiceAccountTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	ctx := t.Context()
	secrets := e.kube.CoreV1().Secrets(e.consumer)
	token := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "token", Labels: optIn, Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
		Type:       corev1.SecretTypeServiceAccountToken,
	}
	if _, err := secrets.Create(ctx, token, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	opaque := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "password", Labels: optIn}, Data: map[string][]byte{"p": []byte("s3cr3t")}}
	if _, err := secrets.Create(ctx, opaque, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the opaque Secret is copied and the token refused", func(ctx context.Context) bool {
		s, err := e.kube.CoreV1().Secrets(e.twin).Get(ctx, "password", metav1.GetOptions{})
		return err == nil && string(s.Data["p"]) == "s3cr3t" && e.r.Stats().Refused > 0
	})
	if _, err := e.kube.CoreV1().Secrets(e.twin).Get(ctx, "token", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("reading the token Secret in the twin namespace: got %v, want NotFound", err)
	}
}

func TestChangedImmutableConfigMapIsRecreated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	ctx := t.Context()
	cms := e.kube.CoreV1().ConfigMaps(e.consumer)
	immutable := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "frozen", Labels: optIn}, Data: map[string]string{"k": v}, Immutable: ptr.To(true)}
	}
	if _, err := cms.Create(ctx, immutable("v1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var first *corev1.ConfigMap
	framework.Eventually(t, waitTimeout, "the immutable ConfigMap is copied", func(ctx context.Context) bool {
		first = e.getConfigMap(ctx, t, e.twin, "frozen")
		return first != nil && ptr.Deref(first.Immutable, false)
	})

	// An immutable ConfigMap changes by being replaced.
	if err := cms.Delete(ctx, "frozen", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, immutable("v2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the copy is replaced", func(ctx context.Context) bool {
		cm := e.getConfigMap(ctx, t, e.twin, "frozen")
		return cm != nil && cm.Data["k"] == "v2" && cm.UID != first.UID && ptr.Deref(cm.Immutable, false)
	})
}

func TestServicesAreReflectedWithoutSelector(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	ctx := t.Context()
	services := e.kube.CoreV1().Services(e.consumer)
	web := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{
				Name: "http", Port: 80, TargetPort: intstr.FromString("http"), AppProtocol: ptr.To("http"),
			}},
		},
	}
	web, err := services.Create(ctx, web, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	headless := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"},
			Ports: []corev1.ServicePort{{Name: "sql", Port: 5432}},
		},
	}
	if _, err := services.Create(ctx, headless, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	framework.Eventually(t, waitTimeout, "the NodePort Service is copied as a selector-less ClusterIP Service", func(ctx context.Context) bool {
		s, err := e.kube.CoreV1().Services(e.twin).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false
		}
		want := []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http"), AppProtocol: ptr.To("http")}}
		return s.Spec.Type == corev1.ServiceTypeClusterIP && len(s.Spec.Selector) == 0 &&
			s.Spec.ClusterIP != "" && s.Spec.ClusterIP != corev1.ClusterIPNone &&
			s.Labels[offloadv1alpha1.LabelOriginClusterID] == e.clusterID &&
			len(s.Spec.Ports) == 1 && s.Spec.Ports[0].NodePort == 0 &&
			equalPorts(want, s.Spec.Ports)
	})
	framework.Eventually(t, waitTimeout, "the headless Service stays headless", func(ctx context.Context) bool {
		s, err := e.kube.CoreV1().Services(e.twin).Get(ctx, "db", metav1.GetOptions{})
		return err == nil && s.Spec.ClusterIP == corev1.ClusterIPNone && len(s.Spec.Selector) == 0
	})

	web.Spec.Ports = append(web.Spec.Ports, corev1.ServicePort{Name: "metrics", Port: 9090})
	if _, err := services.Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "a new port reaches the copy", func(ctx context.Context) bool {
		s, err := e.kube.CoreV1().Services(e.twin).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && len(s.Spec.Ports) == 2 && s.Spec.Ports[1].TargetPort == intstr.FromInt32(9090)
	})
}

// equalPorts compares the fields of service ports that reflection copies.
func equalPorts(a, b []corev1.ServicePort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Protocol != b[i].Protocol || a[i].Port != b[i].Port ||
			a[i].TargetPort != b[i].TargetPort || ptr.Deref(a[i].AppProtocol, "") != ptr.Deref(b[i].AppProtocol, "") {
			return false
		}
	}
	return true
}

func TestEndpointSlicesFollowTheirService(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	ctx := t.Context()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if _, err := e.kube.CoreV1().Services(e.consumer).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slices := e.kube.DiscoveryV1().EndpointSlices(e.consumer)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-abcde", Labels: map[string]string{
			discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.1.7"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName:   ptr.To("worker-1"),
			Zone:       ptr.To("zone-a"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: e.consumer, Name: "web-0"},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
	}
	slice, err := slices.Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	getRemote := func(ctx context.Context) *discoveryv1.EndpointSlice {
		s, err := e.kube.DiscoveryV1().EndpointSlices(e.twin).Get(ctx, "web-abcde", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return s
	}
	framework.Eventually(t, waitTimeout, "the slice is copied, managed by reflection, without consumer names", func(ctx context.Context) bool {
		s := getRemote(ctx)
		if s == nil || len(s.Endpoints) != 1 || len(s.Ports) != 1 {
			return false
		}
		ep := s.Endpoints[0]
		return s.Labels[discoveryv1.LabelManagedBy] == reflection.ManagedByReflection &&
			s.Labels[discoveryv1.LabelServiceName] == "web" &&
			s.Labels[offloadv1alpha1.LabelOriginClusterID] == e.clusterID &&
			ep.Addresses[0] == "10.244.1.7" && ptr.Deref(ep.Conditions.Ready, false) &&
			ep.NodeName == nil && ep.Zone == nil && ep.TargetRef == nil &&
			ptr.Deref(s.Ports[0].Port, 0) == 8080
	})

	slice.Endpoints[0].Addresses = []string{"10.244.2.9"}
	if _, err := slices.Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "a new address reaches the copy", func(ctx context.Context) bool {
		s := getRemote(ctx)
		return s != nil && len(s.Endpoints) == 1 && s.Endpoints[0].Addresses[0] == "10.244.2.9"
	})

	// The test API server has no garbage collector: the consumer slice
	// outlives its Service, but its copy must not.
	if err := e.kube.CoreV1().Services(e.consumer).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the Service's copy and its slice's are deleted", func(ctx context.Context) bool {
		_, err := e.kube.CoreV1().Services(e.twin).Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && getRemote(ctx) == nil
	})
}

func TestObjectsOffloadDidNotCreateAreLeftAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	ctx := t.Context()
	theirs := e.configMap(t, e.twin, "shared", map[string]string{"owner": "provider"}, map[string]string{"k": "provider"})
	e.configMap(t, e.consumer, "shared", optIn, map[string]string{"k": "consumer"})
	framework.Eventually(t, waitTimeout, "the conflict is reported", func(context.Context) bool { return e.r.Stats().Conflicts > 0 })

	got := e.getConfigMap(ctx, t, e.twin, "shared")
	if got.ResourceVersion != theirs.ResourceVersion || got.Data["k"] != "provider" {
		t.Errorf("the provider's ConfigMap was changed: %+v", got)
	}
	if err := e.kube.CoreV1().ConfigMaps(e.consumer).Delete(ctx, "shared", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A consumer ConfigMap created after the deletion and reflected shows
	// the deletion was processed.
	e.configMap(t, e.consumer, "marker", optIn, nil)
	framework.Eventually(t, waitTimeout, "a later ConfigMap is reflected", func(ctx context.Context) bool {
		return e.getConfigMap(ctx, t, e.twin, "marker") != nil
	})
	if got := e.getConfigMap(ctx, t, e.twin, "shared"); got == nil || got.UID != theirs.UID {
		t.Errorf("the provider's ConfigMap was deleted")
	}
}

func TestOrphansAreCollectedAtStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	ours := originLabels(e.clusterID)
	e.configMap(t, e.twin, "orphan", ours, map[string]string{"k": "old"})
	stale := e.configMap(t, e.twin, "kept", ours, map[string]string{"k": "old"})
	e.configMap(t, e.consumer, "kept", optIn, map[string]string{"k": "new"})
	other := e.configMap(t, e.twin, "other-consumer", originLabels("another-cluster"), nil)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "gone", Labels: ours},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if _, err := e.kube.CoreV1().Services(e.twin).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	e.start(t)
	framework.Eventually(t, waitTimeout, "the orphans are deleted and the kept copy updated in place", func(ctx context.Context) bool {
		_, err := e.kube.CoreV1().Services(e.twin).Get(ctx, "gone", metav1.GetOptions{})
		kept := e.getConfigMap(ctx, t, e.twin, "kept")
		return apierrors.IsNotFound(err) && e.getConfigMap(ctx, t, e.twin, "orphan") == nil &&
			kept != nil && kept.Data["k"] == "new" && kept.UID == stale.UID
	})
	if got := e.getConfigMap(ctx, t, e.twin, "other-consumer"); got == nil || got.UID != other.UID {
		t.Errorf("another consumer's copy was deleted")
	}
}

func TestNamespacesNoLongerOffloadedStopBeingReflected(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	otherConsumer, otherTwin := e.addPair(t)
	e.start(t)

	e.r.mu.Lock()
	p := e.r.pairs[e.twin]
	e.r.mu.Unlock()
	e.removePair(e.twin)
	framework.Eventually(t, waitTimeout, "the pair's informers stop", func(context.Context) bool {
		select {
		case <-p.stopped:
			return e.r.Stats().Namespaces == 1
		default:
			return false
		}
	})

	e.configMap(t, e.consumer, "late", optIn, nil)
	e.configMap(t, otherConsumer, "late", optIn, nil)
	framework.Eventually(t, waitTimeout, "the namespace still offloaded is reflected", func(ctx context.Context) bool {
		return e.getConfigMap(ctx, t, otherTwin, "late") != nil
	})
	if e.getConfigMap(t.Context(), t, e.twin, "late") != nil {
		t.Error("a namespace no longer offloaded was reflected")
	}
}

func TestSlicesOfAServiceOffloadDidNotCreateAreNotReflected(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	ctx := t.Context()
	svc := func(ns string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		}
	}
	if _, err := e.kube.CoreV1().Services(e.twin).Create(ctx, svc(e.twin), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.CoreV1().Services(e.consumer).Create(ctx, svc(e.consumer), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "api-xyz", Labels: map[string]string{discoveryv1.LabelServiceName: "api"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.8"}}},
	}
	if _, err := e.kube.DiscoveryV1().EndpointSlices(e.consumer).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the Service conflict is reported and the slice refused", func(context.Context) bool {
		s := e.r.Stats()
		return s.Conflicts > 0 && s.Refused > 0
	})
	if _, err := e.kube.DiscoveryV1().EndpointSlices(e.twin).Get(ctx, "api-xyz", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("reading the slice in the twin namespace: got %v, want NotFound", err)
	}
}
