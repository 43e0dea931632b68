package resourceoffer

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

func node(name, cpu, mem, pods string, readyNode bool, labels map[string]string) corev1.Node {
	status := corev1.ConditionFalse
	if readyNode {
		status = corev1.ConditionTrue
	}
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem), corev1.ResourcePods: resource.MustParse(pods),
			},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}},
		},
	}
}

func pod(nodeName, cpu, mem string, phase corev1.PodPhase) corev1.Pod {
	return corev1.Pod{
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem),
		}}}}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

// tainted gives n a taint.
func tainted(n corev1.Node, key, value string, effect corev1.TaintEffect) corev1.Node {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	return n
}

// fromConsumer labels p as a remote pod of consumer clusterID.
func fromConsumer(p corev1.Pod, clusterID string) corev1.Pod {
	p.Labels = map[string]string{offloadv1alpha1.LabelOriginClusterID: clusterID}
	return p
}

// withSidecar gives p a sidecar (a restartable init container) requesting
// sidecarCPU, then a plain init container requesting initCPU.
func withSidecar(p corev1.Pod, sidecarCPU, initCPU string) corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	cpu := func(q string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}}
	}
	p.Spec.InitContainers = []corev1.Container{
		{Name: "sidecar", RestartPolicy: &always, Resources: cpu(sidecarCPU)},
		{Name: "init", Resources: cpu(initCPU)},
	}
	return p
}

func TestFreeAndShare(t *testing.T) {
	tests := []struct {
		name            string
		nodes           []corev1.Node
		pods            []corev1.Pod
		percent         int
		cpu, mem, count string
		// tenant is the cluster ID of the consumer the offer is for.
		tenant string
		// policy is the tenant's.
		policy offloadv1alpha1.ConsumerPolicy
	}{
		{
			name:    "two ready nodes with nothing running lend half of everything",
			nodes:   []corev1.Node{node("a", "4", "8Gi", "110", true, nil), node("b", "4", "8Gi", "110", true, nil)},
			percent: 50, cpu: "4", mem: "8Gi", count: "110",
		},
		{
			name:    "running pods' requests and slots are not offered, finished pods' are",
			nodes:   []corev1.Node{node("a", "4", "8Gi", "10", true, nil)},
			pods:    []corev1.Pod{pod("a", "1", "2Gi", corev1.PodRunning), pod("a", "2", "4Gi", corev1.PodSucceeded), pod("", "1", "1Gi", corev1.PodPending)},
			percent: 100, cpu: "3", mem: "6Gi", count: "9",
		},
		{
			name: "not-ready, unschedulable and virtual nodes lend nothing",
			nodes: []corev1.Node{
				node("ready", "2", "2Gi", "10", true, nil),
				node("down", "8", "8Gi", "10", false, nil),
				node("virtual", "64", "64Gi", "100", true, map[string]string{offloadv1alpha1.LabelType: "virtual-node"}),
			},
			pods:    []corev1.Pod{pod("virtual", "1", "1Gi", corev1.PodRunning)},
			percent: 100, cpu: "2", mem: "2Gi", count: "10",
		},
		{
			name:    "an overcommitted node offers zero, not a negative amount",
			nodes:   []corev1.Node{node("a", "1", "1Gi", "1", true, nil)},
			pods:    []corev1.Pod{pod("a", "2", "2Gi", corev1.PodRunning), pod("a", "1", "1Gi", corev1.PodRunning)},
			percent: 50, cpu: "0", mem: "0", count: "0",
		},
		{
			// KEP-753: a sidecar runs beside the later init containers and
			// the app, so the peak is max(400m+200m, 300m+200m) = 600m. The
			// hand-written sum before took max(300m, 400m) = 400m and lent
			// 200m that was in use.
			name:    "a sidecar counts beside the init containers that follow it and beside the app",
			nodes:   []corev1.Node{node("a", "4", "8Gi", "10", true, nil)},
			pods:    []corev1.Pod{withSidecar(pod("a", "300m", "1Gi", corev1.PodRunning), "200m", "400m")},
			percent: 100, cpu: "3400m", mem: "7Gi", count: "9",
		},
		{
			name:  "the tenant's own pods do not shrink its offer; other consumers' and the provider's do",
			nodes: []corev1.Node{node("a", "4", "8Gi", "10", true, nil)},
			pods: []corev1.Pod{fromConsumer(pod("a", "1", "1Gi", corev1.PodRunning), "tenant-a"),
				fromConsumer(pod("a", "1", "1Gi", corev1.PodRunning), "tenant-b"), pod("a", "1", "1Gi", corev1.PodRunning)},
			tenant:  "tenant-a",
			percent: 100, cpu: "2", mem: "6Gi", count: "8",
		},
		{
			name: "only the nodes the provider chose for the tenant lend: its selector's, whose taints it tolerates",
			nodes: []corev1.Node{
				node("chosen", "4", "8Gi", "10", true, map[string]string{"pool": "tenants"}),
				node("other-pool", "8", "8Gi", "10", true, map[string]string{"pool": "batch"}),
				tainted(node("chosen-tainted", "2", "2Gi", "10", true, map[string]string{"pool": "tenants"}), "dedicated", "tenants", corev1.TaintEffectNoSchedule),
				tainted(node("chosen-reserved", "16", "16Gi", "10", true, map[string]string{"pool": "tenants"}), "reserved", "", corev1.TaintEffectNoExecute),
				tainted(node("chosen-soft", "1", "1Gi", "10", true, map[string]string{"pool": "tenants"}), "soft", "", corev1.TaintEffectPreferNoSchedule),
			},
			pods: []corev1.Pod{pod("other-pool", "1", "1Gi", corev1.PodRunning), pod("chosen", "1", "1Gi", corev1.PodRunning)},
			policy: offloadv1alpha1.ConsumerPolicy{NodeSelector: map[string]string{"pool": "tenants"},
				Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tenants", Effect: corev1.TaintEffectNoSchedule}}},
			percent: 100, cpu: "6", mem: "10Gi", count: "29",
		},
		{
			name: "without a choice, every node whose blocking taints are tolerated lends: a tainted control plane does not",
			nodes: []corev1.Node{
				node("worker", "4", "8Gi", "10", true, nil),
				tainted(node("control-plane", "4", "8Gi", "10", true, nil), "node-role.kubernetes.io/control-plane", "", corev1.TaintEffectNoSchedule),
			},
			percent: 100, cpu: "4", mem: "8Gi", count: "10",
		},
		{
			name:    "shares round down to whole milli-cpus, bytes and pods",
			nodes:   []corev1.Node{node("a", "1", "1001", "3", true, nil)},
			percent: 50, cpu: "500m", mem: "500", count: "1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Share(Free(tt.nodes, tt.pods, tt.tenant, tt.policy), tt.percent)
			for r, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: tt.cpu, corev1.ResourceMemory: tt.mem, corev1.ResourcePods: tt.count} {
				q := got[r]
				if q.Cmp(resource.MustParse(want)) != 0 {
					t.Errorf("%s = %s, want %s", r, q.String(), want)
				}
			}
		})
	}
}

