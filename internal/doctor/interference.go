package doctor

import (
	"context"
	"slices"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/status"
)

// ownWebhook is the name of kubectl-offload's own webhook configurations.
const ownWebhook = "offload-webhook"

// virtualNodeTaint is the taint virtual nodes carry.
var virtualNodeTaint = offloadv1alpha1.VirtualNodeTaint()

// interferenceChecker looks for DaemonSets that would run on virtual nodes
// and for admission webhooks that can block or change offloaded pods.
type interferenceChecker struct{}

func (interferenceChecker) Name() string { return "interference" }

func (interferenceChecker) Check(ctx context.Context, d *Env) status.Section {
	s := status.Section{Title: "DaemonSets and webhooks"}
	s.Checks = append(s.Checks, daemonSetsCheck(ctx, d), webhooksCheck(ctx, d))
	return s
}

// daemonSetsCheck names the DaemonSets that would get pods on this
// cluster's virtual nodes.
func daemonSetsCheck(ctx context.Context, d *Env) status.Check {
	const name = "daemonsets"
	nodes, err := d.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: offloadv1alpha1.LabelType + "=" + offloadv1alpha1.TypeVirtualNode})
	if err != nil {
		return status.Warn(name, "cannot list the virtual nodes: %v", err)
	}
	if len(nodes.Items) == 0 {
		return status.OK(name, "this cluster has no virtual nodes: no DaemonSet can put pods on one")
	}
	list, err := d.Kube.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return status.Warn(name, "cannot list the DaemonSets: %v", err)
	}
	untainted := slices.ContainsFunc(nodes.Items, func(n corev1.Node) bool { return offloadv1alpha1.VirtualNodeUntainted(&n) })
	var bad []string
	for i := range list.Items {
		if daemonSetInterferes(&list.Items[i], untainted) {
			bad = append(bad, list.Items[i].Namespace+"/"+list.Items[i].Name)
		}
	}
	if len(bad) == 0 {
		return status.OK(name, "no DaemonSet would put pods on the virtual nodes")
	}
	sort.Strings(bad)
	why := "tolerate the taint " + virtualNodeTaint.ToString() + " and are not kept off the virtual nodes"
	if untainted {
		why = "are not kept off the virtual nodes, and one of those is untainted"
	}
	return status.Warn(name, "DaemonSets %s %s: their pods would run in the providers, or stay Pending; the agent keeps such DaemonSets off unless they are annotated %s=%s, so its controller is not running: see kubectl offload status",
		strings.Join(bad, ", "), why, offloadv1alpha1.AnnotationVirtualNodes, offloadv1alpha1.VirtualNodesAllowed)
}

// daemonSetInterferes reports whether ds would get pods on virtual nodes
// without meaning to: its pods tolerate the virtual-node taint (any pod
// passes an untainted virtual node), it did not opt in, the agent did not
// mark it as kept off, and its required node affinity does not keep it off
// either.
func daemonSetInterferes(ds *appsv1.DaemonSet, untainted bool) bool {
	if ds.Annotations[offloadv1alpha1.AnnotationVirtualNodes] == offloadv1alpha1.VirtualNodesAllowed ||
		ds.Annotations[offloadv1alpha1.AnnotationVirtualNodesExcluded] == "true" {
		return false
	}
	spec := &ds.Spec.Template.Spec
	passes := untainted || slices.ContainsFunc(spec.Tolerations, func(t corev1.Toleration) bool {
		return t.ToleratesTaint(klog.Background(), &virtualNodeTaint, false)
	})
	return passes && !keptOffVirtualNodes(spec)
}

// keptOffVirtualNodes reports whether every required node affinity term
// of spec rules out nodes labelled as virtual nodes.
func keptOffVirtualNodes(spec *corev1.PodSpec) bool {
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return false
	}
	for _, t := range terms {
		if !slices.ContainsFunc(t.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
			return r.Key == offloadv1alpha1.LabelType &&
				(r.Operator == corev1.NodeSelectorOpDoesNotExist || r.Operator == corev1.NodeSelectorOpNotIn && slices.Contains(r.Values, offloadv1alpha1.TypeVirtualNode))
		}) {
			return false
		}
	}
	return true
}

