package localcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The annotation that selects the nodes kwok simulates. Nodes without it,
// such as virtual-kubelet nodes, are left alone.
const (
	FakeNodeAnnotation      = "kwok.x-k8s.io/node"
	FakeNodeAnnotationValue = "fake"
	// FakeNodeLabel marks fake nodes so tests can select them.
	FakeNodeLabel = "type"
	// FakeNodeLabelValue is the value of FakeNodeLabel on fake nodes.
	FakeNodeLabelValue = "kwok"
)

// FakeNodeTaint is the taint of the fake nodes of clusters started with
// ClusterOptions.TaintFakeNodes: kwok runs no container, so pods that
// must really run (the demo's, a user's on clusters-up) stay off them, and
// those meant for them (the benchmarks') tolerate it explicitly.
var FakeNodeTaint = corev1.Taint{Key: FakeNodeAnnotation, Value: FakeNodeAnnotationValue, Effect: corev1.TaintEffectNoSchedule}

// FakeNodeToleration tolerates FakeNodeTaint; FakeNodeTolerationFlag is
// it as kubectl offload peer generate --toleration takes it.
var (
	FakeNodeToleration     = corev1.Toleration{Key: FakeNodeAnnotation, Operator: corev1.TolerationOpEqual, Value: FakeNodeAnnotationValue, Effect: corev1.TaintEffectNoSchedule}
	FakeNodeTolerationFlag = FakeNodeAnnotation + "=" + FakeNodeAnnotationValue + ":" + string(corev1.TaintEffectNoSchedule)
)

// Capacity is the capacity of a fake node.
type Capacity struct {
	CPU    string
	Memory string
	Pods   string
	// Extended are extended resources, such as fake GPUs (nvidia.com/gpu),
	// by name: kwok's nodes report them, and the scheduler counts them.
	Extended map[corev1.ResourceName]string
}

// DefaultCapacity is a realistic worker node.
var DefaultCapacity = Capacity{CPU: "32", Memory: "256Gi", Pods: "110"}

func (c Capacity) withDefaults() Capacity {
	if c.CPU == "" {
		c.CPU = DefaultCapacity.CPU
	}
	if c.Memory == "" {
		c.Memory = DefaultCapacity.Memory
	}
	if c.Pods == "" {
		c.Pods = DefaultCapacity.Pods
	}
	return c
}

func (c Capacity) resources() (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for name, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: c.CPU, corev1.ResourceMemory: c.Memory, corev1.ResourcePods: c.Pods} {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("node capacity %s=%q: %w", name, v, err)
		}
		out[name] = q
	}
	for name, v := range c.Extended {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("node capacity %s=%q: %w", name, v, err)
		}
		out[name] = q
	}
	return out, nil
}

// FakeNodeName returns the name of the i-th fake node of a cluster.
func FakeNodeName(cluster string, i int) string { return fmt.Sprintf("%s-fake-%d", cluster, i) }

// AddFakeNodes creates n more fake nodes simulated by kwok, with taints,
// and waits until they are Ready. Names continue after the fake nodes
// already there.
func (c *Cluster) AddFakeNodes(ctx context.Context, n int, capacity Capacity, taints ...corev1.Taint) error {
	res, err := capacity.withDefaults().resources()
	if err != nil {
		return err
	}
	existing, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: FakeNodeLabel + "=" + FakeNodeLabelValue})
	if err != nil {
		return fmt.Errorf("listing fake nodes: %w", err)
	}
	var created []string
	for i := len(existing.Items); len(created) < n; i++ {
		name := FakeNodeName(c.Name, i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{FakeNodeAnnotation: FakeNodeAnnotationValue},
				Labels: map[string]string{
					FakeNodeLabel:            FakeNodeLabelValue,
					"kubernetes.io/hostname": name,
					"kubernetes.io/os":       "linux",
					"kubernetes.io/arch":     "amd64",
					"kubernetes.io/role":     "agent",
				},
			},
			Spec: corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{
				Capacity:    res,
				Allocatable: res,
				NodeInfo:    corev1.NodeSystemInfo{KubeletVersion: "fake", OperatingSystem: "linux", Architecture: "amd64"},
			},
		}
		_, err := c.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("creating fake node %s: %w", name, err)
		}
		created = append(created, name)
	}
	for _, name := range created {
		if err := c.WaitNodeReady(ctx, name, time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// WaitNodeReady polls until the node reports Ready.
func (c *Cluster) WaitNodeReady(ctx context.Context, name string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := c.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for node %s in cluster %s to be Ready: %w", name, c.Name, err)
	}
	return nil
}
