package charts_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/charts"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/webhook"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// The scheduling policies are cluster-wide: the tests of this file set
// them up in turn, never in parallel.

func nodeReq(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func nodeTerm(reqs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: reqs}
}

func requiredNodes(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}}
}

var (
	onVirtual = nodeReq(offloadv1alpha1.LabelType, corev1.NodeSelectorOpIn, offloadv1alpha1.TypeVirtualNode)
	peerA     = nodeReq(offloadv1alpha1.LabelRemoteClusterID, corev1.NodeSelectorOpIn, "a")
	peerB     = nodeReq(offloadv1alpha1.LabelRemoteClusterID, corev1.NodeSelectorOpIn, "b")
	zoneX     = nodeReq("topology.kubernetes.io/zone", corev1.NodeSelectorOpIn, "x")
	gpu       = nodeReq("gpu", corev1.NodeSelectorOpExists)
)

// schedulingSelectors are the clusterSelectors of the NamespaceOffloadings
// the policy is compared with the webhook under (nil: none).
var schedulingSelectors = []struct {
	name  string
	terms []corev1.NodeSelectorTerm
}{
	{"no selector", nil},
	{"a selector of no terms", []corev1.NodeSelectorTerm{}},
	{"one peer", []corev1.NodeSelectorTerm{nodeTerm(peerA)}},
	{"two peers", []corev1.NodeSelectorTerm{nodeTerm(peerA), nodeTerm(peerB)}},
	{"only an empty term", []corev1.NodeSelectorTerm{{}}},
	{"an empty term and a peer in a zone", []corev1.NodeSelectorTerm{{}, nodeTerm(peerA, zoneX)}},
	{"a term that names the virtual nodes", []corev1.NodeSelectorTerm{nodeTerm(onVirtual, peerB)}},
	{"a term with matchFields", []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{nodeReq("metadata.name", corev1.NodeSelectorOpIn, "offload-a")}}}},
}

// schedulingPods are the pods the policy is compared with the webhook on.
var schedulingPods = []struct {
	name string
	edit func(*corev1.Pod)
}{
	{"asks for nothing", func(*corev1.Pod) {}},
	{"requires two terms and prefers a zone", func(p *corev1.Pod) {
		p.Spec.Affinity = requiredNodes(nodeTerm(zoneX), nodeTerm(gpu))
		p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.PreferredSchedulingTerm{{Weight: 10, Preference: nodeTerm(zoneX)}}
	}},
	{"requires a term that already names the virtual nodes", func(p *corev1.Pod) {
		p.Spec.Affinity = requiredNodes(nodeTerm(onVirtual), nodeTerm(peerA, onVirtual, gpu))
	}},
	{"requires an empty term and one with matchFields", func(p *corev1.Pod) {
		p.Spec.Affinity = requiredNodes(corev1.NodeSelectorTerm{}, corev1.NodeSelectorTerm{
			MatchFields: []corev1.NodeSelectorRequirement{nodeReq("metadata.name", corev1.NodeSelectorOpIn, "offload-a")},
		})
	}},
	{"has pod anti-affinity and no node affinity", func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 1, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: corev1.LabelHostname},
		}}}}
	}},
	{"tolerates the virtual-node taint by value", func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: offloadv1alpha1.TaintVirtualNode, Operator: corev1.TolerationOpEqual, Value: "true"}}
	}},
	{"tolerates every NoSchedule taint and the virtual-node taint by another value", func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{
			{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			{Key: offloadv1alpha1.TaintVirtualNode, Operator: corev1.TolerationOpEqual, Value: "false", Effect: corev1.TaintEffectNoExecute},
		}
	}},
	{"tolerates every taint", func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}},
	{"has its own unreachable tolerations, twice, and a NoSchedule one", func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{
			{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "x", Effect: corev1.TaintEffectNoSchedule},
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](10)},
			{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		}
	}},
	{"belongs to a DaemonSet", func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: "1", Controller: ptr.To(true)}}
	}},
	{"belongs to a ReplicaSet", func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "1", Controller: ptr.To(true)}}
	}},
	{"is bound to a node", func(p *corev1.Pod) { p.Spec.NodeName = "worker" }},
	{"is one of the agent's", func(p *corev1.Pod) { p.Labels = map[string]string{"app.kubernetes.io/part-of": "kubectl-offload"} }},
}

