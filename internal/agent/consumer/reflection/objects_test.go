package reflection_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

func localConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "web-config", Namespace: "shop", UID: "cm-uid", ResourceVersion: "7",
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "x"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "web", UID: "d"}}},
		Data:       map[string]string{"config.yaml": "a: 1"},
		BinaryData: map[string][]byte{"logo.png": {0x89, 0x50}},
	}
}

func localSecret(typ corev1.SecretType) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop", Labels: map[string]string{"app": "web"}},
		Type:       typ,
		Data:       map[string][]byte{"password": []byte("s3cret")},
	}
}

func TestRemoteConfigMap(t *testing.T) {
	local := localConfigMap()
	before := local.DeepCopy()
	got, ok := reflection.RemoteConfigMap(local, origin())
	if !ok {
		t.Fatal("a plain ConfigMap is not reflected")
	}
	want := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "web-config", Namespace: twinNS,
			Labels:      map[string]string{"app": "web", offloadv1alpha1.LabelOriginClusterID: consumerID},
			Annotations: map[string]string{"note": "x"}},
		Data:       map[string]string{"config.yaml": "a: 1"},
		BinaryData: map[string][]byte{"logo.png": {0x89, 0x50}},
	}
	assertEqual(t, "config map", want, got)
	got.Data["config.yaml"] = "changed"
	got.BinaryData["logo.png"][0] = 0
	assertEqual(t, "local config map", before, local)
	if !reflection.IsReflection(got, consumerID) {
		t.Error("the reflection is not recognised as ours")
	}

	root := localConfigMap()
	root.Name = "kube-root-ca.crt"
	if _, ok := reflection.RemoteConfigMap(root, origin()); ok {
		t.Error("kube-root-ca.crt is reflected over the provider's own")
	}
}

func TestRemoteSecret(t *testing.T) {
	tests := []struct {
		typ  corev1.SecretType
		want bool
	}{
		{corev1.SecretTypeOpaque, true},
		{"", true},
		{corev1.SecretTypeDockerConfigJson, true},
		{corev1.SecretTypeTLS, true},
		{corev1.SecretTypeServiceAccountToken, false},
		{corev1.SecretTypeBootstrapToken, false},
		{"helm.sh/release.v1", false},
		{"offload.io/peer-kubeconfig", false},
	}
	for _, tt := range tests {
		verb := map[bool]string{true: "is", false: "is not"}[tt.want]
		t.Run("a Secret of type "+string(tt.typ)+" "+verb+" reflected", func(t *testing.T) {
			local := localSecret(tt.typ)
			before := local.DeepCopy()
			got, ok := reflection.RemoteSecret(local, origin())
			if ok != tt.want {
				t.Fatalf("reflected = %v, want %v", ok, tt.want)
			}
			if !ok {
				return
			}
			if got.Namespace != twinNS || got.Type != tt.typ || string(got.Data["password"]) != "s3cret" ||
				got.Labels[offloadv1alpha1.LabelOriginClusterID] != consumerID {
				t.Errorf("secret = %+v", got)
			}
			got.Data["password"][0] = 'X'
			assertEqual(t, "local secret", before, local)
		})
	}
}

