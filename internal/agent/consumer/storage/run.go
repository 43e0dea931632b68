package storage

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// Controller runs the Provisioner of StorageClass offload through
// sig-storage-lib-external-provisioner's ProvisionController, as a
// manager Runnable: on the leader only, which runs the virtual nodes.
type Controller struct {
	// Kube reads and writes this cluster's claims, volumes and events.
	Kube kubernetes.Interface
	// Provisioner says what to create and delete; its Consumer and Events
	// default to Kube and a recorder of Kube.
	Provisioner *Provisioner
}

// Start runs the provision controller until ctx is done.
func (c *Controller) Start(ctx context.Context) error {
	p := c.Provisioner
	if p.Consumer == nil {
		p.Consumer = c.Kube
	}
	if p.Events == nil {
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.Kube.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		p.Events = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "offload-storage"})
	}
	pc := controller.NewProvisionController(ctx, c.Kube, offloadv1alpha1.StorageProvisioner, p,
		// The manager elects the leader.
		controller.LeaderElection(false),
		// A claim the provider refuses for want of quota is provisioned
		// once there is room: retried with backoff, never given up.
		controller.FailedProvisionThreshold(0),
		controller.FailedDeleteThreshold(0),
	)
	pc.Run(ctx)
	return nil
}