func TestFreeLendsEphemeralStorageWhereNodesReportItAndNoDevices(t *testing.T) {
	withDevices := node("real", "4", "8Gi", "10", true, nil)
	withDevices.Status.Allocatable[corev1.ResourceEphemeralStorage] = resource.MustParse("100Gi")
	withDevices.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("2")
	withDevices.Status.Allocatable["hugepages-2Mi"] = resource.MustParse("1Gi")
	user := pod("real", "1", "1Gi", corev1.PodRunning)
	user.Spec.Containers[0].Resources.Requests[corev1.ResourceEphemeralStorage] = resource.MustParse("10Gi")
	user.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("1")
	fake := node("fake", "32", "64Gi", "110", true, nil) // kwok's: no ephemeral storage

	got := Free([]corev1.Node{withDevices, fake}, []corev1.Pod{user}, "", offloadv1alpha1.ConsumerPolicy{})
	for r, want := range map[corev1.ResourceName]string{
		corev1.ResourceEphemeralStorage: "90Gi", "nvidia.com/gpu": "0", "hugepages-2Mi": "0", corev1.ResourceCPU: "35",
	} {
		if q, ok := got[r]; !ok || q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("%s = %v (listed %v), want %s", r, q.String(), ok, want)
		}
	}
	if got := Free([]corev1.Node{fake}, nil, "", offloadv1alpha1.ConsumerPolicy{}); len(got) != 3 {
		t.Errorf("nodes that report no ephemeral storage or devices: offer %v, want cpu, memory and pods only", got)
	}
	if half := Share(got, 50)[corev1.ResourceEphemeralStorage]; half.Cmp(resource.MustParse("45Gi")) != 0 {
		t.Errorf("half the ephemeral storage = %v, want 45Gi", half.String())
	}
}

func TestOnlyExtendedResourcesAndHugePagesAreDevices(t *testing.T) {
	for r, want := range map[corev1.ResourceName]bool{
		"nvidia.com/gpu": true, "example.com/dongle": true, "hugepages-1Gi": true,
		corev1.ResourceCPU: false, corev1.ResourceEphemeralStorage: false, "kubernetes.io/batch-cpu": false,
		"scheduling.kubernetes.io/x": false, "requests.nvidia.com/gpu": false,
	} {
		if got := offloadv1alpha1.Device(r); got != want {
			t.Errorf("Device(%s) = %v, want %v", r, got, want)
		}
	}
}

func TestFreeLendsTheDevicesThePolicyNames(t *testing.T) {
	gpus := node("gpus", "8", "32Gi", "10", true, nil)
	gpus.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("4")
	gpus.Status.Allocatable["example.com/fpga"] = resource.MustParse("2")
	more := node("more", "8", "32Gi", "10", true, nil)
	more.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("2")
	// The provider's own pod takes a GPU; the tenant's does not shrink its offer.
	own := pod("gpus", "1", "1Gi", corev1.PodRunning)
	own.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("1")
	tenants := pod("more", "1", "1Gi", corev1.PodRunning)
	tenants.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("2")
	tenants.Labels = map[string]string{offloadv1alpha1.LabelOriginClusterID: "consumer"}
	policy := offloadv1alpha1.ConsumerPolicy{ExtendedResources: []corev1.ResourceName{"nvidia.com/gpu"}}

	got := Share(Free([]corev1.Node{gpus, more}, []corev1.Pod{own, tenants}, "consumer", policy), 50)
	for r, want := range map[corev1.ResourceName]string{"nvidia.com/gpu": "2", "example.com/fpga": "0"} {
		if q, ok := got[r]; !ok || q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("half the free %s = %v (listed %v), want %s", r, q.String(), ok, want)
		}
	}
	// A node the policy does not serve lends none of its GPUs.
	policy.NodeSelector = map[string]string{"pool": "tenants"}
	if q := Free([]corev1.Node{gpus, more}, nil, "consumer", policy)["nvidia.com/gpu"]; q.Sign() != 0 {
		t.Errorf("GPUs of nodes the policy does not select: %s, want 0", q.String())
	}
}