func TestNeedsUpdateAndRecreate(t *testing.T) {
	desired, _ := reflection.RemoteConfigMap(localConfigMap(), origin())
	tests := []struct {
		name         string
		mutate       func(*corev1.ConfigMap)
		update, redo bool
	}{
		{"an identical reflection needs nothing", func(*corev1.ConfigMap) {}, false, false},
		{"empty and missing maps are equal", func(c *corev1.ConfigMap) { c.Annotations = map[string]string{"note": "x"} }, false, false},
		{"changed data needs an update", func(c *corev1.ConfigMap) { c.Data["config.yaml"] = "a: 2" }, true, false},
		{"changed binary data needs an update", func(c *corev1.ConfigMap) { c.BinaryData["logo.png"] = []byte{1} }, true, false},
		{"a changed label needs an update", func(c *corev1.ConfigMap) { c.Labels["app"] = "api" }, true, false},
		{"an extra annotation needs an update", func(c *corev1.ConfigMap) { c.Annotations["y"] = "z" }, true, false},
		{"changed data of an immutable reflection needs recreating", func(c *corev1.ConfigMap) {
			c.Immutable = ptr.To(true)
			c.Data["config.yaml"] = "a: 2"
		}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			remote := desired.DeepCopy()
			tt.mutate(remote)
			if got := reflection.NeedsUpdate(remote, desired); got != tt.update {
				t.Errorf("NeedsUpdate = %v, want %v", got, tt.update)
			}
			if got := reflection.NeedsRecreate(remote, desired); got != tt.redo {
				t.Errorf("NeedsRecreate = %v, want %v", got, tt.redo)
			}
		})
	}

	t.Run("a Secret whose type changes needs recreating", func(t *testing.T) {
		d, _ := reflection.RemoteSecret(localSecret(corev1.SecretTypeTLS), origin())
		r, _ := reflection.RemoteSecret(localSecret(""), origin())
		if !reflection.NeedsUpdate(r, d) || !reflection.NeedsRecreate(r, d) {
			t.Error("a type change is not seen")
		}
		o, _ := reflection.RemoteSecret(localSecret(corev1.SecretTypeOpaque), origin())
		if reflection.NeedsUpdate(r, o) {
			t.Error("an empty type differs from Opaque")
		}
	})
}

func TestReferencedObjects(t *testing.T) {
	pod := offloadedPod()
	pod.Spec.Volumes = append(pod.Spec.Volumes,
		corev1.Volume{Name: "bundle", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "bundle-cm"}}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "bundle-secret"}}},
		}}}},
		corev1.Volume{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "x",
			NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi-creds"}}}},
	)
	pod.Spec.InitContainers[0].Env = []corev1.EnvVar{{Name: "C", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "init-cm"}, Key: "k", Optional: ptr.To(true)}}}}
	pod.Spec.Containers[0].EnvFrom = append(pod.Spec.Containers[0].EnvFrom, corev1.EnvFromSource{
		SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-secret-env"}}})
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debug", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "debug-cm"}}}}}}}
	before := pod.DeepCopy()

	cms, secrets := reflection.ReferencedObjects(pod)
	assertEqual(t, "config maps", sets.List(sets.New("web-config", "web-env", "kube-root-ca.crt", "bundle-cm", "init-cm", "debug-cm")), sets.List(cms))
	assertEqual(t, "secrets", sets.List(sets.New("db", "web-tls", "registry", "bundle-secret", "csi-creds", "web-secret-env")), sets.List(secrets))
	assertEqual(t, "pod", before, pod)
}

func TestTokenSecret(t *testing.T) {
	local := offloadedPod()
	o := origin()
	s := reflection.RemoteTokenSecret(local, o, []byte("tok"), []byte("ca"))
	if s.Name != "offload-sa-token-web-7d9f-abcde" || s.Namespace != twinNS || s.Type != corev1.SecretTypeOpaque {
		t.Errorf("secret = %s/%s %s", s.Namespace, s.Name, s.Type)
	}
	assertEqual(t, "data", map[string][]byte{"token": []byte("tok"), "ca.crt": []byte("ca"), "namespace": []byte("shop")}, s.Data)
	if uid := s.Labels[offloadv1alpha1.LabelOriginPodUID]; uid != string(local.UID) {
		t.Errorf("token secret pod UID label = %q", uid)
	}
	if !reflection.NeedsToken(local) {
		t.Error("a pod mounting its token does not need one")
	}
	local.Spec.Volumes = local.Spec.Volumes[:4]
	if reflection.NeedsToken(local) {
		t.Error("a pod without a token volume needs one")
	}

	long := reflection.TokenSecretName(strings.Repeat("a", 250) + ".b")
	if len(long) > 253 || strings.HasSuffix(long, "-") || long == reflection.TokenSecretName(strings.Repeat("a", 250)+".c") {
		t.Errorf("long name %q is too long or not unique", long)
	}
	if reflection.TokenSecretName("web") != "offload-sa-token-web" {
		t.Error("short names are not kept readable")
	}
}
