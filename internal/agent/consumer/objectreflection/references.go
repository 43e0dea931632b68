package objectreflection

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// The kinds whose objects are copied only when pods need them.
var (
	kindConfigMap = ConfigMaps.Name
	kindSecret    = Secrets.Name
)

// byReferenceIndex indexes pods by the objects they reference, as
// referenceKey.
const byReferenceIndex = "reference"

// referenceKey names the object name of kind (kindConfigMap or kindSecret)
// in byReferenceIndex.
func referenceKey(kind, name string) string { return kind + "/" + name }

// podRefs is what the pod informers keep of a pod: its name, namespace,
// UID and resource version, and the ConfigMaps and Secrets it references
// (reflection.ReferencedObjects), sorted. The index and the handlers read
// nothing else; a *corev1.Pod, even empty, is about 1.4 KiB, and a whole
// one, which the pod reflection holds already, several.
type podRefs struct {
	metav1.ObjectMeta
	configMaps, secrets []string
}

// referencesOnly is the transform of the pod informers: a *corev1.Pod
// becomes its podRefs. Anything else, such as a podRefs given again, is
// returned as it is.
func referencesOnly(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	cms, secrets := reflection.ReferencedObjects(pod)
	return &podRefs{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion},
		configMaps: sets.List(cms), secrets: sets.List(secrets),
	}, nil
}

// refsOf returns the podRefs obj is, or holds as a tombstone; nil for
// anything else. The pod informers hold nothing but podRefs.
func refsOf(obj any) *podRefs {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	r, _ := obj.(*podRefs)
	return r
}

// references returns the ConfigMaps and Secrets an informer's pod (a
// podRefs or its tombstone) references.
func references(obj any) (configMaps, secrets sets.Set[string]) {
	r := refsOf(obj)
	if r == nil {
		return nil, nil
	}
	return sets.New(r.configMaps...), sets.New(r.secrets...)
}

// podReferences is the index function of byReferenceIndex.
func podReferences(obj any) ([]string, error) {
	r := refsOf(obj)
	if r == nil {
		return nil, nil
	}
	keys := make([]string, 0, len(r.configMaps)+len(r.secrets))
	for _, n := range r.configMaps {
		keys = append(keys, referenceKey(kindConfigMap, n))
	}
	for _, n := range r.secrets {
		keys = append(keys, referenceKey(kindSecret, n))
	}
	return keys, nil
}

// optedIn says whether a consumer object asks to be copied whether or not
// a pod references it.
func optedIn(m metav1.Object) bool { return m.GetLabels()[offloadv1alpha1.LabelReflect] == "true" }

// referenced says whether a pod of p's namespace on the virtual node
// references the object name of kind (kindConfigMap or kindSecret), as the
// pod informer sees it.
func (p *pair) referenced(kind, name string) bool {
	pods, err := p.pods.GetIndexer().ByIndex(byReferenceIndex, referenceKey(kind, name))
	return err == nil && len(pods) > 0
}

// referencedLive asks the consumer's API server, not the cache, whether a
// pod of p's namespace on the virtual node references the object: the pod
// informer may not have seen a pod that pod reflection is creating right
// now, whose objects it has just copied.
func (r *Reflector) referencedLive(ctx context.Context, p *pair, kind, name string) (bool, error) {
	pods, err := r.opts.Consumer.CoreV1().Pods(p.consumer).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", r.opts.NodeName).String()})
	if err != nil {
		return false, fmt.Errorf("listing the pods of namespace %s on %s: %w", p.consumer, r.opts.NodeName, err)
	}
	for i := range pods.Items {
		cms, secrets := reflection.ReferencedObjects(&pods.Items[i])
		if kind == kindConfigMap && cms.Has(name) || kind == kindSecret && secrets.Has(name) {
			return true, nil
		}
	}
	return false, nil
}

// referenceEnqueuer enqueues the ConfigMaps and Secrets a pod of the twin
// namespace's pair starts or stops referencing: they may have to be
// copied, or their copies deleted. An update enqueues only the references
// it changes: most are status updates, which change none, and each
// enqueued object's reconcile looks up every pod that references it.
func (r *Reflector) referenceEnqueuer(twin string) cache.ResourceEventHandler {
	enqueue := func(cms, secrets sets.Set[string]) {
		for n := range cms {
			r.queue.Add(key{kind: kindConfigMap, twin: twin, name: n})
		}
		for n := range secrets {
			r.queue.Add(key{kind: kindSecret, twin: twin, name: n})
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { enqueue(references(obj)) },
		UpdateFunc: func(old, cur any) {
			oldCMs, oldSecrets := references(old)
			cms, secrets := references(cur)
			enqueue(oldCMs.SymmetricDifference(cms), oldSecrets.SymmetricDifference(secrets))
		},
		DeleteFunc: func(obj any) { enqueue(references(obj)) },
	}
}
