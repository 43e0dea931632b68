package localcluster

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/images"
)

// The cluster DNS of every local cluster with a real node: CoreDNS, built
// from the Go module proxy (hack/tools.sh), as a pod of the real node behind
// the Service kube-dns, which the kubelet gives pods as their name server.
const (
	// DNSServiceIP is the address of Service kube-system/kube-dns.
	DNSServiceIP = "10.0.0.10"
	// ClusterDomain is the cluster's DNS domain.
	ClusterDomain = "cluster.local"
	// corednsPort is where CoreDNS listens: not 53, so it runs as non-root.
	corednsPort = 1053
)

// corefile serves the cluster domain from the API (no upstream: the local
// clusters have no other DNS to forward to).
var corefile = fmt.Sprintf(`.:%d {
    errors
    health :8080
    ready :8181
    kubernetes %s in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
`, corednsPort, ClusterDomain)

// deployCoreDNS creates CoreDNS on the cluster's real node, as kubeadm
// clusters have it: Deployment coredns and Service kube-dns in kube-system.
// It does not wait; WaitDNS does.
func (c *Cluster) deployCoreDNS(ctx context.Context) error {
	const ns, name = metav1.NamespaceSystem, "coredns"
	labels := map[string]string{"k8s-app": "kube-dns"}
	kube := c.Kube
	steps := []func() error{
		create(ctx, kube.CoreV1().ServiceAccounts(ns).Create, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}),
		create(ctx, kube.RbacV1().ClusterRoles().Create, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			},
		}),
		create(ctx, kube.RbacV1().ClusterRoleBindings().Create, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:coredns"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		}),
		create(ctx, kube.CoreV1().ConfigMaps(ns).Create, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"Corefile": corefile},
		}),
		create(ctx, kube.AppsV1().Deployments(ns).Create, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						ServiceAccountName: name,
						NodeSelector:       map[string]string{RealNodeLabel: RealNodeLabelValue},
						// Its own name server is the node's, not itself.
						DNSPolicy: corev1.DNSDefault,
						Containers: []corev1.Container{{
							Name: name, Image: images.CoreDNSImageRef, ImagePullPolicy: corev1.PullNever,
							Args: []string{"-conf", "/etc/coredns/Corefile"},
							Ports: []corev1.ContainerPort{
								{Name: "dns", ContainerPort: corednsPort, Protocol: corev1.ProtocolUDP},
								{Name: "dns-tcp", ContainerPort: corednsPort, Protocol: corev1.ProtocolTCP},
							},
							ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}}, PeriodSeconds: 1},
							LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8080)}}},
							VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
						}},
						Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
							ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}},
						}}},
					},
				},
			},
		}),
		create(ctx, kube.CoreV1().Services(ns).Create, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Labels: labels},
			Spec: corev1.ServiceSpec{
				Selector:  labels,
				ClusterIP: c.DNSServiceIP(),
				Ports: []corev1.ServicePort{
					{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(corednsPort)},
					{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(corednsPort)},
				},
			},
		}),
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("deploying CoreDNS in cluster %s: %w", c.Name, err)
		}
	}
	return nil
}

// WaitDNS waits until the cluster's CoreDNS is ready to answer.
func (c *Cluster) WaitDNS(ctx context.Context, timeout time.Duration) error {
	_, err := framework.Poll(ctx, 250*time.Millisecond, timeout, func(ctx context.Context) (bool, string) {
		d, err := c.Kube.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas > 0, fmt.Sprintf("%d ready replicas", d.Status.ReadyReplicas)
	})
	if err != nil {
		return fmt.Errorf("CoreDNS of cluster %s is not ready: %w", c.Name, err)
	}
	return nil
}

// create returns a step that creates obj with f, a typed client's Create.
func create[T any](ctx context.Context, f func(context.Context, T, metav1.CreateOptions) (T, error), obj T) func() error {
	return func() error {
		_, err := f(ctx, obj, metav1.CreateOptions{})
		return err
	}
}
