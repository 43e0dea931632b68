// Package storage is the provisioner of the consumer's StorageClass
// offload (offloadv1alpha1.StorageClassName): a claim of that class whose
// pod the scheduler put on a virtual node becomes a claim of this
// cluster's agent in the twin namespace on that node's provider, on the
// StorageClass the provider lends (offloadv1alpha1.StoragePolicy), and the
// consumer's claim is bound to a PersistentVolume that names it. The data
// stays on the provider while the consumer's claim exists, whichever pods
// come and go; deleting the claim deletes the remote one, and the
// provider's reclaim policy applies there.
//
// sig-storage-lib-external-provisioner runs the claims and volumes through
// the PersistentVolume controller's protocol (Run); this package says what
// to create and delete.
package storage

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// ReasonProviderFailed is the reason of the Warning events, on a claim and
// on the pods waiting for it, that say why the provider refused the claim.
const ReasonProviderFailed = "ProviderFailed"

// Peer is what the provisioner needs of a running peering.
type Peer struct {
	// Name and ClusterID are the provider's.
	Name, ClusterID string
	// ConsumerID is this cluster's ID, the origin label of remote claims.
	ConsumerID string
	// Provider reaches the provider as the tenant.
	Provider kubernetes.Interface
	// Storage is what the provider lends, as its newest ResourceOffer says;
	// nil when it lends none, or has not said yet.
	Storage *offloadv1alpha1.StoragePolicy
	// TwinNamespace resolves a namespace of this cluster to its Ready twin
	// namespace on the provider.
	TwinNamespace func(namespace string) (string, bool)
}

// Peers finds the running peerings.
type Peers interface {
	// ByNode returns the peering whose virtual node is node, false when
	// none runs.
	ByNode(ctx context.Context, node string) (Peer, bool, error)
	// ByClusterID returns the running peering with provider clusterID.
	// When none runs, peered says whether this cluster still has a
	// ForeignCluster of that ID (it may be restarting).
	ByClusterID(ctx context.Context, clusterID string) (p Peer, running, peered bool, err error)
}

// Provisioner is the controller.Provisioner of StorageClass offload.
type Provisioner struct {
	// Peers finds the peerings.
	Peers Peers
	// Consumer lists the pods that wait for a refused claim.
	Consumer kubernetes.Interface
	// Events records the provider's refusals on claims and their pods.
	Events record.EventRecorder
}

var _ controller.Provisioner = (*Provisioner)(nil)

// Provision creates the remote claim of opts.PVC on the provider of the
// virtual node the scheduler selected, and returns the volume that binds
// the consumer's claim to it. A claim the provider refuses (its admission
// policy, its quota) is reported on the claim and on the pods waiting for
// it, with reason ReasonProviderFailed, and provisioned again with backoff:
// the pods stay Pending, never run without their volume.
func (p *Provisioner) Provision(ctx context.Context, opts controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	claim := opts.PVC
	if opts.SelectedNodeName == "" {
		return nil, controller.ProvisioningFinished, fmt.Errorf("StorageClass %s provisions a claim only once its pod is scheduled on a virtual node: its volumeBindingMode must be WaitForFirstConsumer",
			offloadv1alpha1.StorageClassName)
	}
	peer, ok, err := p.Peers.ByNode(ctx, opts.SelectedNodeName)
	if err != nil {
		return nil, controller.ProvisioningNoChange, err
	}
	if !ok {
		return nil, controller.ProvisioningReschedule, fmt.Errorf("node %s is not the virtual node of a running peering: a claim of StorageClass %s lives on a provider; the pod is scheduled again",
			opts.SelectedNodeName, offloadv1alpha1.StorageClassName)
	}
	if peer.Storage == nil {
		err := fmt.Errorf("provider %s lends no persistent storage to this cluster: its admin lends some with kubectl offload peer generate --storage (kubectl offload status peer %s shows what it lends)",
			peer.Name, peer.Name)
		p.refused(ctx, claim, err)
		return nil, controller.ProvisioningReschedule, err
	}
	twin, ok := peer.TwinNamespace(claim.Namespace)
	if !ok {
		return nil, controller.ProvisioningReschedule, fmt.Errorf("namespace %s has no Ready twin namespace on provider %s yet: check its NamespaceOffloading (kubectl offload status)",
			claim.Namespace, peer.Name)
	}
	want := RemoteClaim(claim, twin, peer.Storage.StorageClassName, peer.ConsumerID)
	claims := peer.Provider.CoreV1().PersistentVolumeClaims(twin)
	remote, err := claims.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A retry after the volume could not be stored, or after a restart.
		if remote, err = claims.Get(ctx, want.Name, metav1.GetOptions{}); err == nil && remote.Labels[offloadv1alpha1.LabelOriginClaimUID] != string(claim.UID) {
			err := fmt.Errorf("provider %s already has a claim %s in namespace %s that backs another claim: delete it there, or rename claim %s",
				peer.Name, want.Name, twin, klog.KObj(claim))
			p.refused(ctx, claim, err)
			return nil, controller.ProvisioningFinished, err
		}
	}
	if err != nil {
		if refusal(err) {
			err = fmt.Errorf("provider %s refused claim %s: %s", peer.Name, klog.KObj(claim), peering.CleanText(err.Error()))
			p.refused(ctx, claim, err)
		}
		return nil, controller.ProvisioningFinished, fmt.Errorf("creating the claim of %s on provider %s: %w", klog.KObj(claim), peer.Name, err)
	}
	return Volume(opts, peer, remote), controller.ProvisioningFinished, nil
}

