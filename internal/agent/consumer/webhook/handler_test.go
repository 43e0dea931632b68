package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// failingReader fails every read, like a cache that has not started.
type failingReader struct{ client.Reader }

func (failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("the cache is not started")
}

// podRequest is the admission request the API server sends for op on pod.
func podRequest(t *testing.T, op admissionv1.Operation, namespace string, pod *corev1.Pod) admission.Request {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "1",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: namespace,
		Name:      pod.Name,
		Operation: op,
		Object:    runtime.RawExtension{Raw: raw},
	}}
}

// updateRequest is the admission request of an update of old to pod.
func updateRequest(t *testing.T, namespace string, old, pod *corev1.Pod) admission.Request {
	t.Helper()
	req := podRequest(t, admissionv1.Update, namespace, pod)
	raw, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	req.OldObject = runtime.RawExtension{Raw: raw}
	return req
}

// offloadedPod is a pod as the webhook admitted it in a Remote namespace.
func offloadedPod() *corev1.Pod {
	p := newPod()
	p.Namespace = ""
	Mutate(p, offloading(offloadv1alpha1.Remote), Options{})
	return p
}

// patchPaths are the operations and paths of a response's JSON patch.
func patchPaths(resp admission.Response) []string {
	var out []string
	for _, p := range resp.Patches {
		out = append(out, p.Operation+" "+p.Path)
	}
	slices.Sort(out)
	return out
}

func TestThePodMutatorPatchesOnlyNewPodsOfOffloadedNamespaces(t *testing.T) {
	ctx := context.Background()
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	offloaded := offloadedNamespace(t, c, offloadv1alpha1.Remote, false)
	plain := envtest.NewNamespace(t, c, "wh-handler")
	bare := func(edit ...func(*corev1.Pod)) *corev1.Pod {
		p := newPod(edit...)
		p.Namespace = ""
		return p
	}
	added := []string{"add /spec/affinity", "add /spec/tolerations"}

	tests := []struct {
		name        string
		client      client.Reader
		reader      client.Reader
		req         admission.Request
		wantPatches []string
		wantWarning bool
	}{
		{
			name:        "a new pod of an offloaded namespace gets the affinity and the tolerations",
			client:      c,
			req:         podRequest(t, admissionv1.Create, offloaded, bare()),
			wantPatches: added,
		},
		{
			name:        "the API server is read when the cache has no NamespaceOffloading",
			client:      failingReader{},
			reader:      c,
			req:         podRequest(t, admissionv1.Create, offloaded, bare()),
			wantPatches: added,
		},
		{
			name:   "a new pod of a namespace without NamespaceOffloading is not patched",
			client: c,
			req:    podRequest(t, admissionv1.Create, plain, bare()),
		},
		{
			name:   "a new DaemonSet pod is not patched",
			client: c,
			req:    podRequest(t, admissionv1.Create, offloaded, bare(ownedBy("apps/v1", "DaemonSet"))),
		},
		{
			name:   "an update that keeps the pod's tolerations is not patched",
			client: c,
			req:    updateRequest(t, offloaded, offloadedPod(), offloadedPod()),
		},
		{
			name:        "an update written from the user's manifest gets the offloading tolerations back",
			client:      c,
			req:         updateRequest(t, offloaded, offloadedPod(), bare()),
			wantPatches: []string{"add /spec/tolerations"},
		},
		{
			name:        "a pod whose NamespaceOffloading cannot be read is admitted unchanged, with a warning",
			client:      failingReader{},
			req:         podRequest(t, admissionv1.Create, offloaded, bare()),
			wantWarning: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hook := NewAdmissionWebhook(&PodMutator{Client: tt.client, Reader: tt.reader}, scheme.Scheme)
			resp := hook.Handle(ctx, tt.req)
			if !resp.Allowed {
				t.Fatalf("the pod was denied: %+v", resp.Result)
			}
			if got := patchPaths(resp); !slices.Equal(got, tt.wantPatches) {
				t.Errorf("patch = %q, want %q", got, tt.wantPatches)
			}
			warned := slices.ContainsFunc(resp.Warnings, func(w string) bool { return strings.HasPrefix(w, FailureWarning) })
			if warned != tt.wantWarning {
				t.Errorf("warnings = %q, want the failure warning: %t", resp.Warnings, tt.wantWarning)
			}
		})
	}
}

