package reflection

import (
	"bytes"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
)

// helmReleaseSecretType is the type of the Secrets Helm stores releases in.
const helmReleaseSecretType corev1.SecretType = "helm.sh/release.v1"

// RemoteConfigMap builds the reflection of local in o.TwinNamespace: same
// name, labels, annotations, data and immutability, plus the origin cluster
// label. It reports false for kube-root-ca.crt: every provider namespace has
// its own, kept by the provider's controller, and a consumer copy would be
// overwritten; pods that want the consumer CA get it with the reflected token.
func RemoteConfigMap(local *corev1.ConfigMap, o Origin) (*corev1.ConfigMap, bool) {
	if local.Name == rootCAConfigMap {
		return nil, false
	}
	l := local.DeepCopy()
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: ReflectedMeta(&l.ObjectMeta, o),
		Data:       l.Data,
		BinaryData: l.BinaryData,
		Immutable:  l.Immutable,
	}, true
}

// RemoteSecret builds the reflection of local in o.TwinNamespace like
// RemoteConfigMap, keeping its type. It reports false for Secrets that must
// not leave the consumer:
//   - service-account tokens: they are long-lived consumer credentials; a pod
//     gets a bound, short-lived token instead (RemoteTokenSecret);
//   - bootstrap tokens, which join nodes to the consumer;
//   - Helm releases, which no pod reads and which would show the consumer's
//     releases to Helm on the provider;
//   - offload.io/ Secrets (peering tokens, kubeconfigs, CAs), which are the
//     agent's own credentials.
func RemoteSecret(local *corev1.Secret, o Origin) (*corev1.Secret, bool) {
	switch {
	case local.Type == corev1.SecretTypeServiceAccountToken,
		local.Type == corev1.SecretTypeBootstrapToken,
		local.Type == helmReleaseSecretType,
		strings.HasPrefix(string(local.Type), offloadPrefix):
		return nil, false
	}
	l := local.DeepCopy()
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: ReflectedMeta(&l.ObjectMeta, o),
		Type:       l.Type,
		Data:       l.Data,
		Immutable:  l.Immutable,
	}, true
}

// ReflectedMeta is the metadata of the reflection of an object with meta m.
func ReflectedMeta(m *metav1.ObjectMeta, o Origin) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        m.Name,
		Namespace:   o.TwinNamespace,
		Labels:      mergeLabels(m.Labels, o.originLabels()),
		Annotations: copyMap(m.Annotations),
	}
}

// Reflected is a ConfigMap or a Secret.
type Reflected interface {
	*corev1.ConfigMap | *corev1.Secret
}

// NeedsUpdate reports whether remote differs from desired in what reflection
// owns: labels, annotations, data, type and immutability. Empty and missing
// maps are equal.
func NeedsUpdate[T Reflected](remote, desired T) bool {
	switch r := any(remote).(type) {
	case *corev1.ConfigMap:
		d := any(desired).(*corev1.ConfigMap)
		return !SameMeta(&r.ObjectMeta, &d.ObjectMeta) || !equalMaps(r.Data, d.Data) ||
			!equalBytes(r.BinaryData, d.BinaryData) || ptr.Deref(r.Immutable, false) != ptr.Deref(d.Immutable, false)
	case *corev1.Secret:
		d := any(desired).(*corev1.Secret)
		return !SameMeta(&r.ObjectMeta, &d.ObjectMeta) || !equalBytes(r.Data, d.Data) ||
			secretType(r) != secretType(d) || ptr.Deref(r.Immutable, false) != ptr.Deref(d.Immutable, false)
	}
	return false
}

// NeedsRecreate reports whether the update NeedsUpdate asks for cannot be
// made in place: remote is immutable and its content must change, or a
// Secret's type must change. The caller then deletes and creates it.
func NeedsRecreate[T Reflected](remote, desired T) bool {
	switch r := any(remote).(type) {
	case *corev1.ConfigMap:
		d := any(desired).(*corev1.ConfigMap)
		return ptr.Deref(r.Immutable, false) &&
			(!equalMaps(r.Data, d.Data) || !equalBytes(r.BinaryData, d.BinaryData) || !ptr.Deref(d.Immutable, false))
	case *corev1.Secret:
		d := any(desired).(*corev1.Secret)
		return secretType(r) != secretType(d) ||
			ptr.Deref(r.Immutable, false) && (!equalBytes(r.Data, d.Data) || !ptr.Deref(d.Immutable, false))
	}
	return false
}

// secretType is s's type, with the API server's default for an empty one.
func secretType(s *corev1.Secret) corev1.SecretType {
	if s.Type == "" {
		return corev1.SecretTypeOpaque
	}
	return s.Type
}

// SameMeta reports whether a and b have the same labels and annotations,
// nil and empty being equal.
func SameMeta(a, b *metav1.ObjectMeta) bool {
	return equalMaps(a.Labels, b.Labels) && equalMaps(a.Annotations, b.Annotations)
}

func equalBytes(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		if vb, ok := b[k]; !ok || !bytes.Equal(va, vb) {
			return false
		}
	}
	return true
}

// ReferencedObjects lists the names of the ConfigMaps and Secrets pod
// references, in its namespace: volumes (and their projections and
// secretRefs), env and envFrom of every container (init and ephemeral
// included), and imagePullSecrets. Optional references are listed too.
func ReferencedObjects(pod *corev1.Pod) (configMaps, secrets sets.Set[string]) {
	configMaps, secrets = sets.New[string](), sets.New[string]()
	for _, s := range pod.Spec.ImagePullSecrets {
		secrets.Insert(s.Name)
	}
	for _, v := range pod.Spec.Volumes {
		volumeReferences(v.VolumeSource, configMaps, secrets)
	}
	containers := append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, e := range pod.Spec.EphemeralContainers {
		containers = append(containers, corev1.Container(e.EphemeralContainerCommon))
	}
	for _, c := range containers {
		for _, f := range c.EnvFrom {
			if f.ConfigMapRef != nil {
				configMaps.Insert(f.ConfigMapRef.Name)
			}
			if f.SecretRef != nil {
				secrets.Insert(f.SecretRef.Name)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				configMaps.Insert(r.Name)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				secrets.Insert(r.Name)
			}
		}
	}
	configMaps.Delete("")
	secrets.Delete("")
	return configMaps, secrets
}

// volumeReferences adds the ConfigMaps and Secrets volume v reads.
func volumeReferences(v corev1.VolumeSource, configMaps, secrets sets.Set[string]) {
	secretRef := func(r *corev1.LocalObjectReference) {
		if r != nil {
			secrets.Insert(r.Name)
		}
	}
	switch {
	case v.ConfigMap != nil:
		configMaps.Insert(v.ConfigMap.Name)
	case v.Secret != nil:
		secrets.Insert(v.Secret.SecretName)
	case v.Projected != nil:
		for _, s := range v.Projected.Sources {
			if s.ConfigMap != nil {
				configMaps.Insert(s.ConfigMap.Name)
			}
			if s.Secret != nil {
				secrets.Insert(s.Secret.Name)
			}
		}
	case v.CSI != nil:
		secretRef(v.CSI.NodePublishSecretRef)
	case v.FlexVolume != nil:
		secretRef(v.FlexVolume.SecretRef)
	case v.ISCSI != nil:
		secretRef(v.ISCSI.SecretRef)
	case v.CephFS != nil:
		secretRef(v.CephFS.SecretRef)
	case v.RBD != nil:
		secretRef(v.RBD.SecretRef)
	case v.AzureFile != nil:
		secrets.Insert(v.AzureFile.SecretName)
	}
}
