package charts_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/charts"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// placementHint is what every refusal tells the consumer to ask for.
const placementHint = "kubectl offload peer generate --allow-node-placement"

// attacks are pods that pick the provider's nodes: each is refused in a
// tenant namespace, and admitted where node placement is allowed or the
// namespace is no tenant's. inMessage is what the refusal must name.
var attacks = []struct {
	name      string
	spec      func(*corev1.PodSpec)
	inMessage string
}{
	{"tolerates every taint", func(s *corev1.PodSpec) {
		s.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}, "tolerate every taint:"},
	{"tolerates every NoExecute taint", func(s *corev1.PodSpec) {
		s.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
	}, "tolerate every NoExecute taint:"},
	{"tolerates the control-plane taint", func(s *corev1.PodSpec) {
		s.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	}, "node-role.kubernetes.io/control-plane"},
	{"tolerates the not-ready taint with effect NoSchedule", func(s *corev1.PodSpec) {
		s.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	}, corev1.TaintNodeNotReady + ":NoSchedule"},
	{"tolerates the unreachable taint with every effect", func(s *corev1.PodSpec) {
		s.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists}}
	}, corev1.TaintNodeUnreachable + " with every effect"},
	{"sets a nodeName", func(s *corev1.PodSpec) {
		s.NodeName = "provider-node-1"
	}, "spec.nodeName provider-node-1"},
	{"selects a node by kubernetes.io/hostname", func(s *corev1.PodSpec) {
		s.NodeSelector = map[string]string{"kubernetes.io/os": "linux", corev1.LabelHostname: "provider-node-1"}
	}, "spec.nodeSelector selects nodes by " + corev1.LabelHostname + ":"},
	{"requires node affinity on a custom key", func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "example.com/pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu"}},
			}}},
		}}}
	}, "by example.com/pool:"},
	{"prefers nodes by kubernetes.io/hostname", func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"provider-node-1"}},
			}},
		}}}}
	}, "by " + corev1.LabelHostname + ":"},
	{"requires a node by matchFields", func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
				{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"provider-node-1"}},
			}}},
		}}}
	}, "matchFields"},
	{"has pod affinity with a namespaceSelector", func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			NamespaceSelector: &metav1.LabelSelector{},
			TopologyKey:       corev1.LabelHostname,
		}}}}
	}, "namespaceSelector"},
	{"has pod anti-affinity naming kube-system", func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"component": "kube-apiserver"}},
				Namespaces:    []string{metav1.NamespaceSystem},
				TopologyKey:   corev1.LabelHostname,
			},
		}}}}
	}, "naming namespace kube-system:"},
	{"requires pod anti-affinity with its own pods", func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			TopologyKey:   corev1.LabelHostname,
		}}}}
	}, "required pod affinity or anti-affinity"},
	{"spreads over nodes with DoNotSchedule", func(s *corev1.PodSpec) {
		s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		}}
	}, "whenUnsatisfiable DoNotSchedule"},
}

// ordinary are pods that keep to the rules: admitted in a tenant namespace.
// spec is given the pod's namespace too.
var ordinary = []struct {
	name string
	spec func(s *corev1.PodSpec, ns string)
}{
	{"asks for nothing", func(*corev1.PodSpec, string) {}},
	{"selects nodes by kubernetes.io/os=linux", func(s *corev1.PodSpec, _ string) {
		s.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
	}},
	{"selects and prefers nodes by every placement label", func(s *corev1.PodSpec, _ string) {
		s.NodeSelector = map[string]string{}
		var exprs []corev1.NodeSelectorRequirement
		for _, l := range offloadv1alpha1.PlacementLabels {
			s.NodeSelector[l] = "x"
			exprs = append(exprs, corev1.NodeSelectorRequirement{Key: l, Operator: corev1.NodeSelectorOpExists})
		}
		term := corev1.NodeSelectorTerm{MatchExpressions: exprs}
		s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution:  &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}},
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: term}},
		}}
	}},
	{"tolerates the not-ready and unreachable NoExecute taints", func(s *corev1.PodSpec, _ string) {
		s.Tolerations = []corev1.Toleration{
			{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](60)},
		}
	}},
	{"prefers pod affinity and anti-affinity naming its own namespace or none", func(s *corev1.PodSpec, ns string) {
		term := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, TopologyKey: corev1.LabelHostname}
		own := term
		own.Namespaces = []string{ns}
		s.Affinity = &corev1.Affinity{
			PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 1, PodAffinityTerm: own}}},
			PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
				{Weight: 100, PodAffinityTerm: term}, {Weight: 100, PodAffinityTerm: own}}},
		}
	}},
	{"spreads over nodes as a preference", func(s *corev1.PodSpec, _ string) {
		s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		}}
	}},
}