func TestThePodMutatorKeepsPodsWithStorageOfThisClusterOffTheVirtualNodes(t *testing.T) {
	ctx := context.Background()
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	claim := func(ns, name, class string) {
		t.Helper()
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if err := c.Create(ctx, pvc); err != nil {
			t.Fatal(err)
		}
	}
	mounting := func(claim string) *corev1.Pod {
		p := newPod(func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
		})
		p.Namespace = ""
		return p
	}
	for _, strategy := range []offloadv1alpha1.PodOffloadingStrategy{offloadv1alpha1.LocalAndRemote, offloadv1alpha1.Remote} {
		ns := offloadedNamespace(t, c, strategy, false)
		claim(ns, "local", "standard")
		claim(ns, "remote", offloadv1alpha1.StorageClassName)
		hook := NewAdmissionWebhook(&PodMutator{Client: c}, scheme.Scheme)
		for _, tc := range []struct {
			claim   string
			virtual bool
		}{{"local", false}, {"remote", true}, {"not-created-yet", true}} {
			t.Run(fmt.Sprintf("%s: a pod with claim %s may run on a virtual node: %v", strategy, tc.claim, tc.virtual), func(t *testing.T) {
				pod := mounting(tc.claim)
				resp := hook.Handle(ctx, podRequest(t, admissionv1.Create, ns, pod))
				if !resp.Allowed || len(resp.Warnings) > 0 {
					t.Fatalf("response = %+v, want allowed without warnings", resp)
				}
				patched := applyPatch(t, pod, resp)
				virtual := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "offload-p", Labels: map[string]string{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode}}}
				ok, err := nodeaffinity.GetRequiredNodeAffinity(patched).Match(virtual)
				if err != nil || ok != tc.virtual {
					t.Errorf("the pod's required affinity matches a virtual node: %v (%v), want %v; affinity %+v", ok, err, tc.virtual, patched.Spec.Affinity)
				}
			})
		}
	}
}

// applyPatch returns pod with resp's JSON patch applied.
func applyPatch(t *testing.T, pod *corev1.Pod, resp admission.Response) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	raw = applyPatchTo(t, raw, resp)
	out := &corev1.Pod{}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// applyPatchTo returns the JSON document raw with resp's JSON patch applied.
func applyPatchTo(t *testing.T, raw []byte, resp admission.Response) []byte {
	t.Helper()
	ops, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(ops)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("applying %s: %v", ops, err)
	}
	return patched
}

func TestThePodMutatorAdmitsAPodItCannotDecode(t *testing.T) {
	hook := NewAdmissionWebhook(&PodMutator{Client: failingReader{}}, scheme.Scheme)
	req := podRequest(t, admissionv1.Create, "demo", newPod())
	req.Object.Raw = []byte("{not json")
	resp := hook.Handle(context.Background(), req)
	if !resp.Allowed || len(resp.Patches) != 0 || len(resp.Warnings) == 0 {
		t.Errorf("response = allowed %t, %d patches, warnings %q; want allowed, unpatched, with a warning", resp.Allowed, len(resp.Patches), resp.Warnings)
	}
}

// The patch sets the tolerations and the affinity Mutate gives the pod,
// and leaves the rest of the request as it came, fields this build does
// not know included.
func TestThePodMutatorsPatchKeepsWhatItDoesNotChange(t *testing.T) {
	ctx := context.Background()
	c := envtest.NewClient(t, envtest.APIServer(t))
	envtest.InstallCRDs(t, c)
	ns := offloadedNamespace(t, c, offloadv1alpha1.Remote, false)
	pod := newPod(func(p *corev1.Pod) {
		p.Namespace = ""
		p.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
	})
	req := podRequest(t, admissionv1.Create, ns, pod)
	// A field of a newer API, unknown to this build's types.
	var doc map[string]any
	if err := json.Unmarshal(req.Object.Raw, &doc); err != nil {
		t.Fatal(err)
	}
	doc["spec"].(map[string]any)["futureField"] = map[string]any{"enabled": true}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	req.Object.Raw = raw

	resp := NewAdmissionWebhook(&PodMutator{Client: c}, scheme.Scheme).Handle(ctx, req)
	patched := applyPatchTo(t, raw, resp)
	var got struct {
		Spec struct {
			corev1.PodSpec
			FutureField map[string]any `json:"futureField"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	want := pod.DeepCopy()
	Mutate(want, offloading(offloadv1alpha1.Remote), Options{})
	// The whole pod, so that a field Mutate learns to change and the
	// patch does not carry shows here.
	var whole corev1.Pod
	if err := json.Unmarshal(patched, &whole); err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(&whole, want) {
		t.Errorf("the patched pod differs from Mutate's:\n got %+v\nwant %+v", whole.Spec, want.Spec)
	}
	if got.Spec.FutureField["enabled"] != true || len(got.Spec.Containers) != 1 || got.Spec.Containers[0].Image != "nginx" {
		t.Errorf("the patch changed what the webhook does not own: %s", patched)
	}
}
