package reflection

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
)

// UpdateRemote returns a copy of remote carrying the changes of local that a
// pod update can apply, and whether there were any. The mutable pod fields
// are the only ones considered:
//   - labels: they belong to reflection and are set to local's plus the
//     origin labels;
//   - annotations: local's are laid over remote's; keys reflection copied
//     before (AnnotationReflectedAnnotations) and local no longer has are
//     removed, and keys provider components added are kept;
//   - container and init container images, matched by container name;
//   - activeDeadlineSeconds, when it is set or shortened (it cannot be
//     unset or lengthened);
//   - tolerations, added only, after the same filtering as RemotePod.
//
// Resource changes need the resize subresource and are not handled here.
// It fails as RemotePod does when local cannot be offloaded.
func UpdateRemote(remote, local *corev1.Pod, o Origin) (*corev1.Pod, bool, error) {
	desired, err := RemotePod(local, o)
	if err != nil {
		return nil, false, err
	}
	out := remote.DeepCopy()
	out.Labels = desired.Labels
	out.Annotations = updatedAnnotations(remote.Annotations, desired.Annotations)
	updateImages(out.Spec.InitContainers, desired.Spec.InitContainers)
	updateImages(out.Spec.Containers, desired.Spec.Containers)
	if d := desired.Spec.ActiveDeadlineSeconds; d != nil {
		if cur := out.Spec.ActiveDeadlineSeconds; cur == nil || *d < *cur {
			out.Spec.ActiveDeadlineSeconds = ptr.To(*d)
		}
	}
	for _, t := range desired.Spec.Tolerations {
		if !slices.ContainsFunc(out.Spec.Tolerations, func(have corev1.Toleration) bool {
			return apiequality.Semantic.DeepEqual(have, t)
		}) {
			out.Spec.Tolerations = append(out.Spec.Tolerations, t)
		}
	}
	changed := !equalMaps(remote.Labels, out.Labels) ||
		!equalMaps(remote.Annotations, out.Annotations) ||
		!apiequality.Semantic.DeepEqual(remote.Spec, out.Spec)
	return out, changed, nil
}

// SpecChanged reports whether local has changes UpdateRemote would push to
// remote.
func SpecChanged(remote, local *corev1.Pod, o Origin) (bool, error) {
	_, changed, err := UpdateRemote(remote, local, o)
	return changed, err
}

// updatedAnnotations lays desired over current, removing the keys current
// says reflection copied and desired no longer has.
func updatedAnnotations(current, desired map[string]string) map[string]string {
	out := copyMap(current)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range reflectedKeys(current) {
		if _, ok := desired[k]; !ok {
			delete(out, k)
		}
	}
	if _, ok := desired[AnnotationReflectedAnnotations]; !ok {
		delete(out, AnnotationReflectedAnnotations)
	}
	maps.Copy(out, desired)
	return out
}

// reflectedKeys are the annotation keys recorded as copied by reflection.
func reflectedKeys(annotations map[string]string) []string {
	var out []string
	for _, k := range strings.Split(annotations[AnnotationReflectedAnnotations], ",") {
		if k != "" {
			out = append(out, k)
		}
	}
	return out
}

// updateImages sets the image of every container in have to that of the
// container of the same name in want.
func updateImages(have, want []corev1.Container) {
	for i := range have {
		for _, w := range want {
			if w.Name == have[i].Name {
				have[i].Image = w.Image
			}
		}
	}
}
