package charts_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// strangerPod is a pod a stranger may run in a twin namespace: what the
// consumer's agent sends for a plain pod.
func strangerPod(ns, name string, spec func(*corev1.PodSpec)) *corev1.Pod {
	return newPod(ns, name, func(s *corev1.PodSpec) {
		s.AutomountServiceAccountToken = ptr.To(false)
		s.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW"}}}
		if spec != nil {
			spec(s)
		}
	})
}

// twinNamespace creates a namespace labelled as a consumer's twin namespace
// at Pod Security level, with the priority classes its pods may name.
func twinNamespace(t *testing.T, kube kubernetes.Interface, level string, priorityClasses string) string {
	t.Helper()
	ns, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "twin-",
		Labels:       map[string]string{offloadv1alpha1.LabelTenant: "x", offloadv1alpha1.LabelPodSecurityEnforce: level},
		Annotations:  map[string]string{offloadv1alpha1.AnnotationPriorityClasses: priorityClasses},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	return ns.Name
}

func TestTheTenantPodRuntimePolicyLetsStrangersRunOnlyWhatAStrangerMay(t *testing.T) {
	kube := enforcedPolicy(t, offloadv1alpha1.PodRuntimePolicyName)
	// A class the namespace lists (as the controller lists the cluster's
	// default ones); the Priority admission needs it to exist.
	class := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-default-"}, Value: 10}
	class, err := kube.SchedulingV1().PriorityClasses().Create(t.Context(), class, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.SchedulingV1().PriorityClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	twin := twinNamespace(t, kube, "baseline", class.Name)
	trusted := twinNamespace(t, kube, "privileged", "")
	other := newNamespace(t, kube, nil)
	runtimeClass := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{GenerateName: "kata-"}, Handler: "kata"}
	if runtimeClass, err = kube.NodeV1().RuntimeClasses().Create(t.Context(), runtimeClass, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.NodeV1().RuntimeClasses().Delete(context.Background(), runtimeClass.Name, metav1.DeleteOptions{})
	})

	nfs := func(s *corev1.PodSpec) {
		s.Volumes = []corev1.Volume{{Name: "share", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "10.0.0.9", Path: "/"}}}}
	}
	framework.Eventually(t, 30*time.Second, "the runtime policy is not enforced", func(ctx context.Context) bool {
		_, err := kube.CoreV1().Pods(twin).Create(ctx, strangerPod(twin, "probe", nfs), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err)
	})

	refused := []struct {
		name      string
		spec      func(*corev1.PodSpec)
		inMessage string
	}{
		{"an NFS volume", nfs, "volume share is not a configMap"},
		{"an iSCSI volume", func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "lun", VolumeSource: corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{TargetPortal: "10.0.0.9:3260", IQN: "iqn.2001-04.com.example:storage", Lun: 0}}}}
		}, "volume lun is not"},
		{"a generic ephemeral volume", func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
				VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}}}}
		}, "volume scratch is not"},
		{"an inline CSI volume", func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "nfs.csi.k8s.io"}}}}
		}, "volume csi is not"},
		{"a projected token of a provider ServiceAccount", func(s *corev1.PodSpec) {
			s.ServiceAccountName = "default"
			s.Volumes = []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", Audience: "vault"}}}}}}}
		}, "volume token projects a service-account token"},
		{"another ServiceAccount", func(s *corev1.PodSpec) { s.ServiceAccountName = "builder" }, "spec.serviceAccountName is builder"},
		{"the system-node-critical priority class", func(s *corev1.PodSpec) { s.PriorityClassName = "system-node-critical" },
			"spec.priorityClassName is system-node-critical"},
		{"a runtime class", func(s *corev1.PodSpec) { s.RuntimeClassName = ptr.To(runtimeClass.Name) }, "spec.runtimeClassName is " + runtimeClass.Name},
		{"another scheduler", func(s *corev1.PodSpec) { s.SchedulerName = "bin-packer" }, "spec.schedulerName is bin-packer"},
		{"a container that keeps NET_RAW", func(s *corev1.PodSpec) { s.Containers[0].SecurityContext = nil }, "container app keeps the NET_RAW capability"},
	}
	for i, tc := range refused {
		t.Run(tc.name+" is refused in a twin namespace", func(t *testing.T) {
			name := fmt.Sprintf("refused-%d", i)
			_, err := kube.CoreV1().Pods(twin).Create(t.Context(), strangerPod(twin, name, tc.spec), metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.inMessage) || !strings.Contains(err.Error(), "--pod-security privileged") {
				t.Fatalf("err = %v, want Forbidden naming %q and the relaxation", err, tc.inMessage)
			}
			if _, err := kube.CoreV1().Pods(twin).Get(t.Context(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the pod exists: %v", err)
			}
		})
		t.Run(tc.name+" is admitted where the provider trusts the consumer, and outside twin namespaces", func(t *testing.T) {
			for _, ns := range []string{trusted, other} {
				if _, err := kube.CoreV1().Pods(ns).Create(t.Context(), strangerPod(ns, fmt.Sprintf("theirs-%d", i), tc.spec), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
					t.Errorf("in namespace %s: %v", ns, err)
				}
			}
		})
	}

	t.Run("what the consumer's agent sends is admitted", func(t *testing.T) {
		pod := strangerPod(twin, "plain", func(s *corev1.PodSpec) {
			s.PriorityClassName = class.Name
			s.Volumes = []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}},
				{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}},
				// The claim is held to the lent class by offload-tenant-claims.
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
				{Name: "bundle", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}}}}},
				// An image pulled read-only, as a container's is.
				{Name: "model", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "registry.example/models/llm:1", PullPolicy: corev1.PullIfNotPresent}}},
			}
			s.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}
		})
		created := mustCreate(t, kube, pod)

		// An ephemeral container keeps to the capability rule.
		debug := created.DeepCopy()
		debug.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
		_, err := kube.CoreV1().Pods(twin).UpdateEphemeralContainers(t.Context(), created.Name, debug, metav1.UpdateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "container debug keeps the NET_RAW capability") {
			t.Fatalf("adding an ephemeral container that keeps NET_RAW: err = %v, want Forbidden", err)
		}
		debug.Spec.EphemeralContainers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW"}}}
		if _, err := kube.CoreV1().Pods(twin).UpdateEphemeralContainers(t.Context(), created.Name, debug, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("adding an ephemeral container that drops NET_RAW: %v", err)
		}
	})
}
