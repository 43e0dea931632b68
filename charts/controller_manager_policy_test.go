package charts_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

const controllerManagerPolicyName = "offload-controller-manager-scope"

// controllerManagerScope applies the chart's ClusterRole of the
// controller-manager and controllerManagerPolicyName, rendered for a new release
// namespace, and returns a client acting as the controller-manager's
// ServiceAccount there, once both are enforced.
func controllerManagerScope(t *testing.T, admin kubernetes.Interface) kubernetes.Interface {
	return controllerManagerUnder(t, admin, controllerManagerPolicyName, func(ctx context.Context, agent kubernetes.Interface) error {
		_, err := agent.CoreV1().Nodes().Create(ctx, node("probe", false), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}

// controllerManagerUnder is controllerManagerScope for the chart's policy
// policyName; probe is a request that policy refuses, to know when it is
// enforced.
func controllerManagerUnder(t *testing.T, admin kubernetes.Interface, policyName string, probe func(context.Context, kubernetes.Interface) error) kubernetes.Interface {
	t.Helper()
	ctx := t.Context()
	ns, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "release-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := renderIn(ns.Name, map[string]any{"clusterName": "test"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		policy  admissionregistrationv1.ValidatingAdmissionPolicy
		binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
		role    rbacv1.ClusterRole
		bound   rbacv1.ClusterRoleBinding
		local   rbacv1.Role
		localRB rbacv1.RoleBinding
	)
	if err := fromRendered(objs, map[string]any{
		"ValidatingAdmissionPolicy/" + policyName:        &policy,
		"ValidatingAdmissionPolicyBinding/" + policyName: &binding,
		"ClusterRole/offload-controller-manager":         &role,
		"ClusterRoleBinding/offload-controller-manager":  &bound,
		"Role/offload-controller-manager":                &local,
		"RoleBinding/offload-controller-manager":         &localRB,
	}); err != nil {
		t.Fatal(err)
	}
	// Names unique to this test, since the API server is shared.
	suffix := "-" + ns.Name
	policy.Name += suffix
	binding.Name += suffix
	binding.Spec.PolicyName = policy.Name
	role.Name += suffix
	bound.Name += suffix
	bound.RoleRef.Name = role.Name
	created, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &policy, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := typeCheck(admin, created); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &bound, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles(ns.Name).Create(ctx, &local, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns.Name).Create(ctx, &localRB, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(envtest.APIServer(t))
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns.Name + ":" + offloadv1alpha1.ControllerManager,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns.Name, "system:authenticated"},
	}
	agent, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Admission runs after authorization: the probe is refused by the
	// policy once both are in force.
	framework.Eventually(t, 30*time.Second, "the policy and RBAC are not enforced", func(ctx context.Context) bool {
		err := probe(ctx, agent)
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), policyName)
	})
	return agent
}

// agentRelease returns the release namespace of the controller-manager's
// identity that agent acts as: the namespace its ServiceAccount lives in.
func agentRelease(ctx context.Context, agent kubernetes.Interface) (string, error) {
	review, err := agent.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return strings.Split(review.Status.UserInfo.Username, ":")[2], nil
}

func node(name string, virtual bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if virtual {
		n.Labels = map[string]string{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode}
	}
	return n
}

