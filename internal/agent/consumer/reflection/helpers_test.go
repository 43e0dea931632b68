package reflection_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

const (
	consumerID = "11111111-2222-3333-4444-555555555555"
	providerID = "99999999-8888-7777-6666-555555555555"
	twinNS     = "shop-consumer-a1b2c3"
	vnName     = "offload-provider"
	saVolume   = "kube-api-access-x7k2p"
)

func origin() reflection.Origin {
	return reflection.Origin{ClusterID: consumerID, TwinNamespace: twinNS}
}

func vnLabels() map[string]string {
	return map[string]string{
		offloadv1alpha1.LabelType:            offloadv1alpha1.TypeVirtualNode,
		offloadv1alpha1.LabelRemoteClusterID: providerID,
		"kubernetes.io/role":                 "agent",
		"type":                               "virtual-kubelet",
		corev1.LabelHostname:                 vnName,
	}
}

// saVolumeSource is what the ServiceAccount admission plugin injects.
func saVolumeSource() corev1.VolumeSource {
	return corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](0o644),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
				Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
			}}}},
		},
	}}
}

var saMount = corev1.VolumeMount{Name: saVolume, ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}

// offloadedPod is a consumer pod as the API server holds it after the
// webhook, the ServiceAccount admission plugin and the scheduler binding it
// to the virtual node.
func offloadedPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-7d9f-abcde", Namespace: "shop", UID: "local-uid-1", ResourceVersion: "42", Generation: 1,
			Labels:          map[string]string{"app": "web", "pod-template-hash": "7d9f"},
			Annotations:     map[string]string{"team": "shop", "prometheus.io/scrape": "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f", UID: "rs-uid", Controller: ptr.To(true)}},
			Finalizers:      []string{"example.com/cleanup"},
		},
		Spec: corev1.PodSpec{
			NodeName:                      vnName,
			SchedulerName:                 "default-scheduler",
			PriorityClassName:             "shop-high",
			Priority:                      ptr.To[int32](1000),
			PreemptionPolicy:              ptr.To(corev1.PreemptLowerPriority),
			ServiceAccountName:            "web",
			DeprecatedServiceAccount:      "web",
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			DNSPolicy:                     corev1.DNSClusterFirst,
			RuntimeClassName:              ptr.To("gvisor"),
			Overhead:                      corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")},
			ReadinessGates:                []corev1.PodReadinessGate{{ConditionType: "example.com/lb-ready"}},
			SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), FSGroup: ptr.To[int64](2000)},
			Tolerations: []corev1.Toleration{
				{Key: offloadv1alpha1.TaintVirtualNode, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "shop", Effect: corev1.TaintEffectNoSchedule},
			},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{
						{Key: offloadv1alpha1.LabelType, Operator: corev1.NodeSelectorOpIn, Values: []string{offloadv1alpha1.TypeVirtualNode}},
						{Key: offloadv1alpha1.LabelRemoteClusterID, Operator: corev1.NodeSelectorOpIn, Values: []string{providerID}},
					},
				}}},
			}},
			InitContainers: []corev1.Container{{
				Name: "migrate", Image: "shop/migrate:1", VolumeMounts: []corev1.VolumeMount{saMount},
			}},
			Containers: []corev1.Container{{
				Name:  "web",
				Image: "shop/web:1",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Env: []corev1.EnvVar{
					{Name: "MODE", Value: "prod"},
					{Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}},
				},
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-env"}}}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
				LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/web"}, {Name: "cache", MountPath: "/cache"}, saMount},
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}}}},
				{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "web-tls"}}},
				{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{{
					Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
				{Name: saVolume, VolumeSource: saVolumeSource()},
			},
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
		},
	}
}

// mustRemote translates pod and fails the test on error.
func mustRemote(t *testing.T, pod *corev1.Pod, o reflection.Origin) *corev1.Pod {
	t.Helper()
	remote, err := reflection.RemotePod(pod, o)
	if err != nil {
		t.Fatalf("RemotePod: %v", err)
	}
	return remote
}

// assertEqual fails with a diff when want and got differ semantically.
func assertEqual(t *testing.T, what string, want, got any) {
	t.Helper()
	if !apiequality.Semantic.DeepEqual(want, got) {
		t.Errorf("%s differs (-want +got):\n%s", what, diff.Diff(want, got))
	}
}