func TestTheTenantPodPolicyRefusesNodePlacement(t *testing.T) {
	kube := enforcedPolicy(t, offloadv1alpha1.PodPolicyName)
	tenant := tenantNamespace(t, kube, nil)
	allowed := tenantNamespace(t, kube, map[string]string{offloadv1alpha1.LabelNodePlacement: offloadv1alpha1.NodePlacementAllowed})
	plain := newNamespace(t, kube, nil)

	for i, tc := range attacks {
		t.Run("in a tenant namespace, a pod that "+tc.name+" is refused", func(t *testing.T) {
			pod := newPod(tenant, fmt.Sprintf("attack-%d", i), tc.spec)
			_, err := kube.CoreV1().Pods(tenant).Create(t.Context(), pod, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) {
				t.Fatalf("creating the pod: got %v, want it forbidden", err)
			}
			for _, want := range []string{tc.inMessage, placementHint} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal %q does not say %q", err, want)
				}
			}
			if _, err := kube.CoreV1().Pods(tenant).Get(t.Context(), pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the refused pod exists (get: %v)", err)
			}
		})
	}
	t.Run("in a tenant namespace, a pod is admitted with the tolerations the provider's admission adds", func(t *testing.T) {
		pod := mustCreate(t, kube, newPod(tenant, "defaults", nil))
		for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
			if !slices.ContainsFunc(pod.Spec.Tolerations, func(tol corev1.Toleration) bool {
				return tol.Key == key && tol.Effect == corev1.TaintEffectNoExecute && tol.TolerationSeconds != nil
			}) {
				t.Errorf("the pod has tolerations %v, want DefaultTolerationSeconds' for %s", pod.Spec.Tolerations, key)
			}
		}
	})
	for i, tc := range ordinary {
		t.Run("in a tenant namespace, a pod that "+tc.name+" is admitted", func(t *testing.T) {
			mustCreate(t, kube, newPod(tenant, fmt.Sprintf("ordinary-%d", i), func(s *corev1.PodSpec) { tc.spec(s, tenant) }))
		})
	}
	for _, ns := range []struct{ what, name string }{
		{"where node placement is allowed", allowed},
		{"of no tenant", plain},
	} {
		for i, tc := range attacks {
			t.Run("in a namespace "+ns.what+", a pod that "+tc.name+" is admitted", func(t *testing.T) {
				mustCreate(t, kube, newPod(ns.name, fmt.Sprintf("attack-%d", i), tc.spec))
			})
		}
	}
}

