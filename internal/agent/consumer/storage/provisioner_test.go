package storage

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

const (
	providerID = "a1111111-1111-4111-8111-111111111111"
	consumerID = "c1111111-1111-4111-8111-111111111111"
	node       = "offload-provider"
)

// peers is a Peers of one peering, whose storage and state the test sets.
type peers struct {
	peer            Peer
	running, peered bool
}

func (p *peers) ByNode(_ context.Context, n string) (Peer, bool, error) {
	return p.peer, p.running && n == node, nil
}

func (p *peers) ByClusterID(_ context.Context, id string) (Peer, bool, bool, error) {
	if id != p.peer.ClusterID {
		return Peer{}, false, false, nil
	}
	return p.peer, p.running, p.peered, nil
}

// world is one API server playing both clusters: namespace home is the
// consumer's, twin its twin namespace on the provider.
type world struct {
	kube       kubernetes.Interface
	c          client.Client
	home, twin string
	peers      *peers
	events     *record.FakeRecorder
	p          *Provisioner
}

func newWorld(t *testing.T) *world {
	t.Helper()
	cfg := envtest.APIServer(t)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{kube: kube, c: envtest.NewClient(t, cfg), events: record.NewFakeRecorder(100)}
	w.home = envtest.NewNamespace(t, w.c, "home")
	w.twin = envtest.NewNamespace(t, w.c, "twin")
	w.peers = &peers{running: true, peered: true, peer: Peer{
		Name: "provider", ClusterID: providerID, ConsumerID: consumerID, Provider: kube,
		Storage:       &offloadv1alpha1.StoragePolicy{StorageClassName: "standard", Capacity: resource.MustParse("10Gi")},
		TwinNamespace: func(ns string) (string, bool) { return w.twin, ns == w.home },
	}}
	w.p = &Provisioner{Peers: w.peers, Consumer: kube, Events: w.events}
	return w
}

// claim creates a claim of StorageClass offload in home.
func (w *world) claim(t *testing.T, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.home, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		StorageClassName: ptr.To(offloadv1alpha1.StorageClassName),
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		VolumeMode:       ptr.To(corev1.PersistentVolumeFilesystem),
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
	}}
	if err := w.c.Create(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
	return pvc
}

// waitingPod creates a pod of home that waits for claim, not yet bound to a node.
func (w *world) waitingPod(t *testing.T, name, claim string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.home, Name: name}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", Image: "app"}},
		Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
	}}
	if err := w.c.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

func (w *world) options(pvc *corev1.PersistentVolumeClaim) controller.ProvisionOptions {
	return controller.ProvisionOptions{PVC: pvc, PVName: "pvc-" + string(pvc.UID), SelectedNodeName: node,
		StorageClass: &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.StorageClassName}, ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete)}}
}

