package webhook

import (
	"context"
	"errors"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// PodMutator is the admission handler of the scheduling webhook: on pod
// creation it reads the namespace's NamespaceOffloading and answers with
// the JSON patch that Mutate implies. It allows every request, also when
// it fails: a denial would block pod creation, which failurePolicy Ignore
// is there to prevent, so a failure admits the pod unchanged with a
// warning, as an unreachable webhook would.
type PodMutator struct {
	// Client reads NamespaceOffloadings, normally from the manager's cache.
	Client client.Reader
	// Reader reads them from the API server when Client has none (the
	// cache has not started, or lags behind a new NamespaceOffloading).
	// Optional.
	Reader client.Reader
	// Options give the toleration seconds and the logger.
	Options Options

	decoder admission.Decoder
}

// NewAdmissionWebhook returns the http.Handler that serves m, decoding pods
// with scheme.
func NewAdmissionWebhook(m *PodMutator, scheme *runtime.Scheme) *admission.Webhook {
	m.decoder = admission.NewDecoder(scheme)
	return &admission.Webhook{Handler: m}
}

var podResource = corev1.SchemeGroupVersion.WithResource("pods")

// Handle implements admission.Handler.
func (m *PodMutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) || req.Resource.Group != podResource.Group ||
		req.Resource.Resource != podResource.Resource || req.SubResource != "" {
		return admission.Allowed("only pod creations and updates are mutated")
	}
	log := m.Options.Logger.WithValues("pod", klog.KRef(req.Namespace, req.Name))
	if m.decoder == nil {
		return m.failed(log, errors.New("the pod mutator has no decoder: build it with NewAdmissionWebhook"))
	}
	pod := &corev1.Pod{}
	if err := m.decoder.Decode(req, pod); err != nil {
		return m.failed(log, fmt.Errorf("decoding the pod: %w", err))
	}
	if req.Operation == admissionv1.Update {
		return m.update(log, req, pod)
	}
	// On creation the pod may carry no namespace; the request always does.
	namespace := req.Namespace
	log = m.Options.Logger.WithValues("pod", klog.KRef(namespace, podName(pod)))
	no, err := m.namespaceOffloading(ctx, namespace)
	if err != nil {
		return m.failed(log, err)
	}
	if no == nil {
		return admission.Allowed("the namespace is not offloaded")
	}
	before := scheduling(&pod.Spec)
	changed := Mutate(pod, no, m.Options)
	local, err := m.localClaim(ctx, namespace, pod)
	if err != nil {
		return m.failed(log, err)
	}
	if local != "" && KeepOffVirtualNodes(pod) {
		changed = true
		log.V(2).Info("Kept a pod off the virtual nodes: it mounts a claim of this cluster", "claim", local)
	}
	if !changed {
		return admission.Allowed("the pod needs no change")
	}
	resp := admission.Patched("", schedulingPatch(before, &pod.Spec)...)
	log.V(2).Info("Mutated a pod for offloading", "strategy", no.Spec.PodOffloadingStrategy, "operations", len(resp.Patches))
	return resp
}

// scheduling is a copy of the fields of spec that Mutate and
// KeepTolerations change: the tolerations and the affinity.
func scheduling(spec *corev1.PodSpec) corev1.PodSpec {
	out := corev1.PodSpec{Affinity: spec.Affinity.DeepCopy()}
	for _, t := range spec.Tolerations {
		out.Tolerations = append(out.Tolerations, *t.DeepCopy())
	}
	return out
}

// schedulingPatch is the JSON patch that sets the tolerations and the
// affinity of a pod whose spec was before (scheduling) to after's, where
// they differ. Patching only what the webhook changes costs far less than
// encoding and diffing the whole pod, and never drops a field of the
// request that this build does not know.
func schedulingPatch(before corev1.PodSpec, after *corev1.PodSpec) []jsonpatch.JsonPatchOperation {
	var ops []jsonpatch.JsonPatchOperation
	if !apiequality.Semantic.DeepEqual(before.Tolerations, after.Tolerations) {
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/tolerations", after.Tolerations))
	}
	if !apiequality.Semantic.DeepEqual(before.Affinity, after.Affinity) {
		if after.Affinity == nil {
			ops = append(ops, jsonpatch.NewOperation("remove", "/spec/affinity", nil))
		} else {
			ops = append(ops, jsonpatch.NewOperation("add", "/spec/affinity", after.Affinity))
		}
	}
	return ops
}

// update keeps the offloading tolerations of the pod before the update
// (KeepTolerations).
func (m *PodMutator) update(log klog.Logger, req admission.Request, pod *corev1.Pod) admission.Response {
	old := &corev1.Pod{}
	if err := m.decoder.DecodeRaw(req.OldObject, old); err != nil {
		return m.failed(log, fmt.Errorf("decoding the pod before the update: %w", err))
	}
	before := scheduling(&pod.Spec)
	if !KeepTolerations(old, pod) {
		return admission.Allowed("the update keeps the offloading tolerations")
	}
	log.V(2).Info("Kept the offloading tolerations of a pod through an update")
	return admission.Patched("", schedulingPatch(before, &pod.Spec)...)
}

// FailureWarning starts the warning of a pod admitted unchanged because
// the webhook failed.
const FailureWarning = "offload scheduling webhook: the pod was admitted without offloading tolerations and affinity"

// failed admits the pod unchanged, with a warning for the user, and logs err.
func (m *PodMutator) failed(log klog.Logger, err error) admission.Response {
	log.Error(err, "Admitting a pod unchanged")
	return admission.Allowed("").WithWarnings(FailureWarning + ": " + err.Error())
}

// localClaim returns the first claim pod mounts whose storage is this
// cluster's: of a StorageClass other than offload. Such a pod cannot run
// on a provider, and the scheduler must know it. A claim that does not
// exist yet is not judged.
func (m *PodMutator) localClaim(ctx context.Context, namespace string, pod *corev1.Pod) (string, error) {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		key := types.NamespacedName{Namespace: namespace, Name: v.PersistentVolumeClaim.ClaimName}
		claim := &corev1.PersistentVolumeClaim{}
		err := m.Client.Get(ctx, key, claim)
		if apierrors.IsNotFound(err) && m.Reader != nil {
			err = m.Reader.Get(ctx, key, claim)
		}
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return "", fmt.Errorf("reading claim %s: %w", key, err)
		}
		if ptr.Deref(claim.Spec.StorageClassName, "") != offloadv1alpha1.StorageClassName {
			return claim.Name, nil
		}
	}
	return "", nil
}

// namespaceOffloading returns the NamespaceOffloading of namespace, or nil
// when there is none.
func (m *PodMutator) namespaceOffloading(ctx context.Context, namespace string) (*offloadv1alpha1.NamespaceOffloading, error) {
	key := types.NamespacedName{Namespace: namespace, Name: offloadv1alpha1.NamespaceOffloadingName}
	no := &offloadv1alpha1.NamespaceOffloading{}
	err := m.Client.Get(ctx, key, no)
	if err != nil && m.Reader != nil {
		// The API server called the webhook because the namespace is
		// labelled offloaded, so a miss in the cache is worth a direct read.
		err = m.Reader.Get(ctx, key, no)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading NamespaceOffloading %s: %w", key, err)
	}
	return no, nil
}

// podName is the pod's name, or its generateName prefix before the API
// server picks a name.
func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName
}