func TestTheTenantPodPolicyRefusesUpdatesThatPlacePods(t *testing.T) {
	kube := enforcedPolicy(t, offloadv1alpha1.PodPolicyName)
	tenant := tenantNamespace(t, kube, nil)
	gate := []corev1.PodSchedulingGate{{Name: "example.com/gate"}}
	for i, tc := range []struct {
		name    string
		gated   bool // a gated pod's node selector and affinity may change
		update  func(*corev1.Pod)
		refused bool
	}{
		{"adding a toleration of every taint to a pod is refused", false, func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
		}, true},
		{"adding a toleration of the not-ready NoExecute taint to a pod is admitted", false, func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
		}, false},
		{"relabelling a pod is admitted", false, func(p *corev1.Pod) {
			p.Labels = map[string]string{"tier": "front"}
		}, false},
		{"selecting nodes by kubernetes.io/hostname for a gated pod is refused", true, func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "provider-node-1"}
		}, true},
		{"requiring node affinity on a custom key for a gated pod is refused", true, func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "example.com/pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu"}},
				}}},
			}}}
		}, true},
		{"selecting nodes by kubernetes.io/os for a gated pod is admitted", true, func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
		}, false},
	} {
		t.Run("in a tenant namespace, "+tc.name, func(t *testing.T) {
			pod := newPod(tenant, fmt.Sprintf("update-%d", i), nil)
			if tc.gated {
				pod.Spec.SchedulingGates = gate
			}
			pod = mustCreate(t, kube, pod)
			tc.update(pod)
			_, err := kube.CoreV1().Pods(tenant).Update(t.Context(), pod, metav1.UpdateOptions{})
			switch {
			case tc.refused && !apierrors.IsForbidden(err):
				t.Fatalf("updating the pod: got %v, want it forbidden", err)
			case !tc.refused && err != nil:
				t.Fatalf("updating the pod: %v", err)
			}
			if !tc.refused {
				return
			}
			got, err := kube.CoreV1().Pods(tenant).Get(t.Context(), pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.ResourceVersion != pod.ResourceVersion {
				t.Errorf("the pod changed (resourceVersion %s, was %s) in a refused update", got.ResourceVersion, pod.ResourceVersion)
			}
		})
	}
}