func TestTheControllerManagerWritesOnlyItsVirtualNodesTheirPodsAndTwinNamespaces(t *testing.T) {
	admin, err := kubernetes.NewForConfig(envtest.APIServer(t))
	if err != nil {
		t.Fatal(err)
	}
	agent := controllerManagerScope(t, admin)
	ctx := t.Context()
	id := rand.String(5)
	real, virtual := "real-"+id, offloadv1alpha1.VirtualNodeName("peer-"+id)
	for _, n := range []*corev1.Node{node(real, false), node(virtual, true)} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	}
	ns := newNamespace(t, admin, nil)
	pod := func(name, nodeName string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: nodeName,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		p, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	onReal, onVirtual := pod("on-real", real), pod("on-virtual", virtual)
	twin := newNamespace(t, admin, map[string]string{offloadv1alpha1.LabelOriginClusterID: "c"})
	quota := func() *corev1.ResourceQuota {
		return &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}}}
	}
	policy := func() *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	}
	dryCreate := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	dry := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	volume := func(name string, source corev1.PersistentVolumeSource) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + id}, Spec: corev1.PersistentVolumeSpec{
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: source, StorageClassName: offloadv1alpha1.StorageClassName}}
	}
	offloadVolume := volume("offload", corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: offloadv1alpha1.StorageDriver, VolumeHandle: "p/ns/data/uid"}})
	hostVolume := volume("host", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}})
	for _, pv := range []*corev1.PersistentVolume{offloadVolume, hostVolume} {
		if _, err := admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
		})
	}
	claim := func(name, class string) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		c, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	theirClaim, ourClaim := claim("theirs", "standard"), claim("ours", offloadv1alpha1.StorageClassName)
	annotate := []byte(`{"metadata":{"annotations":{"volume.kubernetes.io/selected-node":null}}}`)
	dryPatch := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	statusPatch := []byte(`{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`)
	untaint := []byte(`{"spec":{"taints":[]}}`)

	refused := []struct {
		name string
		do   func() error
		want string // in the message: the policy's name, or RBAC's "cannot"
	}{
		{"creating a node that is not virtual", func() error {
			_, err := agent.CoreV1().Nodes().Create(ctx, node("rogue-"+id, false), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, controllerManagerPolicyName},
		{"deleting a real node", func() error { return agent.CoreV1().Nodes().Delete(ctx, real, dry) }, controllerManagerPolicyName},
		{"patching a real node's status", func() error {
			_, err := agent.CoreV1().Nodes().Patch(ctx, real, types.StrategicMergePatchType, statusPatch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
			return err
		}, controllerManagerPolicyName},
		{"relabelling a real node", func() error {
			_, err := agent.CoreV1().Nodes().Patch(ctx, real, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}, controllerManagerPolicyName},
		{"tainting a real node", func() error {
			_, err := agent.CoreV1().Nodes().Patch(ctx, real, types.MergePatchType, untaint, dryPatch)
			return err
		}, controllerManagerPolicyName},
		{"making its virtual node a real one", func() error {
			_, err := agent.CoreV1().Nodes().Patch(ctx, virtual, types.MergePatchType, []byte(`{"metadata":{"labels":{"offload.io/type":null}}}`), dryPatch)
			return err
		}, controllerManagerPolicyName},
		{"creating a pod", func() error {
			_, err := agent.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: onVirtual.Spec}, metav1.CreateOptions{})
			return err
		}, "cannot create resource \"pods\""},
		{"changing a pod", func() error {
			_, err := agent.CoreV1().Pods(ns).Patch(ctx, onVirtual.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}, "cannot patch resource \"pods\""},
		{"deleting a pod of a real node", func() error { return agent.CoreV1().Pods(ns).Delete(ctx, onReal.Name, dry) }, controllerManagerPolicyName},
		{"a quota outside twin namespaces", func() error {
			_, err := agent.CoreV1().ResourceQuotas(ns).Create(ctx, quota(), dryCreate)
			return err
		}, controllerManagerPolicyName},
		{"a NetworkPolicy outside twin namespaces", func() error {
			_, err := agent.NetworkingV1().NetworkPolicies(ns).Create(ctx, policy(), dryCreate)
			return err
		}, controllerManagerPolicyName},
		{"creating a hostPath volume", func() error {
			_, err := agent.CoreV1().PersistentVolumes().Create(ctx, volume("rogue", hostVolume.Spec.PersistentVolumeSource), dryCreate)
			return err
		}, controllerManagerPolicyName},
		{"binding a volume of another driver to a claim", func() error {
			patch := []byte(`{"spec":{"claimRef":{"namespace":"` + ns + `","name":"ours"}}}`)
			_, err := agent.CoreV1().PersistentVolumes().Patch(ctx, hostVolume.Name, types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, controllerManagerPolicyName},
		{"deleting a volume of another driver", func() error { return agent.CoreV1().PersistentVolumes().Delete(ctx, hostVolume.Name, dry) }, controllerManagerPolicyName},
		{"changing a claim of another class", func() error {
			_, err := agent.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, theirClaim.Name, types.MergePatchType, annotate, dryPatch)
			return err
		}, controllerManagerPolicyName},
		{"creating a claim", func() error {
			_, err := agent.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: ourClaim.Spec}, dryCreate)
			return err
		}, "cannot create resource \"persistentvolumeclaims\""},
		{"writing the status of a pod of a real node", func() error {
			_, err := agent.CoreV1().Pods(ns).UpdateStatus(ctx, onReal, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, controllerManagerPolicyName},
	}
	for _, tc := range refused {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			if err := tc.do(); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want Forbidden by %s", err, tc.want)
			}
		})
	}
	if _, err := admin.CoreV1().Nodes().Get(ctx, real, metav1.GetOptions{}); err != nil {
		t.Errorf("the real node: %v", err)
	}

	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"creating a virtual node", func() error {
			_, err := agent.CoreV1().Nodes().Create(ctx, node(offloadv1alpha1.VirtualNodeName("new-"+id), true), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"changing its taints (virtualNodes.taint)", func() error {
			_, err := agent.CoreV1().Nodes().Patch(ctx, virtual, types.MergePatchType, untaint, dryPatch)
			return err
		}},
		{"patching its status", func() error {
			_, err := agent.CoreV1().Nodes().Patch(ctx, virtual, types.StrategicMergePatchType, statusPatch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
			return err
		}},
		{"writing the status of a pod bound to it", func() error {
			_, err := agent.CoreV1().Pods(ns).UpdateStatus(ctx, onVirtual, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"deleting a pod bound to it", func() error { return agent.CoreV1().Pods(ns).Delete(ctx, onVirtual.Name, dry) }},
		{"deleting it", func() error { return agent.CoreV1().Nodes().Delete(ctx, virtual, dry) }},
		{"a quota in a twin namespace", func() error {
			_, err := agent.CoreV1().ResourceQuotas(twin).Create(ctx, quota(), dryCreate)
			return err
		}},
		{"a NetworkPolicy in a twin namespace", func() error {
			_, err := agent.NetworkingV1().NetworkPolicies(twin).Create(ctx, policy(), dryCreate)
			return err
		}},
		{"a volume of driver offload.io", func() error {
			_, err := agent.CoreV1().PersistentVolumes().Create(ctx, volume("new", offloadVolume.Spec.PersistentVolumeSource), dryCreate)
			return err
		}},
		{"deleting a volume of driver offload.io", func() error { return agent.CoreV1().PersistentVolumes().Delete(ctx, offloadVolume.Name, dry) }},
		{"changing a claim of StorageClass offload", func() error {
			_, err := agent.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, ourClaim.Name, types.MergePatchType, annotate, dryPatch)
			return err
		}},
	} {
		t.Run(fmt.Sprintf("%s is admitted", tc.name), func(t *testing.T) {
			if err := tc.do(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The policy sees every pod write the controller-manager's ClusterRole
// grants, and no pod creation: RBAC refuses it those, and each pod created
// in the cluster would otherwise cost the API server an evaluation of the
// policy's matchConditions over the whole pod.
func TestTheControllerManagerPolicyMatchesExactlyThePodWritesItsRoleGrants(t *testing.T) {
	objs, err := renderIn("offload-system", map[string]any{"clusterName": "test"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		policy admissionregistrationv1.ValidatingAdmissionPolicy
		role   rbacv1.ClusterRole
	)
	if err := fromRendered(objs, map[string]any{
		"ValidatingAdmissionPolicy/" + controllerManagerPolicyName: &policy,
		"ClusterRole/offload-controller-manager":                   &role,
	}); err != nil {
		t.Fatal(err)
	}
	operation := map[string]admissionregistrationv1.OperationType{
		"create": admissionregistrationv1.Create, "update": admissionregistrationv1.Update, "patch": admissionregistrationv1.Update,
		"delete": admissionregistrationv1.Delete, "deletecollection": admissionregistrationv1.Delete,
	}
	granted := map[string]map[admissionregistrationv1.OperationType]bool{"pods": {}, "pods/status": {}}
	for _, r := range role.Rules {
		if !slices.Contains(r.APIGroups, "") {
			continue
		}
		for _, res := range r.Resources {
			if granted[res] == nil {
				continue
			}
			for _, v := range r.Verbs {
				if op, ok := operation[v]; ok {
					granted[res][op] = true
				}
			}
		}
	}
	matched := map[string]map[admissionregistrationv1.OperationType]bool{"pods": {}, "pods/status": {}}
	for _, r := range policy.Spec.MatchConstraints.ResourceRules {
		if !slices.Contains(r.APIGroups, "") {
			continue
		}
		for _, res := range r.Resources {
			if matched[res] == nil {
				continue
			}
			for _, op := range r.Operations {
				matched[res][op] = true
			}
		}
	}
	for res, ops := range granted {
		if len(ops) == 0 {
			t.Errorf("the ClusterRole grants no write of %s: the test reads the wrong role", res)
		}
		for op := range ops {
			if !matched[res][op] {
				t.Errorf("the ClusterRole grants %s of %s, which the policy does not see", op, res)
			}
		}
	}
	if matched["pods"][admissionregistrationv1.Create] {
		t.Error("the policy matches every pod creation in the cluster")
	}
}