// TestTheSchedulingPolicyMutatesPodsAsTheWebhookDoes checks the
// MutatingAdmissionPolicy of webhook.mode=policy against the webhook's own
// Mutate: for every strategy, cluster selector and pod above, the API
// server (no agent runs here) creates the pod as Mutate changes it.
func TestTheSchedulingPolicyMutatesPodsAsTheWebhookDoes(t *testing.T) {
	for _, seconds := range []*int64{nil, ptr.To[int64](60)} {
		what := "unreachable tolerated for ever"
		if seconds != nil {
			what = fmt.Sprintf("unreachable tolerated for %ds", *seconds)
		}
		t.Run(what, func(t *testing.T) {
			kube, c := schedulingPolicies(t, seconds)
			plain := newNamespace(t, kube, nil)
			opts := webhook.Options{TolerationSeconds: seconds}
			for _, strategy := range []offloadv1alpha1.PodOffloadingStrategy{offloadv1alpha1.Local, offloadv1alpha1.Remote, offloadv1alpha1.LocalAndRemote} {
				for _, sel := range schedulingSelectors {
					no := &offloadv1alpha1.NamespaceOffloading{Spec: offloadv1alpha1.NamespaceOffloadingSpec{PodOffloadingStrategy: strategy}}
					if sel.terms != nil {
						no.Spec.ClusterSelector = &corev1.NodeSelector{NodeSelectorTerms: sel.terms}
					}
					t.Run(fmt.Sprintf("%s with %s", strategy, sel.name), func(t *testing.T) {
						ns := offloadedNamespace(t, kube, c, no, plain, opts)
						for i, p := range schedulingPods {
							pod := newPod(ns, fmt.Sprintf("pod-%d", i), nil)
							p.edit(pod)
							want := dryRunCreate(t, kube, plain, pod)
							webhookMutates(want, no, opts)
							got := dryRunCreate(t, kube, ns, pod)
							if !apiequality.Semantic.DeepEqual(got.Spec, want.Spec) {
								t.Errorf("a pod that %s:\ngot  tolerations %v\n     affinity %v\nwant tolerations %v\n     affinity %v",
									p.name, got.Spec.Tolerations, got.Spec.Affinity, want.Spec.Tolerations, want.Spec.Affinity)
							}
						}
					})
				}
			}
		})
	}
}

// expectClaimsOnlyWebhook checks that, with the policies, the webhook gets
// only the creation of pods that mount claims, which the policy leaves to
// it: a policy cannot read the claims.
func expectClaimsOnlyWebhook(t testing.TB, objs map[string]map[string]any) {
	t.Helper()
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	var policy admissionregistrationv1.MutatingAdmissionPolicy
	if err := fromRendered(objs, map[string]any{"MutatingWebhookConfiguration/offload-webhook": &cfg, "MutatingAdmissionPolicy/offload-scheduling": &policy}); err != nil {
		t.Fatal(err)
	}
	const mounts = `object.spec.?volumes.orValue([]).exists(v, has(v.persistentVolumeClaim))`
	w := cfg.Webhooks[0]
	if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) ||
		len(w.MatchConditions) != 1 || w.MatchConditions[0].Expression != mounts {
		t.Errorf("webhook rules %+v, match conditions %+v; want pod creations that mount a claim only", w.Rules, w.MatchConditions)
	}
	if !slices.ContainsFunc(policy.Spec.MatchConditions, func(c admissionregistrationv1.MatchCondition) bool { return c.Expression == "!"+mounts }) {
		t.Errorf("policy match conditions %+v; want the pods that mount no claim only", policy.Spec.MatchConditions)
	}
}

func TestTheSchedulingPolicyLeavesPodsThatMountClaimsToTheWebhook(t *testing.T) {
	kube, c := schedulingPolicies(t, nil)
	no := &offloadv1alpha1.NamespaceOffloading{Spec: offloadv1alpha1.NamespaceOffloadingSpec{PodOffloadingStrategy: offloadv1alpha1.Remote}}
	ns := offloadedNamespace(t, kube, c, no, newNamespace(t, kube, nil), webhook.Options{})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "with-claim", Namespace: ns}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", Image: "app"}},
		Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
	}}
	created, err := kube.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	if created.Spec.Affinity != nil || slices.ContainsFunc(created.Spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == offloadv1alpha1.TaintVirtualNode }) {
		t.Errorf("the policy mutated a pod that mounts a claim: affinity %+v, tolerations %+v", created.Spec.Affinity, created.Spec.Tolerations)
	}
}

