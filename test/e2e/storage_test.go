package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// storageArgs are the peer generate flags of a provider that lends 1Gi of
// its default StorageClass (the local clusters' local-path) in at most 2
// claims.
var storageArgs = []string{"--storage", "1Gi", "--storage-claims", "2"}

// claimTemplate is a claim of StorageClass offload of size.
func claimTemplate(name, size string) corev1.PersistentVolumeClaim {
	return corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(offloadv1alpha1.StorageClassName),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
}

// expectStatefulSetStorage checks the storage of offloaded pods, in
// namespace ns offloaded to provider as twin: a StatefulSet's claim is a
// claim on the provider's storage, what its pod wrote is there for the pod
// that replaces it, a claim past what the provider lends leaves its pod
// Pending with the provider's reason, and deleting the claim deletes the
// provider's.
func expectStatefulSetStorage(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, ns, twin string) {
	t.Helper()
	labels := map[string]string{"app": "db"}
	app := offloadedApp("db", 1).Spec.Template
	app.Labels = labels
	app.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	set := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:             ptr.To[int32](1),
			Selector:             &metav1.LabelSelector{MatchLabels: labels},
			Template:             app,
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{claimTemplate("data", "64Mi")},
		},
	}
	if _, err := consumer.Kube.AppsV1().StatefulSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const claim = "data-db-0"
	defer func() {
		ctx := context.Background()
		_ = consumer.Kube.AppsV1().StatefulSets(ns).Delete(ctx, "db", metav1.DeleteOptions{})
		_ = consumer.Kube.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, claim, metav1.DeleteOptions{})
	}()
	start := time.Now()
	first := waitPodsReady(ctx, t, consumer, ns, "app=db", 1)[0]
	t.Logf("the StatefulSet's pod was Ready with its claim on the provider %s after its creation", time.Since(start).Round(time.Millisecond))

	// The consumer's claim is bound to a volume that names the provider's
	// claim, which is bound there to a volume of the class lent.
	pvc, err := consumer.Kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := consumer.Kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != offloadv1alpha1.StorageDriver ||
		pv.Spec.CSI.VolumeAttributes[offloadv1alpha1.StorageAttributeProvider] != provider.Name ||
		pv.Spec.CSI.VolumeAttributes[offloadv1alpha1.StorageAttributeNamespace] != twin {
		t.Errorf("claim %s: phase %s, volume %s %+v; want Bound to a volume naming the claim in %s on %s", claim, pvc.Status.Phase, pv.Name, pv.Spec.CSI, twin, provider.Name)
	}
	if out, err := kubectl(t, consumer, "describe", "pv", pv.Name); err != nil || !strings.Contains(out, provider.Name) || !strings.Contains(out, twin) {
		t.Errorf("kubectl describe pv does not say where the data lives: %v\n%s", err, out)
	}
	remote, err := provider.Kube.CoreV1().PersistentVolumeClaims(twin).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if remote.Status.Phase != corev1.ClaimBound || ptr.Deref(remote.Spec.StorageClassName, "") != localcluster.StorageClassName ||
		remote.Labels[offloadv1alpha1.LabelOriginClaimUID] != string(pvc.UID) {
		t.Errorf("the provider's claim: phase %s, class %v, labels %v; want Bound, of class %s, labelled with its origin", remote.Status.Phase,
			ptr.Deref(remote.Spec.StorageClassName, ""), remote.Labels, localcluster.StorageClassName)
	}

	// What the pod wrote is there for the pod that replaces it.
	if out, err := kubectl(t, consumer, "-n", ns, "exec", first.Name, "--", "/testapp", "write", "/data/kept", "written by "+string(first.UID)); err != nil {
		t.Fatalf("writing through the claim: %v\n%s", err, out)
	}
	if err := consumer.Kube.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var second corev1.Pod
	waitFor(ctx, t, 3*time.Minute, "the StatefulSet's new pod to be Ready", func(ctx context.Context) (bool, string) {
		p, err := consumer.Kube.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		second = *p
		return p.UID != first.UID && isReady(p), fmt.Sprintf("pod %s (%s) %s", p.Name, p.UID, p.Status.Phase)
	})
	out, err := kubectl(t, consumer, "-n", ns, "exec", second.Name, "--", "/testapp", "cat", "/data/kept")
	if want := "written by " + string(first.UID); err != nil || strings.TrimSpace(out) != want {
		t.Errorf("the new pod reads %q (%v), want %q, what the pod before it wrote", out, err, want)
	}

	// A claim past what the provider lends: the provider refuses it, its
	// pod stays Pending with the provider's reason and runs nowhere.
	big := claimTemplate("too-big", "2Gi")
	big.Namespace = ns
	if _, err := consumer.Kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waiting := harmlessPod("waits-for-room", ns)
	waiting.Spec.Volumes = append(waiting.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: big.Name}}})
	if _, err := consumer.Kube.CoreV1().Pods(ns).Create(ctx, waiting, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx := context.Background()
		_ = consumer.Kube.CoreV1().Pods(ns).Delete(ctx, waiting.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		_ = consumer.Kube.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, big.Name, metav1.DeleteOptions{})
	}()
	waitFor(ctx, t, 2*time.Minute, "the provider's refusal on the waiting pod", func(ctx context.Context) (bool, string) {
		events, err := consumer.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + waiting.Name})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range events.Items {
			if e.Reason == "ProviderFailed" && strings.Contains(e.Message, "exceeded quota") {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, strings.Join(seen, "; ")
	})
	if p, err := consumer.Kube.CoreV1().Pods(ns).Get(ctx, waiting.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
		t.Errorf("the pod of a refused claim: %v, phase %s, node %q; want Pending on no node", err, p.Status.Phase, p.Spec.NodeName)
	}
	if _, err := provider.Kube.CoreV1().PersistentVolumeClaims(twin).Get(ctx, big.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused claim exists on the provider: %v", err)
	}

	// A pod that mounts a claim bound to this cluster's own storage is
	// never scheduled on a virtual node: the provider cannot reach it.
	expectLocalClaimStaysHome(ctx, t, consumer, provider, ns, twin)

	// Deleting the StatefulSet and its claim deletes the provider's claim.
	if err := consumer.Kube.AppsV1().StatefulSets(ns).Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := consumer.Kube.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := waitFor(ctx, t, 2*time.Minute, "the provider's claim and volume to go with the consumer's claim", func(ctx context.Context) (bool, string) {
		_, err := provider.Kube.CoreV1().PersistentVolumeClaims(twin).Get(ctx, claim, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("the provider's claim: %v", err)
		}
		_, err = provider.Kube.CoreV1().PersistentVolumes().Get(ctx, remote.Spec.VolumeName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("the provider's volume %s: %v", remote.Spec.VolumeName, err)
	})
	t.Logf("the provider's claim and volume were gone %s after the consumer's claim was deleted", took.Round(time.Millisecond))
}

