package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

const (
	// e2eRunLabel is on every namespace the e2e framework creates.
	e2eRunLabel = "e2e-run"
	// gateLabel marks an e2e namespace whose offloading is in place: the
	// scheduling webhook selects it and its twin namespace is Ready.
	gateLabel = "conformance.kubectl-offload.dev/offloaded"
	// gatePolicy names the admission policy, and its binding, that holds
	// the e2e namespaces' default ServiceAccount back.
	gatePolicy = "conformance-offload-before-service-account"
	// podPolicy names the admission policy, and its binding, that keeps
	// test pods off the nodes other than the virtual node.
	podPolicy = "conformance-pods-on-the-virtual-node"

	// offloadTimeout bounds the offloading of one namespace.
	offloadTimeout = 2 * time.Minute
)

// installGate makes every e2e namespace wait for its offloading: an
// admission policy refuses the namespace's default ServiceAccount until
// the gate label is on the namespace. The e2e framework waits for that
// ServiceAccount before a test creates anything (and pods need it), so no
// test pod can be created before the scheduling webhook sends the
// namespace's pods to the virtual node. kube-controller-manager retries
// the ServiceAccount, at once when the namespace changes. A second policy
// refuses test pods that name a node other than a virtual node.
func installGate(ctx context.Context, kube kubernetes.Interface) error {
	api := kube.AdmissionregistrationV1()
	for _, p := range []struct {
		name, resource, expression, message string
	}{{
		name: gatePolicy, resource: "serviceaccounts",
		expression: fmt.Sprintf("object.metadata.name != 'default' || (has(namespaceObject.metadata.labels) && '%s' in namespaceObject.metadata.labels)", gateLabel),
		message:    "the namespace is not offloaded yet (make conformance offloads every e2e namespace first)",
	}, {
		// A pod created with spec.nodeName skips the scheduler, and the
		// scheduling webhook leaves it alone: one naming a node other than
		// the virtual node would run outside the offloading, so it is
		// refused, and its test fails saying why.
		name: podPolicy, resource: "pods",
		expression: fmt.Sprintf("!has(object.spec.nodeName) || object.spec.nodeName == '' || object.spec.nodeName.startsWith('%s')", offloadv1alpha1.VirtualNodeName("")),
		message:    "make conformance runs every test pod on the virtual node; this pod names another node",
	}} {
		policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: p.name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: ptr.To(admissionregistrationv1.Fail),
				MatchConstraints: &admissionregistrationv1.MatchResources{
					NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: e2eRunLabel, Operator: metav1.LabelSelectorOpExists},
					}},
					ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
						RuleWithOperations: admissionregistrationv1.RuleWithOperations{
							Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
							Rule: admissionregistrationv1.Rule{
								APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{p.resource},
							},
						},
					}},
				},
				Validations: []admissionregistrationv1.Validation{{Expression: p.expression, Message: p.message}},
			},
		}
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: p.name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        p.name,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		}
		if _, err := api.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating admission policy %s: %w", p.name, err)
		}
		if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating admission policy binding %s: %w", p.name, err)
		}
	}
	return nil
}

// gate offloads every e2e namespace with strategy Remote as it appears,
// through the plugin as a user would, then opens its gate.
type gate struct {
	kube kubernetes.Interface
	// offload runs the plugin with these arguments before its own.
	offload []string
	log     io.Writer

	mu      sync.Mutex
	seen    map[string]bool
	failed  map[string]error
	pending sync.WaitGroup
}

// run watches the e2e namespaces until ctx ends, offloading each new one
// in a goroutine of its own.
func (g *gate) run(ctx context.Context) error {
	g.seen, g.failed = map[string]bool{}, map[string]error{}
	defer g.pending.Wait()
	opts := metav1.ListOptions{LabelSelector: e2eRunLabel}
	for ctx.Err() == nil {
		list, err := g.kube.CoreV1().Namespaces().List(ctx, opts)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("listing e2e namespaces: %w", err)
		}
		for i := range list.Items {
			g.admit(ctx, &list.Items[i])
		}
		w, err := g.kube.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{LabelSelector: e2eRunLabel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("watching e2e namespaces: %w", err)
		}
		for ev := range w.ResultChan() {
			if ns, ok := ev.Object.(*corev1.Namespace); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				g.admit(ctx, ns)
			}
		}
		w.Stop()
	}
	return nil
}

// admit starts offloading ns unless it was seen before or is going away.
func (g *gate) admit(ctx context.Context, ns *corev1.Namespace) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.seen[ns.Name] || ns.DeletionTimestamp != nil || ns.Labels[gateLabel] != "" {
		return
	}
	g.seen[ns.Name] = true
	g.pending.Add(1)
	go func() {
		defer g.pending.Done()
		start := time.Now()
		err := g.offloadNamespace(ctx, ns.Name)
		g.mu.Lock()
		defer g.mu.Unlock()
		if err != nil {
			g.failed[ns.Name] = err
			fmt.Fprintf(g.log, "%s ✗ namespace %s: %v\n", time.Now().Format(time.TimeOnly), ns.Name, err)
			return
		}
		fmt.Fprintf(g.log, "%s ✓ namespace %s offloaded (%s)\n", time.Now().Format(time.TimeOnly), ns.Name, time.Since(start).Round(time.Millisecond))
	}()
}

// offloadNamespace runs kubectl offload namespace NS --pod-offloading-strategy
// Remote --wait, waits until the agent has labelled the namespace for the
// scheduling webhook, then opens the gate.
func (g *gate) offloadNamespace(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, offloadTimeout)
	defer cancel()
	args := append(append([]string{}, g.offload[1:]...), "namespace", name,
		"--pod-offloading-strategy", string(offloadv1alpha1.Remote), "--wait", "--timeout", offloadTimeout.String())
	if out, err := exec.CommandContext(ctx, g.offload[0], args...).CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl offload namespace %s: %w\n%s", name, err, out)
	}
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ns, err := g.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return ns.Labels[offloadv1alpha1.LabelOffloaded] == "true", nil
	})
	if err != nil {
		return fmt.Errorf("waiting for label %s on namespace %s: %w", offloadv1alpha1.LabelOffloaded, name, err)
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"true"}}}`, gateLabel)
	if _, err := g.kube.CoreV1().Namespaces().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("opening the gate of namespace %s: %w", name, err)
	}
	return nil
}

// summary returns how many namespaces the gate offloaded and the failures.
func (g *gate) summary() (offloaded int, failures error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	for _, err := range g.failed {
		errs = append(errs, err)
	}
	return len(g.seen) - len(g.failed), errors.Join(errs...)
}