// TestTheSchedulingPolicyLeavesPodsOfNamespacesNoLongerOffloaded checks
// that the policy mutates nothing where the namespace has no
// NamespaceOffloading, or one being deleted.
func TestTheSchedulingPolicyLeavesPodsOfNamespacesNoLongerOffloaded(t *testing.T) {
	kube, c := schedulingPolicies(t, nil)
	plain := newNamespace(t, kube, nil)
	no := &offloadv1alpha1.NamespaceOffloading{Spec: offloadv1alpha1.NamespaceOffloadingSpec{PodOffloadingStrategy: offloadv1alpha1.Remote}}
	ns := offloadedNamespace(t, kube, c, no, plain, webhook.Options{})
	pod := newPod(ns, "web", nil)
	unchanged := func(ctx context.Context) bool {
		got, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && apiequality.Semantic.DeepEqual(got.Spec, dryRunCreate(t, kube, plain, pod).Spec)
	}

	// Held by a finalizer, the NamespaceOffloading is being deleted.
	key := client.ObjectKey{Namespace: ns, Name: offloadv1alpha1.NamespaceOffloadingName}
	if err := c.Get(t.Context(), key, no); err != nil {
		t.Fatal(err)
	}
	no.Finalizers = []string{"test.offload.io/hold"}
	if err := c.Update(t.Context(), no); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(t.Context(), no); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "a pod of a namespace whose NamespaceOffloading is being deleted is still mutated", unchanged)

	if err := c.Get(t.Context(), key, no); err != nil {
		t.Fatal(err)
	}
	no.Finalizers = nil
	if err := c.Update(t.Context(), no); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "a pod of a namespace without NamespaceOffloading is mutated", unchanged)
}

// TestTheSchedulingPolicyKeepsTheOffloadingTolerationsThroughUpdates
// checks the UPDATE policy against the webhook's KeepTolerations: an
// update written from the user's manifest, without the tolerations the
// creation added, is admitted and keeps them.
func TestTheSchedulingPolicyKeepsTheOffloadingTolerationsThroughUpdates(t *testing.T) {
	kube, c := schedulingPolicies(t, nil)
	no := &offloadv1alpha1.NamespaceOffloading{Spec: offloadv1alpha1.NamespaceOffloadingSpec{PodOffloadingStrategy: offloadv1alpha1.Remote}}
	ns := offloadedNamespace(t, kube, c, no, newNamespace(t, kube, nil), webhook.Options{})
	manifest := newPod(ns, "web", func(s *corev1.PodSpec) {
		s.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	})
	created := mustCreate(t, kube, manifest)
	if len(created.Spec.Tolerations) != 4 {
		t.Fatalf("the pod was created with tolerations %v, want its own and the three offloading ones", created.Spec.Tolerations)
	}

	update := created.DeepCopy()
	update.Spec.Tolerations = manifest.Spec.Tolerations
	update.Labels = map[string]string{"version": "2"}
	// offloadedNamespace waited for the creation policy only; the API
	// server loads the update policy on its own, a moment after it is
	// written. A dry run polls for it: one that never admits the update
	// fails here, with the last refusal.
	if _, err := framework.Poll(t.Context(), 100*time.Millisecond, 30*time.Second, func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Pods(ns).Update(ctx, update, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, fmt.Sprint(err)
	}); err != nil {
		t.Fatalf("an update without the offloading tolerations was refused: %v", err)
	}
	updated, err := kube.CoreV1().Pods(ns).Update(t.Context(), update, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("an update without the offloading tolerations was refused: %v", err)
	}
	// (The DefaultTolerationSeconds admission adds its tolerations to the
	// update before the policy, as before the webhook: the pod keeps
	// every toleration it had, which is what the API server requires.)
	for _, tol := range created.Spec.Tolerations {
		if !slices.ContainsFunc(updated.Spec.Tolerations, func(have corev1.Toleration) bool { return apiequality.Semantic.DeepEqual(have, tol) }) {
			t.Errorf("after the update the pod tolerates %v, without %v", updated.Spec.Tolerations, tol)
		}
	}
	if updated.Labels["version"] != "2" {
		t.Errorf("the update was not applied: labels %v", updated.Labels)
	}
}

