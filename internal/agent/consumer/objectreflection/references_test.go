package objectreflection

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// podUsing is a pod bound to node that reads ConfigMap cm through env and
// Secret secret through a volume.
func podUsing(name, ns, node, cm, secret string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "app", Image: "busybox",
				EnvFrom:      []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "s", MountPath: "/s"}}}},
			Volumes: []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}},
		},
	}
}

func TestOnlyWhatPodsOfTheVirtualNodeReferenceLeavesTheConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	ctx := t.Context()
	secret := func(name string, labels map[string]string) {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: map[string][]byte{"p": []byte("s3cr3t")}}
		if _, err := e.kube.CoreV1().Secrets(e.consumer).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	copied := func(ctx context.Context, kind, name string) bool {
		if kind == kindConfigMap {
			return e.getConfigMap(ctx, t, e.twin, name) != nil
		}
		_, err := e.kube.CoreV1().Secrets(e.twin).Get(ctx, name, metav1.GetOptions{})
		return err == nil
	}
	e.configMap(t, e.consumer, "used", nil, map[string]string{"k": "v"})
	secret("used", nil)
	e.configMap(t, e.consumer, "local-only", nil, map[string]string{"k": "v"})
	secret("local-only", nil)
	secret("wanted", optIn)
	// A pod on another node references local-only: it stays on the consumer.
	for _, p := range []*corev1.Pod{podUsing("remote", e.consumer, virtualNode, "used", "used"),
		podUsing("local", e.consumer, "consumer-worker", "local-only", "local-only")} {
		if _, err := e.kube.CoreV1().Pods(e.consumer).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, waitTimeout, "what the offloaded pod references, and the opted-in Secret, are copied", func(ctx context.Context) bool {
		return copied(ctx, kindConfigMap, "used") && copied(ctx, kindSecret, "used") && copied(ctx, kindSecret, "wanted")
	})
	if copied(ctx, kindConfigMap, "local-only") || copied(ctx, kindSecret, "local-only") {
		t.Error("a ConfigMap or Secret no offloaded pod references was copied to the provider")
	}

	// The last pod that needs them goes: so do the copies.
	if err := e.kube.CoreV1().Pods(e.consumer).Delete(ctx, "remote", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the copies no pod needs are deleted, the opted-in one kept", func(ctx context.Context) bool {
		return !copied(ctx, kindConfigMap, "used") && !copied(ctx, kindSecret, "used") && copied(ctx, kindSecret, "wanted")
	})
}

// A pod's status updates, most of its events, enqueue none of the objects
// it references: each enqueued object's reconcile looks up every pod that
// references it. What a change adds or drops is enqueued.
func TestOnlyTheReferencesAPodEventChangesAreEnqueued(t *testing.T) {
	r := &Reflector{queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[key]())}
	t.Cleanup(r.queue.ShutDown)
	h := r.referenceEnqueuer("twin")
	drain := func() []key {
		var out []key
		for r.queue.Len() > 0 {
			k, _ := r.queue.Get()
			r.queue.Done(k)
			out = append(out, k)
		}
		slices.SortFunc(out, func(a, b key) int { return strings.Compare(a.kind+a.name, b.kind+b.name) })
		return out
	}
	want := func(names ...string) []key {
		var out []key
		for _, n := range names {
			kind, name, _ := strings.Cut(n, "/")
			out = append(out, key{kind: kind, twin: "twin", name: name})
		}
		return out
	}

	// The informer hands the handler its transform's podRefs.
	slim := func(p *corev1.Pod) any {
		o, err := referencesOnly(p)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	pod := podUsing("p", "ns", "node", "cm", "secret")
	h.OnAdd(slim(pod), false)
	if got := drain(); !slices.Equal(got, want(kindConfigMap+"/cm", kindSecret+"/secret")) {
		t.Errorf("a new pod enqueued %v", got)
	}
	running := pod.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	h.OnUpdate(slim(pod), slim(running))
	if got := drain(); len(got) != 0 {
		t.Errorf("a status update enqueued %v", got)
	}
	debugged := running.DeepCopy()
	debugged.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug",
		EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "debug-secret"}}}}}}}
	h.OnUpdate(slim(running), slim(debugged))
	if got := drain(); !slices.Equal(got, want(kindSecret+"/debug-secret")) {
		t.Errorf("an added ephemeral container enqueued %v", got)
	}
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: slim(debugged)})
	if got := drain(); !slices.Equal(got, want(kindConfigMap+"/cm", kindSecret+"/debug-secret", kindSecret+"/secret")) {
		t.Errorf("a deleted pod enqueued %v", got)
	}
}

func TestThePodInformersKeepOnlyTheReferences(t *testing.T) {
	pod := podUsing("p", "ns", "n", "settings", "creds")
	pod.UID, pod.ResourceVersion = "u1", "7"
	pod.Labels = map[string]string{"app": "p"}
	pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "pull"}}
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{
		ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "keys"}, Key: "k"}}}}
	pod.Status.Phase = corev1.PodRunning
	obj, err := referencesOnly(pod)
	if err != nil {
		t.Fatal(err)
	}
	slim, ok := obj.(*podRefs)
	if !ok {
		t.Fatalf("the transform gave a %T", obj)
	}
	want := []string{referenceKey(kindConfigMap, "keys"), referenceKey(kindConfigMap, "settings"), referenceKey(kindSecret, "creds"), referenceKey(kindSecret, "pull")}
	got, err := podReferences(slim)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("the slim pod references %v, the pod %v", got, want)
	}
	if slim.Name != "p" || slim.Namespace != "ns" || slim.UID != "u1" || slim.ResourceVersion != "7" || slim.Labels != nil {
		t.Errorf("the slim pod keeps another identity than the pod's: %+v", slim.ObjectMeta)
	}
	// Informers may transform an object again.
	if again, _ := referencesOnly(slim); again != slim {
		t.Errorf("transforming a podRefs again changed it: %v", again)
	}
	if key, err := cache.MetaNamespaceKeyFunc(slim); err != nil || key != "ns/p" {
		t.Errorf("the informer's key of the slim pod: %q, %v", key, err)
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: slim}
	if cms, secrets := references(tombstone); !cms.Has("settings") || !cms.Has("keys") || !secrets.Has("creds") || !secrets.Has("pull") {
		t.Errorf("the references of a tombstone: %v %v", cms, secrets)
	}
	if out, _ := referencesOnly("not a pod"); out != "not a pod" {
		t.Errorf("a tombstone or another object changed: %v", out)
	}
}