// refusal reports whether err is the provider's API server refusing a
// claim rather than failing to answer: retrying soon would not help.
func refusal(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// refused records why the provider refused claim, on it and on the pods
// of its namespace that wait for it.
func (p *Provisioner) refused(ctx context.Context, claim *corev1.PersistentVolumeClaim, err error) {
	if p.Events == nil {
		return
	}
	msg := err.Error()
	p.Events.Event(claim, corev1.EventTypeWarning, ReasonProviderFailed, msg)
	if p.Consumer == nil {
		return
	}
	pods, lerr := p.Consumer.CoreV1().Pods(claim.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName="})
	if lerr != nil {
		klog.FromContext(ctx).Error(lerr, "Listing the pods that wait for a refused claim", "claim", klog.KObj(claim))
		return
	}
	for i := range pods.Items {
		if uses(&pods.Items[i], claim.Name) {
			p.Events.Event(&pods.Items[i], corev1.EventTypeWarning, ReasonProviderFailed, msg)
		}
	}
}

// uses reports whether pod mounts claim.
func uses(pod *corev1.Pod, claim string) bool {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			return true
		}
	}
	return false
}

// RemoteClaim is the provider's claim that backs claim, in twin namespace
// twin on the provider's StorageClass class: same name, size, access modes
// and volume mode, labelled with its origin. Nothing else of claim (its
// labels, annotations, selector or data source) leaves this cluster.
func RemoteClaim(claim *corev1.PersistentVolumeClaim, twin, class, clusterID string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: claim.Name, Namespace: twin,
			Labels: map[string]string{
				offloadv1alpha1.LabelOriginClusterID: clusterID,
				offloadv1alpha1.LabelOriginClaimUID:  string(claim.UID),
			},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      claim.Spec.AccessModes,
			VolumeMode:       claim.Spec.VolumeMode,
			StorageClassName: &class,
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: claim.Spec.Resources.Requests[corev1.ResourceStorage]},
			},
		},
	}
}

// Volume is the PersistentVolume that binds opts.PVC to remote, its claim
// on peer: pinned to peer's virtual node (the scheduler puts the claim's
// pods nowhere else), with the remote claim's place as the volume handle
// and attributes of CSI driver offload.io, which kubectl describe shows.
func Volume(opts controller.ProvisionOptions, peer Peer, remote *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	claim := opts.PVC
	reclaim := corev1.PersistentVolumeReclaimDelete
	if opts.StorageClass != nil && opts.StorageClass.ReclaimPolicy != nil {
		reclaim = *opts.StorageClass.ReclaimPolicy
	}
	class := ""
	if remote.Spec.StorageClassName != nil {
		class = *remote.Spec.StorageClassName
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: opts.PVName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: claim.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   claim.Spec.AccessModes,
			VolumeMode:                    claim.Spec.VolumeMode,
			PersistentVolumeReclaimPolicy: reclaim,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver:       offloadv1alpha1.StorageDriver,
				VolumeHandle: strings.Join([]string{peer.ClusterID, remote.Namespace, remote.Name, string(remote.UID)}, "/"),
				VolumeAttributes: map[string]string{
					offloadv1alpha1.StorageAttributeProvider:   peer.Name,
					offloadv1alpha1.StorageAttributeProviderID: peer.ClusterID,
					offloadv1alpha1.StorageAttributeNamespace:  remote.Namespace,
					offloadv1alpha1.StorageAttributeClaim:      remote.Name,
					offloadv1alpha1.StorageAttributeClass:      class,
				},
			}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: offloadv1alpha1.LabelRemoteClusterID, Operator: corev1.NodeSelectorOpIn, Values: []string{peer.ClusterID},
				}},
			}}}},
		},
	}
}

