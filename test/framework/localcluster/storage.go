package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/images"
)

// Dynamic storage of a local cluster with a real node: Rancher's
// local-path-provisioner (what k3s ships), built from the Go module proxy
// (hack/tools.sh), as a pod of the real node. It provisions a claim of
// StorageClassName as a directory of the host under the directory of the
// node the claim's first pod is scheduled to (RealNode.StorageDir), which
// goes with the node when the cluster is deleted.
const (
	// StorageClassName is the cluster's default StorageClass when it has
	// storage (ClusterOptions.Storage).
	StorageClassName = "local-path"
	// StorageProvisioner is the provisioner of StorageClassName.
	StorageProvisioner = "rancher.io/local-path"
	// StorageNamespace holds the provisioner, its configuration and its
	// helper pods.
	StorageNamespace = "local-path-storage"

	storageName             = "local-path-provisioner"
	storageConfigMap        = "local-path-config"
	storageImageRef         = "registry.local/offload/local-path-provisioner:test"
	volumeHelperImageRef    = "registry.local/offload/volumehelper:test"
	storageConfigMountPath  = "/etc/config/"
	defaultStorageClassAnno = "storageclass.kubernetes.io/is-default-class"
)

// StorageImages builds (cached by content) the images of the storage
// provisioner and of its helper pods, and returns their archives, for
// ClusterOptions.Images. The helper, ./test/images/volumehelper, makes and
// removes the volumes' directories in place of the upstream shell scripts,
// as the test images have no shell.
func StorageImages(ctx context.Context) ([]string, error) {
	provisioner, err := images.BuildImage(ctx, "", storageName, images.Image{Ref: storageImageRef, User: images.NonRootUser})
	if err != nil {
		return nil, err
	}
	helper, err := images.BuildImage(ctx, "./test/images/volumehelper", "", images.Image{Ref: volumeHelperImageRef})
	if err != nil {
		return nil, err
	}
	return []string{provisioner, helper}, nil
}

// StorageDir is the host directory the node's provisioned volumes live
// in, one directory per volume; it goes with the node's directory.
func (n *RealNode) StorageDir() string { return n.path("storage") }

// localPathConfig is the provisioner's config.json: where each node's
// volumes go, and the command its helper pods run instead of the shell
// scripts "setup" and "teardown" of its ConfigMap.
type localPathConfig struct {
	NodePathMap     []localPathNode `json:"nodePathMap"`
	SetupCommand    string          `json:"setupCommand"`
	TeardownCommand string          `json:"teardownCommand"`
}

// localPathNode is one node's entry of localPathConfig.
type localPathNode struct {
	Node  string   `json:"node"`
	Paths []string `json:"paths"`
}

// storageConfig is the provisioner's ConfigMap data: config.json, which
// gives each real node its StorageDir and no path to the other (kwok's
// fake) nodes, so that a claim of a pod on one fails at once, in an event
// that names the node; and helperPod.yaml, the template of the helper pods.
func (c *Cluster) storageConfig() (map[string]string, error) {
	cfg := localPathConfig{SetupCommand: "/volumehelper", TeardownCommand: "/volumehelper"}
	for _, n := range c.RealNodes() {
		cfg.NodePathMap = append(cfg.NodePathMap, localPathNode{Node: n.Name, Paths: []string{n.StorageDir()}})
	}
	config, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	// The provisioner adds the volume's mounts, command, arguments and
	// node, and a toleration of every taint.
	helper, err := yaml.Marshal(&corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "helper-pod"},
		Spec: corev1.PodSpec{
			PriorityClassName:            "system-node-critical",
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "helper-pod", Image: volumeHelperImageRef, ImagePullPolicy: corev1.PullNever,
			}},
		},
	})
	if err != nil {
		return nil, err
	}
	return map[string]string{"config.json": string(config), "helperPod.yaml": string(helper)}, nil
}

// deployStorage creates the local-path provisioner on the cluster's real
// node in StorageNamespace, with the RBAC of its upstream manifest
// narrowed to what it uses (what it reads in its own namespace, it may
// read only there), and StorageClassName as the default class. It does
// not wait; WaitStorage does.
func (c *Cluster) deployStorage(ctx context.Context) error {
	const ns, name = StorageNamespace, storageName
	labels := map[string]string{"app": name}
	kube := c.Kube
	data, err := c.storageConfig()
	if err != nil {
		return fmt.Errorf("deploying storage in cluster %s: %w", c.Name, err)
	}
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}
	steps := []func() error{
		create(ctx, kube.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}),
		create(ctx, kube.CoreV1().ServiceAccounts(ns).Create, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}),
		create(ctx, kube.RbacV1().ClusterRoles().Create, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"nodes", "persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}},
				{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
				{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
			},
		}),
		create(ctx, kube.RbacV1().ClusterRoleBindings().Create, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{sa},
		}),
		// Its helper pods, their logs (which it copies into its own), and
		// its ConfigMap's helperPod.yaml.
		create(ctx, kube.RbacV1().Roles(ns).Create, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "create", "delete"}},
				{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{storageConfigMap}, Verbs: []string{"get"}},
			},
		}),
		create(ctx, kube.RbacV1().RoleBindings(ns).Create, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{sa},
		}),
		create(ctx, kube.CoreV1().ConfigMaps(ns).Create, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: storageConfigMap}, Data: data}),
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
							Name: name, Image: storageImageRef, ImagePullPolicy: corev1.PullNever,
							Args: []string{
								"--debug", "start",
								"--config", filepath.Join(storageConfigMountPath, "config.json"),
								"--configmap-name", storageConfigMap,
								"--service-account-name", name,
								"--provisioner-name", StorageProvisioner,
								"--helper-image", volumeHelperImageRef,
							},
							Env: []corev1.EnvVar{
								{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
								// Where it reloads helperPod.yaml from.
								{Name: "CONFIG_MOUNT_PATH", Value: storageConfigMountPath},
							},
							SecurityContext: &corev1.SecurityContext{
								AllowPrivilegeEscalation: ptr.To(false),
								ReadOnlyRootFilesystem:   ptr.To(true),
								RunAsNonRoot:             ptr.To(true),
								Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							},
							VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: storageConfigMountPath, ReadOnly: true}},
						}},
						Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
							ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: storageConfigMap}},
						}}},
					},
				},
			},
		}),
		create(ctx, kube.StorageV1().StorageClasses().Create, &storagev1.StorageClass{
			ObjectMeta:        metav1.ObjectMeta{Name: StorageClassName, Annotations: map[string]string{defaultStorageClassAnno: "true"}},
			Provisioner:       StorageProvisioner,
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
			ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		}),
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("deploying storage in cluster %s: %w", c.Name, err)
		}
	}
	return nil
}

// WaitStorage waits until the cluster's storage provisioner is available.
func (c *Cluster) WaitStorage(ctx context.Context, timeout time.Duration) error {
	_, err := framework.Poll(ctx, 250*time.Millisecond, timeout, func(ctx context.Context) (bool, string) {
		d, err := c.Kube.AppsV1().Deployments(StorageNamespace).Get(ctx, storageName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.AvailableReplicas > 0, fmt.Sprintf("%d available replicas", d.Status.AvailableReplicas)
	})
	if err != nil {
		return fmt.Errorf("the storage provisioner of cluster %s is not available (its log: kubectl -n %s logs deploy/%s): %w",
			c.Name, StorageNamespace, storageName, err)
	}
	return nil
}
