// Package resourceoffer runs on the provider: it publishes, in each tenant
// namespace, the ResourceOffer that tells a consumer how much it may use, a
// share of the allocatable cpu, memory and pods of the nodes lent to it
// (or of what is free of them, Basis), and of the extended resources the
// tenant's policy lends.
package resourceoffer

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// offered are the resources a ResourceOffer lends; ephemeral storage only
// where a node reports it (kwok's nodes, for one, do not).
var offered = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods}

// Free returns the allocatable cpu, memory, pods and ephemeral storage of
// the schedulable, Ready, non-virtual nodes that serve the tenant's pods
// (Serves), and of the devices the policy lends (ConsumerPolicy.Lends),
// with the other devices at 0 (offloadv1alpha1.Device), minus what the
// pods bound to them request, but the pods of the consumer whose
// cluster ID is tenant ("" for none): what a tenant is offered does not
// shrink as it uses it, or a consumer's virtual node would have less room
// than the pods already bound to it.
func Free(nodes []corev1.Node, pods []corev1.Pod, tenant string, policy offloadv1alpha1.ConsumerPolicy) corev1.ResourceList {
	return freeOf(nodes, usageOf(pods), tenant, policy)
}

// Allocatable returns what Free does with no pod bound: the allocatable
// resources of the nodes that serve the tenant's pods and of the devices
// the policy lends.
func Allocatable(nodes []corev1.Node, policy offloadv1alpha1.ConsumerPolicy) corev1.ResourceList {
	return freeOf(nodes, NewUsage(), "", policy)
}

// freeOf is Free with the pods' requests summed up in usage.
func freeOf(nodes []corev1.Node, usage *Usage, tenant string, policy offloadv1alpha1.ConsumerPolicy) corev1.ResourceList {
	usable := map[string]bool{}
	total := map[corev1.ResourceName]*resource.Quantity{}
	for _, r := range offered {
		total[r] = resource.NewQuantity(0, resource.DecimalSI)
	}
	serves := servedBy(policy)
	for _, n := range nodes {
		if n.Labels[offloadv1alpha1.LabelType] == offloadv1alpha1.TypeVirtualNode || n.Spec.Unschedulable || !ready(n) || !serves(&n) {
			continue
		}
		usable[n.Name] = true
		for _, r := range offered {
			if q, ok := n.Status.Allocatable[r]; ok {
				total[r].Add(q)
			}
		}
		if q, ok := n.Status.Allocatable[corev1.ResourceEphemeralStorage]; ok {
			if total[corev1.ResourceEphemeralStorage] == nil {
				total[corev1.ResourceEphemeralStorage] = resource.NewQuantity(0, resource.BinarySI)
			}
			total[corev1.ResourceEphemeralStorage].Add(q)
		}
		for r, q := range n.Status.Allocatable {
			if !offloadv1alpha1.Device(r) {
				continue
			}
			if total[r] == nil {
				total[r] = resource.NewQuantity(0, resource.DecimalSI)
			}
			if policy.Lends(r) {
				total[r].Add(q)
			}
		}
	}
	usage.subtract(total, usable, tenant)
	out := corev1.ResourceList{}
	for r, q := range total {
		if q.Sign() < 0 {
			q = resource.NewQuantity(0, q.Format)
		}
		out[r] = *q
	}
	return out
}

// servedBy returns whether a node runs the pods of a tenant with policy:
// it has the labels of the policy's NodeSelector, and the policy's
// Tolerations tolerate its NoSchedule and NoExecute taints. A consumer
// allowed node placement may tolerate more, but the nodes a provider
// taints are not lent unless its policy says so.
func servedBy(policy offloadv1alpha1.ConsumerPolicy) func(*corev1.Node) bool {
	selector := labels.SelectorFromSet(policy.NodeSelector) // empty: every node
	tolerations := append(slices.Clip(policy.Tolerations), readinessTolerations...)
	blocking := func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}
	return func(n *corev1.Node) bool {
		if !selector.Matches(labels.Set(n.Labels)) {
			return false
		}
		_, untolerated := corev1helper.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, tolerations, blocking, false)
		return !untolerated
	}
}

// readinessTolerations tolerate the taints that follow a node's Ready
// condition, which Free judges by the condition itself: the API server
// puts the not-ready taint on every new node, and the node lifecycle
// controller takes it off later.
var readinessTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists},
}

// Share returns percent of free, rounded down: whole milli-cpus, bytes, pods.
func Share(free corev1.ResourceList, percent int) corev1.ResourceList {
	out := corev1.ResourceList{}
	for r, q := range free {
		switch r {
		case corev1.ResourceCPU:
			out[r] = *resource.NewMilliQuantity(q.MilliValue()*int64(percent)/100, resource.DecimalSI)
		case corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
			out[r] = *resource.NewQuantity(q.Value()*int64(percent)/100, resource.BinarySI)
		default:
			out[r] = *resource.NewQuantity(q.Value()*int64(percent)/100, resource.DecimalSI)
		}
	}
	return out
}

// podRequests is what a pod takes from its node, by the scheduler's own
// arithmetic (k8s.io/component-helpers): the app containers with the
// restartable init containers (sidecars) that run beside them, or the
// largest init container if more, plus the overhead.
func podRequests(p *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
}

func ready(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