// expectLocalClaimStaysHome checks that a pod of namespace ns (Remote)
// with a claim bound to a volume of the consumer is kept off the virtual
// nodes by the scheduling webhook (which the MutatingAdmissionPolicy leaves
// such pods to: it cannot read claims), so that it fits no node and stays
// Pending with the scheduler's reason, and nothing of it reaches the
// provider.
func expectLocalClaimStaysHome(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, ns, twin string) {
	t.Helper()
	const class = "consumer-disks"
	own := claimTemplate("own-data", "64Mi")
	own.Namespace, own.Spec.StorageClassName = ns, ptr.To(class)
	created, err := consumer.Kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &own, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A volume of the consumer's, bound to the claim, that any node could
	// mount (no node affinity), as an NFS share would be.
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "consumer-share-" + string(created.UID)[:8]}, Spec: corev1.PersistentVolumeSpec{
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}, AccessModes: own.Spec.AccessModes, StorageClassName: class,
		PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "192.0.2.1", Path: "/share"}},
		ClaimRef:               &corev1.ObjectReference{Namespace: ns, Name: own.Name, UID: created.UID},
	}}
	if _, err := consumer.Kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	home := harmlessPod("needs-home-storage", ns)
	home.Spec.Volumes = append(home.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: own.Name}}})
	if _, err := consumer.Kube.CoreV1().Pods(ns).Create(ctx, home, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx := context.Background()
		_ = consumer.Kube.CoreV1().Pods(ns).Delete(ctx, home.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		_ = consumer.Kube.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, own.Name, metav1.DeleteOptions{})
		_ = consumer.Kube.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
	}()
	virtualNode, err := consumer.Kube.CoreV1().Nodes().Get(ctx, offloadv1alpha1.VirtualNodeName(provider.Name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Without the webhook, the strategy (Remote) alone would require the
	// virtual node, and the claim, bound to a volume any node may mount,
	// would not keep the pod off it.
	waitFor(ctx, t, 2*time.Minute, "the scheduler to find no node for the pod of a claim of this cluster", func(ctx context.Context) (bool, string) {
		p, err := consumer.Kube.CoreV1().Pods(ns).Get(ctx, home.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if fits, err := nodeaffinity.GetRequiredNodeAffinity(p).Match(virtualNode); err != nil || fits {
			t.Fatalf("the pod may run on the virtual node (%v): affinity %+v", err, p.Spec.Affinity)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return p.Spec.NodeName == "", c.Message
			}
		}
		return false, fmt.Sprintf("node %q, phase %s, conditions %+v", p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
	})
	if _, err := provider.Kube.CoreV1().Pods(twin).Get(ctx, home.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod of a claim of the consumer's reached the provider: %v", err)
	}
}

// isReady reports whether p is Running and Ready.
func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return p.Status.Phase == corev1.PodRunning && c.Status == corev1.ConditionTrue
		}
	}
	return false
}
