package localcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/images"
)

// metrics-server, built from the Go module proxy (hack/tools.sh), serves
// the metrics API (kubectl top) of a local cluster with a real node: a pod
// of the real node behind APIService v1beta1.metrics.k8s.io, as its own
// manifests deploy it.
const (
	metricsServerImageRef = "registry.local/offload/metrics-server:test"
	metricsServerName     = "metrics-server"
	metricsServerPort     = 10251
	// MetricsServerResolution is how often metrics-server scrapes the
	// kubelets, its shortest.
	MetricsServerResolution = 10 * time.Second
	metricsAPIService       = "v1beta1.metrics.k8s.io"
)

// apiServices is the resource of APIServices, read through the dynamic
// client rather than kube-aggregator's clientset, a module of its own.
var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// MetricsServerImage builds (cached by content) the metrics-server image
// and returns its archive, for ClusterOptions.Images.
func MetricsServerImage(ctx context.Context) (string, error) {
	return images.BuildImage(ctx, "", "metrics-server", images.Image{Ref: metricsServerImageRef, User: images.NonRootUser})
}

// frontProxyPatches are the kube-apiserver flags of the aggregation layer,
// which proxies the metrics API to metrics-server: it authenticates to
// metrics-server with the admin certificate, the only one whose X-Remote-*
// headers are believed (the cluster has one CA for every certificate).
func frontProxyPatches(clusterDir string) [][2]string {
	pki := filepath.Join(clusterDir, "pki")
	return [][2]string{
		{"requestheader-client-ca-file", filepath.Join(pki, "ca.crt")},
		{"requestheader-allowed-names", "kwok-admin"},
		{"requestheader-username-headers", "X-Remote-User"},
		{"requestheader-group-headers", "X-Remote-Group"},
		{"requestheader-extra-headers-prefix", "X-Remote-Extra-"},
		{"proxy-client-cert-file", filepath.Join(pki, "admin.crt")},
		{"proxy-client-key-file", filepath.Join(pki, "admin.key")},
	}
}

// deployMetricsServer creates metrics-server on the cluster's real node,
// with the RBAC and APIService of its upstream manifest. It scrapes the
// kubelets at their InternalIP and, as local clusters have self-signed
// kubelet certificates, without verifying them (kind's setting). It does
// not wait; WaitMetrics does.
func (c *Cluster) deployMetricsServer(ctx context.Context) error {
	const ns, name = metav1.NamespaceSystem, metricsServerName
	labels := map[string]string{"k8s-app": name}
	kube := c.Kube
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}
	steps := []func() error{
		create(ctx, kube.CoreV1().ServiceAccounts(ns).Create, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}),
		create(ctx, kube.RbacV1().ClusterRoles().Create, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "system:metrics-server"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
				{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}},
			},
		}),
		create(ctx, kube.RbacV1().ClusterRoleBindings().Create, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "system:metrics-server"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:metrics-server"},
			Subjects:   []rbacv1.Subject{sa},
		}),
		// Delegated authentication and authorization of the requests
		// the aggregator proxies.
		create(ctx, kube.RbacV1().ClusterRoleBindings().Create, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "metrics-server:system:auth-delegator"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
			Subjects:   []rbacv1.Subject{sa},
		}),
		create(ctx, kube.RbacV1().RoleBindings(ns).Create, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "metrics-server-auth-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
			Subjects:   []rbacv1.Subject{sa},
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
						Containers: []corev1.Container{{
							Name: name, Image: metricsServerImageRef, ImagePullPolicy: corev1.PullNever,
							Args: []string{
								"--cert-dir=/tmp",
								"--secure-port=" + strconv.Itoa(metricsServerPort),
								"--kubelet-preferred-address-types=InternalIP",
								"--kubelet-use-node-status-port",
								"--kubelet-insecure-tls",
								"--metric-resolution=" + MetricsServerResolution.String(),
								// Shorter than the resolution, as it must be; kwok's fake
								// nodes have no kubelet and time out.
								"--kubelet-request-timeout=5s",
							},
							Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: metricsServerPort, Protocol: corev1.ProtocolTCP}},
							ReadinessProbe: &corev1.Probe{
								ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
									Path: "/readyz", Port: intstr.FromString("https"), Scheme: corev1.URISchemeHTTPS,
								}},
								PeriodSeconds: 2,
							},
							SecurityContext: &corev1.SecurityContext{
								AllowPrivilegeEscalation: ptr.To(false),
								ReadOnlyRootFilesystem:   ptr.To(true),
								RunAsNonRoot:             ptr.To(true),
								Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							},
							VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
						}},
						Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
					},
				},
			},
		}),
		create(ctx, kube.CoreV1().Services(ns).Create, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.ServiceSpec{
				Selector: labels,
				Ports:    []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("https")}},
			},
		}),
		create(ctx, func(ctx context.Context, u *unstructured.Unstructured, o metav1.CreateOptions) (*unstructured.Unstructured, error) {
			return dyn.Resource(apiServices).Create(ctx, u, o)
		}, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiregistration.k8s.io/v1",
			"kind":       "APIService",
			"metadata":   map[string]any{"name": metricsAPIService, "labels": map[string]any{"k8s-app": name}},
			"spec": map[string]any{
				"service":               map[string]any{"namespace": ns, "name": name, "port": int64(443)},
				"group":                 "metrics.k8s.io",
				"version":               "v1beta1",
				"insecureSkipTLSVerify": true,
				"groupPriorityMinimum":  int64(100),
				"versionPriority":       int64(100),
			},
		}}),
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("deploying metrics-server in cluster %s: %w", c.Name, err)
		}
	}
	return nil
}

// WaitMetrics waits until the cluster's metrics API is available.
func (c *Cluster) WaitMetrics(ctx context.Context, timeout time.Duration) error {
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	_, err = framework.Poll(ctx, 250*time.Millisecond, timeout, func(ctx context.Context) (bool, string) {
		s, err := dyn.Resource(apiServices).Get(ctx, metricsAPIService, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		conditions, _, _ := unstructured.NestedSlice(s.Object, "status", "conditions")
		for _, c := range conditions {
			cond, _ := c.(map[string]any)
			if cond["type"] == "Available" {
				return cond["status"] == "True", fmt.Sprintf("%v: %v", cond["reason"], cond["message"])
			}
		}
		return false, "no Available condition yet"
	})
	if err != nil {
		return fmt.Errorf("the metrics API of cluster %s is not available: %w", c.Name, err)
	}
	return nil
}