// schedulingPolicies creates the chart's scheduling policies and their
// bindings, rendered with webhook.mode=policy and the toleration seconds,
// in place of any a test before created, and removes them at the end.
// They fail closed here, unlike in the chart, so that an expression the
// API server cannot evaluate fails the test instead of leaving a pod as
// it is.
func schedulingPolicies(t testing.TB, seconds *int64) (kubernetes.Interface, client.Client) {
	t.Helper()
	cfg := envtest.APIServer(t)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	envtest.InstallCRDs(t, c)
	vals := map[string]any{"clusterName": "test", "webhook": map[string]any{"mode": "policy"}}
	if seconds != nil {
		vals["webhook"].(map[string]any)["unreachableTolerationSeconds"] = *seconds
	}
	objs := charts.Render(t, vals)
	expectClaimsOnlyWebhook(t, objs)
	api := kube.AdmissionregistrationV1()
	for _, name := range []string{"offload-scheduling", "offload-keep-tolerations"} {
		var policy admissionregistrationv1.MutatingAdmissionPolicy
		var binding admissionregistrationv1.MutatingAdmissionPolicyBinding
		if err := fromRendered(objs, map[string]any{
			"MutatingAdmissionPolicy/" + name:        &policy,
			"MutatingAdmissionPolicyBinding/" + name: &binding,
		}); err != nil {
			t.Fatal(err)
		}
		policy.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
		remove := func() {
			ctx := context.Background()
			_ = api.MutatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
			_ = api.MutatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
		}
		remove()
		t.Cleanup(remove)
		if _, err := api.MutatingAdmissionPolicies().Create(t.Context(), &policy, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the policy %s: %v", name, err)
		}
		if _, err := api.MutatingAdmissionPolicyBindings().Create(t.Context(), &binding, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the binding %s: %v", name, err)
		}
	}
	return kube, c
}

// offloadedNamespace creates a namespace labelled offloaded with no as its
// NamespaceOffloading, and waits until the policy mutates its pods as the
// webhook would with opts (a pod in namespace plain shows them before).
func offloadedNamespace(t testing.TB, kube kubernetes.Interface, c client.Client, no *offloadv1alpha1.NamespaceOffloading, plain string, opts webhook.Options) string {
	t.Helper()
	ns := newNamespace(t, kube, map[string]string{offloadv1alpha1.LabelOffloaded: "true"})
	no.Name, no.Namespace = offloadv1alpha1.NamespaceOffloadingName, ns
	if err := c.Create(t.Context(), no); err != nil {
		t.Fatal(err)
	}
	// The API server sees a new NamespaceOffloading, and new policies, a
	// moment after they are written.
	probe := newPod(ns, "probe", nil)
	framework.Eventually(t, 30*time.Second, "the scheduling policy does not mutate the pods of namespace "+ns+" as the webhook does", func(ctx context.Context) bool {
		got, err := kube.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false
		}
		want, err := kube.CoreV1().Pods(plain).Create(ctx, newPod(plain, "probe", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false
		}
		webhook.Mutate(want, no, opts)
		return apiequality.Semantic.DeepEqual(got.Spec, want.Spec)
	})
	return ns
}

// dryRunCreate creates a copy of pod in namespace ns with a dry run, and
// returns the pod as the API server would store it.
func dryRunCreate(t *testing.T, kube kubernetes.Interface, ns string, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	p := pod.DeepCopy()
	p.Namespace = ns
	got, err := kube.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsInternalError(err) {
			t.Fatalf("creating pod %s in %s: %v", pod.Name, ns, err)
		}
		t.Fatal(err)
	}
	return got
}

// webhookMutates changes pod as the webhook would: Mutate, for the pods
// its configuration's objectSelector sends it.
func webhookMutates(pod *corev1.Pod, no *offloadv1alpha1.NamespaceOffloading, opts webhook.Options) {
	if pod.Labels["app.kubernetes.io/part-of"] == "kubectl-offload" {
		return
	}
	webhook.Mutate(pod, no, opts)
}
