package reflection

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// Service-account token volumes.
//
// The ServiceAccount admission plugin gives pods a projected volume named
// kube-api-access-<random> with a token, the cluster CA (ConfigMap
// kube-root-ca.crt) and the namespace, mounted at
// /var/run/secrets/kubernetes.io/serviceaccount. On the provider none of the
// three is the consumer's. Without a reflected token the volume and its
// mounts go. With one, each source is replaced by the matching key of the
// reflected token Secret (see RemoteTokenSecret), so the pod reads the
// consumer's token, CA and namespace from the same paths. Reaching the
// consumer's API server from the provider is the network fabric's business.

// Keys of the reflected token Secret.
const (
	TokenSecretKeyToken     = "token"
	TokenSecretKeyCA        = "ca.crt"
	TokenSecretKeyNamespace = "namespace"
)

const (
	serviceAccountVolumePrefix = "kube-api-access-"
	rootCAConfigMap            = "kube-root-ca.crt"
	tokenSecretPrefix          = "offload-sa-token-"
	maxNameLength              = 253
)

// isServiceAccountVolume reports whether v is the volume the ServiceAccount
// admission plugin injects.
func isServiceAccountVolume(v corev1.Volume) bool {
	if v.Projected == nil || !strings.HasPrefix(v.Name, serviceAccountVolumePrefix) {
		return false
	}
	for _, s := range v.Projected.Sources {
		if s.ServiceAccountToken != nil {
			return s.ServiceAccountToken.Audience == ""
		}
	}
	return false
}

// translateServiceAccountVolumes drops the service-account volumes of spec
// and their mounts, or points them at tokenSecret when it is set.
func translateServiceAccountVolumes(spec *corev1.PodSpec, tokenSecret string) {
	dropped := map[string]bool{}
	var volumes []corev1.Volume
	for _, v := range spec.Volumes {
		if !isServiceAccountVolume(v) {
			volumes = append(volumes, v)
			continue
		}
		if tokenSecret == "" {
			dropped[v.Name] = true
			continue
		}
		v.Projected.Sources = tokenSources(v.Projected.Sources, tokenSecret)
		volumes = append(volumes, v)
	}
	spec.Volumes = volumes
	if len(dropped) == 0 {
		return
	}
	forEachContainer(spec, func(c *corev1.Container) {
		var mounts []corev1.VolumeMount
		for _, m := range c.VolumeMounts {
			if !dropped[m.Name] {
				mounts = append(mounts, m)
			}
		}
		c.VolumeMounts = mounts
	})
}

// tokenSources rewrites the sources of a service-account volume to read
// from the token Secret.
func tokenSources(in []corev1.VolumeProjection, secret string) []corev1.VolumeProjection {
	fromSecret := func(items ...corev1.KeyToPath) corev1.VolumeProjection {
		return corev1.VolumeProjection{Secret: &corev1.SecretProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret},
			Items:                items,
		}}
	}
	var out []corev1.VolumeProjection
	for _, s := range in {
		switch {
		case s.ServiceAccountToken != nil:
			out = append(out, fromSecret(corev1.KeyToPath{Key: TokenSecretKeyToken, Path: s.ServiceAccountToken.Path}))
		case s.ConfigMap != nil && s.ConfigMap.Name == rootCAConfigMap:
			out = append(out, fromSecret(s.ConfigMap.Items...))
		case s.DownwardAPI != nil:
			var keep []corev1.DownwardAPIVolumeFile
			var ns []corev1.KeyToPath
			for _, f := range s.DownwardAPI.Items {
				if f.FieldRef != nil && f.FieldRef.FieldPath == "metadata.namespace" {
					ns = append(ns, corev1.KeyToPath{Key: TokenSecretKeyNamespace, Path: f.Path, Mode: f.Mode})
					continue
				}
				keep = append(keep, f)
			}
			if len(keep) > 0 {
				out = append(out, corev1.VolumeProjection{DownwardAPI: &corev1.DownwardAPIProjection{Items: keep}})
			}
			if len(ns) > 0 {
				out = append(out, fromSecret(ns...))
			}
		default:
			out = append(out, s)
		}
	}
	return out
}

// TokenSecretName is the name of the Secret holding the reflected token of
// pod podName: offload-sa-token-<podName>, shortened with a hash when it
// would be too long for a name.
func TokenSecretName(podName string) string {
	name := tokenSecretPrefix + podName
	if len(name) <= maxNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(podName))
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
	head := strings.TrimRight(name[:maxNameLength-len(suffix)], ".-")
	return head + suffix
}

// RemoteTokenSecret builds the Secret, in o.TwinNamespace and named
// TokenSecretName(local.Name), that carries a consumer token for local's
// service account together with the consumer's CA and local's namespace. It
// is of type Opaque, so the provider's token controller leaves it alone, and
// carries the origin labels of local so it is collected with the pod.
// Callers should request a token bound to local, so it dies with the pod.
func RemoteTokenSecret(local *corev1.Pod, o Origin, token, caCert []byte) *corev1.Secret {
	labels := o.originLabels()
	labels[offloadv1alpha1.LabelOriginPodUID] = string(local.UID)
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        TokenSecretName(local.Name),
			Namespace:   o.TwinNamespace,
			Labels:      labels,
			Annotations: map[string]string{AnnotationOriginPod: local.Namespace + "/" + local.Name},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			TokenSecretKeyToken:     append([]byte(nil), token...),
			TokenSecretKeyCA:        append([]byte(nil), caCert...),
			TokenSecretKeyNamespace: []byte(local.Namespace),
		},
	}
}

// NeedsToken reports whether pod mounts the service-account token volume, so
// a token must be reflected for it to reach its consumer credentials.
func NeedsToken(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if isServiceAccountVolume(v) {
			return true
		}
	}
	return false
}