// When a provider takes back a consumer's node placement, the pods it
// admitted before keep running and can still be updated (labels,
// finalizers): the policy refuses only updates that change a field it
// governs.
func TestTheTenantPodPolicyKeepsPodsAdmittedBeforeTheExemptionWent(t *testing.T) {
	kube := enforcedPolicy(t, offloadv1alpha1.PodPolicyName)
	ns := tenantNamespace(t, kube, map[string]string{offloadv1alpha1.LabelNodePlacement: offloadv1alpha1.NodePlacementAllowed})
	pods := make([]*corev1.Pod, len(attacks))
	for i, tc := range attacks {
		pods[i] = mustCreate(t, kube, newPod(ns, fmt.Sprintf("attack-%d", i), tc.spec))
	}
	namespace, err := kube.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(namespace.Labels, offloadv1alpha1.LabelNodePlacement)
	if _, err := kube.CoreV1().Namespaces().Update(t.Context(), namespace, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntilRefused(t, kube, ns)

	for i, tc := range attacks {
		t.Run("a pod that "+tc.name+" can be relabelled", func(t *testing.T) {
			pod := pods[i].DeepCopy()
			pod.Labels = map[string]string{"tier": "front"}
			if _, err := kube.CoreV1().Pods(ns).Update(t.Context(), pod, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("relabelling the pod: %v", err)
			}
		})
	}
	t.Run("a pod that tolerates every taint cannot have its tolerations changed", func(t *testing.T) {
		pod, err := kube.CoreV1().Pods(ns).Get(t.Context(), pods[0].Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
		if _, err := kube.CoreV1().Pods(ns).Update(t.Context(), pod, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("adding a toleration: got %v, want it forbidden", err)
		}
	})
}

// applied holds, per policy name, the one attempt of this test process to
// apply that policy (a sync.OnceValue).
var applied sync.Map

// enforcedPolicy applies the chart's ValidatingAdmissionPolicy name and its
// binding of the same name, as rendered, to the test API server, once per
// test process, and checks that every expression type-checks without a
// warning.
func enforcedPolicy(t *testing.T, name string) kubernetes.Interface {
	t.Helper()
	kube, err := kubernetes.NewForConfig(envtest.APIServer(t))
	if err != nil {
		t.Fatal(err)
	}
	apply, _ := applied.LoadOrStore(name, sync.OnceValue(func() error { return applyPolicy(t, kube, name) }))
	if err := apply.(func() error)(); err != nil {
		t.Fatal(err)
	}
	return kube
}

func applyPolicy(t *testing.T, kube kubernetes.Interface, name string) error {
	objs := charts.Render(t, map[string]any{"clusterName": "test"})
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	if err := fromRendered(objs, map[string]any{
		"ValidatingAdmissionPolicy/" + name:        &policy,
		"ValidatingAdmissionPolicyBinding/" + name: &binding,
	}); err != nil {
		return err
	}
	ctx := t.Context()
	created, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &policy, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating the policy %s: %w", name, err)
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the binding %s: %w", name, err)
	}
	return typeCheck(kube, created)
}

// fromRendered converts the rendered objects named by the keys of into
// ("Kind/name") into the typed objects they point to, refusing unknown fields.
func fromRendered(objs map[string]map[string]any, into map[string]any) error {
	for obj, typed := range into {
		if objs[obj] == nil {
			return fmt.Errorf("the chart renders no %s", obj)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(objs[obj], typed, true); err != nil {
			return fmt.Errorf("reading the rendered %s: %w", obj, err)
		}
	}
	return nil
}

// typeCheck type-checks every expression of policy against the schemas of
// the API server kube talks to, and fails on any warning.
// kube-controller-manager writes the API server's type checking into the
// policy's status; the test API server runs without one, so the test
// type-checks the policy the same way.
func typeCheck(kube kubernetes.Interface, policy *admissionregistrationv1.ValidatingAdmissionPolicy) error {
	discovery := kube.Discovery()
	checker := validating.TypeChecker{
		SchemaResolver: &resolver.ClientDiscoveryResolver{Discovery: discovery},
		RestMapper:     restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery)),
	}
	var warnings []string
	for _, w := range checker.Check(policy) {
		warnings = append(warnings, fmt.Sprintf("%s: %s", w.FieldRef, w.Warning))
	}
	if len(warnings) > 0 {
		return fmt.Errorf("type checking the policy %s:\n%s", policy.Name, strings.Join(warnings, "\n"))
	}
	return nil
}

// tenantNamespace creates a namespace labelled as a tenant's and with extra
// labels; without extra labels, it waits until the policy is enforced there.
func tenantNamespace(t *testing.T, kube kubernetes.Interface, extra map[string]string) string {
	t.Helper()
	labels := map[string]string{offloadv1alpha1.LabelTenant: "x"}
	for k, v := range extra {
		labels[k] = v
	}
	ns := newNamespace(t, kube, labels)
	if extra == nil {
		waitUntilRefused(t, kube, ns)
	}
	return ns
}

// waitUntilRefused waits until a pod that tolerates every taint is refused
// in namespace ns: a new policy, or a namespace's new labels, reach the API
// server's admission a moment after they are written.
func waitUntilRefused(t *testing.T, kube kubernetes.Interface, ns string) {
	t.Helper()
	probe := newPod(ns, "probe", func(s *corev1.PodSpec) {
		s.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	})
	framework.Eventually(t, 30*time.Second, "the policy is not enforced in namespace "+ns, func(ctx context.Context) bool {
		_, err := kube.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err)
	})
}

func newNamespace(t testing.TB, kube kubernetes.Interface, labels map[string]string) string {
	t.Helper()
	ns, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "pods-", Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// newPod is a pod in ns whose spec is changed by spec, if not nil.
func newPod(ns, name string, spec func(*corev1.PodSpec)) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	if spec != nil {
		spec(&pod.Spec)
	}
	return pod
}

func mustCreate(t *testing.T, kube kubernetes.Interface, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := kube.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the pod: %v", err)
	}
	return created
}