// RemoteOf returns where the data of volume pv lives: the provider's
// cluster ID and the remote claim's namespace, name and UID; ok is false
// for a volume this provisioner did not make.
func RemoteOf(pv *corev1.PersistentVolume) (clusterID, namespace, name string, uid types.UID, ok bool) {
	if pv == nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != offloadv1alpha1.StorageDriver {
		return "", "", "", "", false
	}
	parts := strings.Split(pv.Spec.CSI.VolumeHandle, "/")
	if len(parts) != 4 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", "", false
	}
	return parts[0], parts[1], parts[2], types.UID(parts[3]), true
}

// Delete deletes the remote claim of pv, if it is still the one pv was
// made for. A peering that is gone took its twin namespaces, and the
// claims in them, with it; a peering that is restarting is waited for.
func (p *Provisioner) Delete(ctx context.Context, pv *corev1.PersistentVolume) error {
	clusterID, ns, name, uid, ok := RemoteOf(pv)
	if !ok {
		return &controller.IgnoredError{Reason: fmt.Sprintf("volume %s was not made by %s", pv.Name, offloadv1alpha1.StorageProvisioner)}
	}
	peer, running, peered, err := p.Peers.ByClusterID(ctx, clusterID)
	switch {
	case err != nil:
		return err
	case !running && !peered:
		return nil
	case !running:
		return fmt.Errorf("the peering with provider %s of volume %s is not running yet: its claim %s/%s there is deleted once it runs", clusterID, pv.Name, ns, name)
	}
	pre := metav1.DeleteOptions{}
	if uid != "" {
		pre.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err = peer.Provider.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, pre)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone, or another claim of that name that this volume does not own.
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting claim %s/%s of volume %s on provider %s: %w", ns, name, pv.Name, peer.Name, err)
	}
	return nil
}

// RemoteClaimOf returns the name of the remote claim, in twin namespace
// twin on provider providerID, that backs claim namespace/name of this
// cluster, read through r: the claim must be bound to a volume of
// StorageDriver on that provider. Anything else (a claim of another class,
// one bound to a volume of this cluster, or of another provider) is an
// error that says so: the pod cannot run on that provider.
func RemoteClaimOf(ctx context.Context, r client.Reader, namespace, name, providerID, twin string) (string, error) {
	var claim corev1.PersistentVolumeClaim
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &claim); err != nil {
		return "", fmt.Errorf("reading claim %s/%s: %w", namespace, name, err)
	}
	if claim.Spec.VolumeName == "" {
		return "", fmt.Errorf("claim %s is not bound to a volume yet", name)
	}
	var pv corev1.PersistentVolume
	if err := r.Get(ctx, client.ObjectKey{Name: claim.Spec.VolumeName}, &pv); err != nil {
		return "", fmt.Errorf("reading volume %s of claim %s: %w", claim.Spec.VolumeName, name, err)
	}
	id, ns, remote, _, ok := RemoteOf(&pv)
	switch {
	case !ok:
		return "", fmt.Errorf("claim %s is bound to volume %s of this cluster, which the provider cannot reach: claims of offloaded pods use StorageClass %s",
			name, pv.Name, offloadv1alpha1.StorageClassName)
	case id != providerID || ns != twin:
		return "", fmt.Errorf("claim %s is bound to volume %s, whose data lives in namespace %s of another provider (%s)", name, pv.Name, ns, id)
	}
	return remote, nil
}