// drained returns the events recorded so far.
func (w *world) drained() []string {
	var out []string
	for {
		select {
		case e := <-w.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestAClaimOnAVirtualNodeIsAClaimOnItsProvider(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	pvc := w.claim(t, "data-web-0")
	pv, state, err := w.p.Provision(ctx, w.options(pvc))
	if err != nil || state != controller.ProvisioningFinished {
		t.Fatalf("Provision = %v, %v", state, err)
	}
	remote, err := w.kube.CoreV1().PersistentVolumeClaims(w.twin).Get(ctx, "data-web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(remote.Spec.StorageClassName, "") != "standard" || remote.Spec.Resources.Requests.Storage().Cmp(resource.MustParse("2Gi")) != 0 ||
		remote.Spec.AccessModes[0] != corev1.ReadWriteOnce || remote.Labels[offloadv1alpha1.LabelOriginClaimUID] != string(pvc.UID) ||
		remote.Labels[offloadv1alpha1.LabelOriginClusterID] != consumerID {
		t.Errorf("remote claim = %+v, want 2Gi RWO of class standard labelled with its origin", remote)
	}
	attrs := pv.Spec.CSI.VolumeAttributes
	if pv.Spec.CSI.Driver != offloadv1alpha1.StorageDriver || attrs["provider"] != "provider" || attrs["namespace"] != w.twin || attrs["claim"] != "data-web-0" || attrs["storageClass"] != "standard" ||
		pv.Spec.Capacity.Storage().Cmp(resource.MustParse("2Gi")) != 0 || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete ||
		pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != providerID {
		t.Errorf("volume = %+v, want one that names the remote claim and is pinned to the provider's virtual node", pv.Spec)
	}
	// The API server takes the volume as it is.
	pv.Spec.StorageClassName = offloadv1alpha1.StorageClassName
	if err := w.c.Create(ctx, pv); err != nil {
		t.Fatalf("creating the volume: %v", err)
	}
	t.Cleanup(func() { _ = w.c.Delete(context.Background(), pv) })

	t.Run("provisioning again after a restart adopts the remote claim", func(t *testing.T) {
		again, _, err := w.p.Provision(ctx, w.options(pvc))
		if err != nil || again.Spec.CSI.VolumeHandle != pv.Spec.CSI.VolumeHandle {
			t.Fatalf("Provision = %v, %v; want the same volume", again, err)
		}
	})

	t.Run("the pod's claim resolves to the remote claim", func(t *testing.T) {
		bound := pvc.DeepCopy()
		bound.Spec.VolumeName = pv.Name
		if err := w.c.Update(ctx, bound); err != nil {
			t.Fatal(err)
		}
		name, err := RemoteClaimOf(ctx, w.c, w.home, pvc.Name, providerID, w.twin)
		if err != nil || name != "data-web-0" {
			t.Errorf("RemoteClaimOf = %q, %v", name, err)
		}
		if _, err := RemoteClaimOf(ctx, w.c, w.home, pvc.Name, "another-provider", w.twin); err == nil || !strings.Contains(err.Error(), "of another provider") {
			t.Errorf("RemoteClaimOf on another provider = %v, want an error", err)
		}
	})

	t.Run("deleting the volume deletes the remote claim", func(t *testing.T) {
		if err := w.p.Delete(ctx, pv); err != nil {
			t.Fatal(err)
		}
		// Deleted; here no pvc-protection controller removes its finalizer.
		if c, err := w.kube.CoreV1().PersistentVolumeClaims(w.twin).Get(ctx, "data-web-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) && (err != nil || c.DeletionTimestamp == nil) {
			t.Errorf("the remote claim is not deleted: %v", err)
		}
		if err := w.p.Delete(ctx, pv); err != nil {
			t.Errorf("deleting again: %v, want nothing to do", err)
		}
	})
}

func TestAClaimTheProviderRefusesIsReportedAndNeverGetsAVolume(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()

	t.Run("a provider that lends no storage", func(t *testing.T) {
		w.peers.peer.Storage = nil
		defer func() {
			w.peers.peer.Storage = &offloadv1alpha1.StoragePolicy{StorageClassName: "standard", Capacity: resource.MustParse("10Gi")}
		}()
		pvc := w.claim(t, "nothing-lent")
		w.waitingPod(t, "waits-for-nothing", "nothing-lent")
		pv, state, err := w.p.Provision(ctx, w.options(pvc))
		if pv != nil || state != controller.ProvisioningReschedule || err == nil || !strings.Contains(err.Error(), "provider provider lends no persistent storage") {
			t.Fatalf("Provision = %v, %v, %v; want no volume, rescheduled, saying nothing is lent", pv, state, err)
		}
		events := w.drained()
		if len(events) != 2 || !strings.HasPrefix(events[0], "Warning ProviderFailed") || !strings.HasPrefix(events[1], "Warning ProviderFailed") {
			t.Errorf("events = %q, want ProviderFailed on the claim and on its pod", events)
		}
	})

	t.Run("a claim past the provider's quota", func(t *testing.T) {
		quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: w.twin, Name: "offload-quota"},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("1Gi")}}}
		if err := w.c.Create(ctx, quota); err != nil {
			t.Fatal(err)
		}
		// No quota controller runs here: the status it would write.
		quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard, Used: corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("0")}}
		if err := w.c.Status().Update(ctx, quota); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = w.c.Delete(context.Background(), quota) }()
		pvc := w.claim(t, "too-big")
		w.waitingPod(t, "waits-for-room", "too-big")
		pv, _, err := w.p.Provision(ctx, w.options(pvc))
		if pv != nil || err == nil || !strings.Contains(err.Error(), "provider provider refused claim") || !strings.Contains(err.Error(), "exceeded quota") {
			t.Fatalf("Provision = %v, %v; want no volume and the provider's reason", pv, err)
		}
		if events := w.drained(); len(events) != 2 || !strings.Contains(events[1], "exceeded quota") {
			t.Errorf("events = %q, want the provider's reason on the claim and on its pod", events)
		}
		if _, err := w.kube.CoreV1().PersistentVolumeClaims(w.twin).Get(ctx, "too-big", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a remote claim exists: %v", err)
		}
	})

	t.Run("a remote claim of that name that backs another claim", func(t *testing.T) {
		other := RemoteClaim(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "taken", UID: types.UID("someone-else")},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}, w.twin, "standard", consumerID)
		if err := w.c.Create(ctx, other); err != nil {
			t.Fatal(err)
		}
		pvc := w.claim(t, "taken")
		pv, _, err := w.p.Provision(ctx, w.options(pvc))
		if pv != nil || err == nil || !strings.Contains(err.Error(), "backs another claim") {
			t.Fatalf("Provision = %v, %v; want no volume", pv, err)
		}
		w.drained()
	})

	t.Run("a claim without a selected node", func(t *testing.T) {
		pvc := w.claim(t, "immediate")
		o := w.options(pvc)
		o.SelectedNodeName = ""
		if pv, _, err := w.p.Provision(ctx, o); pv != nil || err == nil || !strings.Contains(err.Error(), "WaitForFirstConsumer") {
			t.Fatalf("Provision = %v, %v; want an error", pv, err)
		}
	})
}

func TestDeletingAVolumeWaitsForAPeeringThatRestartsAndNotForOneThatIsGone(t *testing.T) {
	w := newWorld(t)
	pv := Volume(w.options(w.claim(t, "data")), w.peers.peer, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.twin, Name: "data", UID: "u1"}})
	w.peers.running = false
	if err := w.p.Delete(context.Background(), pv); err == nil {
		t.Error("Delete succeeded while the peering restarts: the remote claim would be left behind")
	}
	w.peers.peered = false
	if err := w.p.Delete(context.Background(), pv); err != nil {
		t.Errorf("Delete = %v, want nothing to do: the peering took its twin namespaces with it", err)
	}
	var ignored *controller.IgnoredError
	if err := w.p.Delete(context.Background(), &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}}); !errors.As(err, &ignored) {
		t.Errorf("Delete of a volume of another provisioner = %v, want IgnoredError", err)
	}
}
