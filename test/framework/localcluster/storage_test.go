package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// testAppImage is the test application of images.TestImages, which every
// real node imports: "testapp write FILE TEXT" and "testapp cat FILE".
const testAppImage = "registry.local/offload/testapp:test"

func TestAClaimKeepsWhatOnePodWroteForTheNextAndItsVolumeGoesWithIt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a real node needs root")
	}
	c := StartClusters(t, ClusterOptions{Name: "storage", RealNode: true, Storage: true})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := c.WaitStorage(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	const ns, text = metav1.NamespaceDefault, "written by the first pod"
	pvcs := c.Kube.CoreV1().PersistentVolumeClaims(ns)
	// No class: the cluster's default, StorageClassName, provisions it.
	pvc, err := pvcs.Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	runToCompletion(t, ctx, c, "writer", "write", "/data/hello", text)
	pvc, err = pvcs.Get(ctx, pvc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(pvc.Spec.StorageClassName, ""); got != StorageClassName || pvc.Spec.VolumeName == "" {
		t.Fatalf("claim of class %q bound to %q; want class %s, bound", got, pvc.Spec.VolumeName, StorageClassName)
	}
	pv, err := c.Kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.HostPath == nil || filepath.Dir(pv.Spec.HostPath.Path) != c.Node.StorageDir() {
		t.Fatalf("volume %s is %+v; want a host directory in %s", pv.Name, pv.Spec.PersistentVolumeSource, c.Node.StorageDir())
	}
	dir := pv.Spec.HostPath.Path
	if b, err := os.ReadFile(filepath.Join(dir, "hello")); err != nil || string(b) != text {
		t.Errorf("the host's %s holds %q (%v); want what the pod wrote", filepath.Join(dir, "hello"), b, err)
	}

	if got := runToCompletion(t, ctx, c, "reader", "cat", "/data/hello"); got != text {
		t.Errorf("the second pod read %q; want %q", got, text)
	}

	if err := pvcs.Delete(ctx, pvc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := framework.Poll(ctx, 250*time.Millisecond, 2*time.Minute, func(ctx context.Context) (bool, string) {
		_, err := c.Kube.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, "volume " + pv.Name + " is still there"
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			return false, "directory " + dir + " is still there"
		}
		return true, ""
	}); err != nil {
		t.Fatalf("the claim is deleted, its volume is not (reclaim policy Delete): %v", err)
	}
}

// runToCompletion runs testapp with args in pod name, with claim "data" at
// /data, waits until it succeeds, deletes it and returns its output.
func runToCompletion(t *testing.T, ctx context.Context, c *Cluster, name string, args ...string) string {
	t.Helper()
	pods := c.Kube.CoreV1().Pods(metav1.NamespaceDefault)
	_, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "app", Image: testAppImage, ImagePullPolicy: corev1.PullNever,
				Command:      append([]string{"/testapp"}, args...),
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"},
			}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	if _, err := framework.Poll(ctx, 250*time.Millisecond, 2*time.Minute, func(ctx context.Context) (bool, string) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, "phase " + string(phase) + ", " + podConditions(p)
	}); err != nil {
		t.Fatalf("pod %s did not complete: %v", name, err)
	}
	out, err := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if phase != corev1.PodSucceeded {
		t.Fatalf("pod %s failed: %s", name, out)
	}
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := framework.Poll(ctx, 250*time.Millisecond, time.Minute, func(ctx context.Context) (bool, string) {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "pod " + name + " is still there"
	}); err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// podConditions tells why a pod is not running yet: its false conditions.
func podConditions(p *corev1.Pod) string {
	var why []string
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			why = append(why, string(c.Type)+": "+c.Reason+" "+c.Message)
		}
	}
	return strings.Join(why, "; ")
}