// webhooksCheck names the admission webhooks, other than kubectl-offload's,
// that can block or change offloaded pods.
func webhooksCheck(ctx context.Context, d *Env) status.Check {
	const name = "webhooks"
	ar := d.Kube.AdmissionregistrationV1()
	var bad []string
	mutating, err := ar.MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return status.Warn(name, "cannot list the MutatingWebhookConfigurations: %v", err)
	}
	for _, cfg := range mutating.Items {
		for _, w := range cfg.Webhooks {
			if !ownWebhookConfiguration(cfg.ObjectMeta) && webhookInterferes(w.Rules, w.FailurePolicy, w.NamespaceSelector) {
				bad = append(bad, "MutatingWebhookConfiguration "+cfg.Name+" (webhook "+w.Name+")")
			}
		}
	}
	validating, err := ar.ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return status.Warn(name, "cannot list the ValidatingWebhookConfigurations: %v", err)
	}
	for _, cfg := range validating.Items {
		for _, w := range cfg.Webhooks {
			if !ownWebhookConfiguration(cfg.ObjectMeta) && webhookInterferes(w.Rules, w.FailurePolicy, w.NamespaceSelector) {
				bad = append(bad, "ValidatingWebhookConfiguration "+cfg.Name+" (webhook "+w.Name+")")
			}
		}
	}
	if len(bad) == 0 {
		return status.OK(name, "no other admission webhook can block offloaded pods")
	}
	return status.Warn(name, "%s intercept pods with failurePolicy Fail in offloaded namespaces too: when they fail or refuse, offloaded pods are not created or updated, and what they change is what the provider runs; exclude offloaded namespaces from them with a namespaceSelector on %s NotIn [true], or make sure they accept offloaded pods",
		strings.Join(bad, ", "), offloadv1alpha1.LabelOffloaded)
}

// ownWebhookConfiguration reports whether a webhook configuration is
// kubectl-offload's own.
func ownWebhookConfiguration(m metav1.ObjectMeta) bool {
	return m.Name == ownWebhook || m.Labels[offloadv1alpha1.PartOfLabel] == offloadv1alpha1.PartOfValue
}

// webhookInterferes reports whether a webhook can block or change pods in
// offloaded namespaces: it intercepts pods on CREATE or UPDATE, its
// failure policy is Fail (the default), and its namespace selector does
// not rule out namespaces labelled offload.io/offloaded=true.
func webhookInterferes(rules []admissionregistrationv1.RuleWithOperations, policy *admissionregistrationv1.FailurePolicyType, nsSelector *metav1.LabelSelector) bool {
	if policy != nil && *policy != admissionregistrationv1.Fail {
		return false
	}
	return slices.ContainsFunc(rules, interceptsPods) && !excludesOffloaded(nsSelector)
}

// interceptsPods reports whether rule matches creating or updating pods.
func interceptsPods(rule admissionregistrationv1.RuleWithOperations) bool {
	ops := slices.ContainsFunc(rule.Operations, func(op admissionregistrationv1.OperationType) bool {
		return op == admissionregistrationv1.Create || op == admissionregistrationv1.Update || op == admissionregistrationv1.OperationAll
	})
	anyOf := func(values []string, want ...string) bool {
		return slices.ContainsFunc(values, func(v string) bool { return slices.Contains(want, v) })
	}
	return ops && anyOf(rule.APIGroups, "", "*") && anyOf(rule.APIVersions, "v1", "*") && anyOf(rule.Resources, "pods", "*", "*/*")
}

// excludesOffloaded reports whether a namespace selector rules out every
// offloaded namespace, through a requirement on offload.io/offloaded that
// the value true fails. Requirements on other labels are not weighed: any
// namespace may be offloaded.
func excludesOffloaded(sel *metav1.LabelSelector) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		// The API server would not have accepted it; assume the worst.
		return false
	}
	reqs, _ := s.Requirements()
	offloaded := labels.Set{offloadv1alpha1.LabelOffloaded: "true"}
	return slices.ContainsFunc(reqs, func(r labels.Requirement) bool {
		return r.Key() == offloadv1alpha1.LabelOffloaded && !r.Matches(offloaded)
	})
}
