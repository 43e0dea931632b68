package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/provider/remotenamespace"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// The chapters of this file run in
// TestOffloadedPodsRunInTheProvidersTwinNamespace (offload_test.go) and
// TestANamespaceSpansItsProviderAndUnoffloadRemovesTheTwin
// (namespace_test.go).

// attackPod is a pod a consumer must not be able to run on its provider.
type attackPod struct {
	name string
	// mutate turns a harmless pod into the attack.
	mutate func(*corev1.Pod)
	// refusedBy, when set, is the admission policy that must refuse it.
	refusedBy string
}

// attackPods are the pods that would give a consumer a provider's node,
// under the default policy (Pod Security baseline, no node placement).
func attackPods(providerNode string) []attackPod {
	return []attackPod{
		{"privileged", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}, ""},
		{"host-path", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "root", MountPath: "/host"}}
		}, ""},
		{"host-network", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, ""},
		{"sys-admin", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
		}, ""},
		{"tolerate-everything", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		}, ""},
		{"select-a-provider-node", func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: providerNode}
		}, ""},
		{"bind-to-a-provider-node", func(p *corev1.Pod) { p.Spec.NodeName = providerNode }, ""},
		{"nfs-volume", func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{nfsVolume} }, offloadv1alpha1.PodRuntimePolicyName},
		{"node-critical", func(p *corev1.Pod) { p.Spec.PriorityClassName = "system-node-critical" }, offloadv1alpha1.PodRuntimePolicyName},
		// expectProviderRefusesUnsafePods makes this ServiceAccount.
		{"other-service-account", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "builder" }, offloadv1alpha1.PodRuntimePolicyName},
		{"keeps-net-raw", func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext = nil }, offloadv1alpha1.PodRuntimePolicyName},
	}
}

// nfsVolume mounts a server of the tenant's choice on the provider's node.
var nfsVolume = corev1.Volume{Name: "share", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "10.99.9.9", Path: "/"}}}

// expectProviderRefusesUnsafePods tries, under the default policy of the
// peering, every attack pod twice: sent directly to the provider with the
// consumer's own credentials, and through the virtual node. The provider's
// API server refuses the first, and nothing runs; through the virtual node
// the agent leaves out the placement the provider would refuse, and the
// pods the provider refuses show why on the consumer.
func expectProviderRefusesUnsafePods(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, twin, consumerID string) {
	t.Helper()
	// Both sides show the policy.
	fields := peerFields(t, consumer, "provider")
	if fields["podSecurity"] != string(offloadv1alpha1.PodSecurityBaseline) || fields["nodePlacement"] != "not allowed" {
		t.Errorf("kubectl offload status peer provider on the consumer: policy fields %q, %q; want baseline, not allowed", fields["podSecurity"], fields["nodePlacement"])
	}
	fields = peerFields(t, provider, "consumer")
	if fields["tenantPodSecurity"] != string(offloadv1alpha1.PodSecurityBaseline) || fields["tenantNodePlacement"] != "not allowed" {
		t.Errorf("kubectl offload status peer consumer on the provider: policy fields %q, %q; want baseline, not allowed", fields["tenantPodSecurity"], fields["tenantNodePlacement"])
	}

	held, tenant := tenantClient(ctx, t, consumer)
	before := remotePods(ctx, t, provider, twin, consumerID)

	// Directly, with the consumer's credentials: refused by the provider's
	// API server, whoever sends the pod. A ServiceAccount of the twin
	// namespace other than the default one exists, as a tenant's could.
	builder := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder", Namespace: twin}}
	if _, err := provider.Kube.CoreV1().ServiceAccounts(twin).Create(ctx, builder, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, a := range attackPods(provider.Node.Name) {
		p := harmlessPod("direct-"+a.name, twin)
		a.mutate(p)
		_, err := tenant.CoreV1().Pods(twin).Create(ctx, p, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(fmt.Sprint(err), a.refusedBy) {
			t.Errorf("the consumer's credentials created pod %s on the provider: err=%v, want Forbidden or Invalid (by %q)", a.name, err, a.refusedBy)
			_ = provider.Kube.CoreV1().Pods(twin).Delete(ctx, p.Name, metav1.DeleteOptions{})
		}
	}
	if err := provider.Kube.CoreV1().ServiceAccounts(twin).Delete(ctx, builder.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod that asks for nothing gets the default requests, which count
	// against the offer; a Service may not open a port on the provider's
	// nodes or load balancers, nor take an external address.
	free := harmlessPod("direct-no-requests", twin)
	if created, err := tenant.CoreV1().Pods(twin).Create(ctx, free, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("a harmless pod without requests, sent directly: %v", err)
	} else if req := created.Spec.Containers[0].Resources.Requests; req.Cpu().IsZero() || req.Memory().IsZero() {
		t.Errorf("a pod without requests got requests %v on the provider, want the twin namespace's defaults", req)
	}
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "direct-nodeport"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "direct-lb"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "direct-external"}, Spec: corev1.ServiceSpec{ExternalIPs: []string{"192.0.2.1"}, Ports: []corev1.ServicePort{{Port: 80}}}},
	} {
		if _, err := tenant.CoreV1().Services(twin).Create(ctx, svc, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the consumer's credentials created Service %s (%s) on the provider: err=%v, want Forbidden", svc.Name, svc.Spec.Type, err)
			_ = provider.Kube.CoreV1().Services(twin).Delete(ctx, svc.Name, metav1.DeleteOptions{})
		}
	}
	// Nor may an EndpointSlice point the provider's kube-proxy at its API
	// server.
	apiServer, err := provider.Kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || len(apiServer.Endpoints) == 0 {
		t.Fatalf("the provider's API server EndpointSlice: %v, %v", apiServer, err)
	}
	addr := apiServer.Endpoints[0].Addresses[0]
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "direct-apiserver", Labels: map[string]string{discoveryv1.LabelServiceName: "direct-apiserver"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
	}
	if _, err := tenant.DiscoveryV1().EndpointSlices(twin).Create(ctx, slice, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "points at "+addr) {
		t.Errorf("the consumer's credentials created an EndpointSlice pointing at the provider's API server %s: err=%v, want Forbidden", addr, err)
		_ = provider.Kube.DiscoveryV1().EndpointSlices(twin).Delete(ctx, slice.Name, metav1.DeleteOptions{})
	}

	// The pods the consumer runs cannot be widened afterwards either, nor
	// the namespace's policy changed.
	if len(before) > 0 {
		patch := `{"spec":{"tolerations":[{"operator":"Exists"}]}}`
		if _, err := tenant.CoreV1().Pods(twin).Patch(ctx, before[0].Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
			t.Errorf("the consumer's credentials added a toleration of every taint to remote pod %s", before[0].Name)
		}
	}
	relabel := fmt.Sprintf(`{"metadata":{"labels":{%q:"privileged",%q:%q}}}`,
		offloadv1alpha1.LabelPodSecurityEnforce, offloadv1alpha1.LabelNodePlacement, offloadv1alpha1.NodePlacementAllowed)
	if _, err := tenant.CoreV1().Namespaces().Patch(ctx, twin, types.MergePatchType, []byte(relabel), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the consumer's credentials relabelled its twin namespace: err=%v, want Forbidden", err)
	}
	ns, err := provider.Kube.CoreV1().Namespaces().Get(ctx, twin, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels[offloadv1alpha1.LabelPodSecurityEnforce] != string(offloadv1alpha1.PodSecurityBaseline) || ns.Labels[offloadv1alpha1.LabelNodePlacement] != "" {
		t.Errorf("twin namespace %s labels %v, want Pod Security baseline enforced and no node placement", twin, ns.Labels)
	}
	// Other tenants' pods are kept out where the network plugin enforces
	// NetworkPolicy: the consumer's pods come in by the fabric's view of
	// them, and the tenant's pods here call each other at the consumer's
	// addresses of them (the mirror). The consumer cannot remove the policy.
	pc := ctrlClient(t, provider)
	waitFor(ctx, t, time.Minute, "the twin namespace's NetworkPolicy to let in the consumer's pods only", func(ctx context.Context) (bool, string) {
		var tunnel offloadv1alpha1.Tunnel
		if err := pc.Get(ctx, client.ObjectKey{Namespace: localcluster.InstallNamespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelServer, "consumer")}, &tunnel); err != nil {
			return false, "the provider's Tunnel of the consumer: " + err.Error()
		}
		var views []string
		for _, m := range slices.Concat(tunnel.Spec.Mappings, tunnel.Spec.PeerViews) {
			views = append(views, m.View)
		}
		slices.Sort(views)
		np, err := provider.Kube.NetworkingV1().NetworkPolicies(twin).Get(ctx, remotenamespace.NetworkPolicyName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		want := remotenamespace.NetworkPolicyFor(consumerID, views, nil) // the local clusters' nodes and API servers have private addresses
		return len(tunnel.Spec.PeerViews) > 0 && equality.Semantic.DeepEqual(np.Spec, want), fmt.Sprintf("%+v, want %+v", np.Spec, want)
	})
	if err := tenant.NetworkingV1().NetworkPolicies(twin).Delete(ctx, remotenamespace.NetworkPolicyName, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the consumer's credentials deleted the NetworkPolicy of its twin namespace: err=%v, want Forbidden", err)
	}

	// Namespaces are the provider's to give: asked for directly, kube-system
	// and default are refused, and stay as they were.
	tc, err := client.New(held.config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	expectATenantIsBounded(ctx, t, provider, twin, held.namespace, consumerID, tenant, tc)
	for _, target := range []string{metav1.NamespaceSystem, metav1.NamespaceDefault} {
		rn := &offloadv1alpha1.RemoteNamespace{ObjectMeta: metav1.ObjectMeta{Name: "steal-" + target, Namespace: held.namespace},
			Spec: offloadv1alpha1.RemoteNamespaceSpec{ConsumerClusterID: consumerID, SourceNamespace: target, TargetNamespace: target,
				MappingStrategy: offloadv1alpha1.EnforceSameName}}
		if err := tc.Create(ctx, rn); err != nil {
			t.Fatalf("creating RemoteNamespace %s with the consumer's credentials: %v", rn.Name, err)
		}
		waitFor(ctx, t, time.Minute, "RemoteNamespace "+rn.Name+" to be refused", func(ctx context.Context) (bool, string) {
			if err := tc.Get(ctx, client.ObjectKeyFromObject(rn), rn); err != nil {
				return false, err.Error()
			}
			return rn.Status.Phase == offloadv1alpha1.RemoteNamespaceFailed, string(rn.Status.Phase)
		})
		ns, err := provider.Kube.CoreV1().Namespaces().Get(ctx, target, metav1.GetOptions{})
		if err != nil || ns.Labels[offloadv1alpha1.LabelOriginClusterID] != "" || ns.Labels[offloadv1alpha1.LabelTenant] != "" {
			t.Errorf("namespace %s was given to the consumer: labels %v, err %v", target, ns.Labels, err)
		}
		if _, err := provider.Kube.RbacV1().RoleBindings(target).Get(ctx, "offload-consumer", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the consumer got a RoleBinding in %s: %v", target, err)
		}
		if err := tc.Delete(ctx, rn); err != nil {
			t.Fatal(err)
		}
	}

	// Through the virtual node: a privileged pod, and one with a network
	// volume, are refused by the provider, and the consumer pods say why.
	refused := harmlessPod("via-privileged", "work")
	refused.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	mounting := harmlessPod("via-nfs", "work")
	mounting.Spec.Volumes = []corev1.Volume{nfsVolume}
	for _, p := range []*corev1.Pod{refused, mounting} {
		if _, err := consumer.Kube.CoreV1().Pods("work").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, why := range map[string]string{refused.Name: "baseline", mounting.Name: "volume share is not a configMap"} {
		waitFor(ctx, t, 2*time.Minute, "the consumer pod "+name+" refused by the provider to say why", func(ctx context.Context) (bool, string) {
			p, err := consumer.Kube.CoreV1().Pods("work").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return p.Spec.NodeName == "offload-provider" && p.Status.Phase == corev1.PodPending && p.Status.Reason == "ProviderFailed" && strings.Contains(p.Status.Message, why),
				fmt.Sprintf("node %q, phase %s, reason %q, message %q", p.Spec.NodeName, p.Status.Phase, p.Status.Reason, p.Status.Message)
		})
	}
	waitFor(ctx, t, time.Minute, "a Warning event on the refused pod", func(ctx context.Context) (bool, string) {
		evs, err := consumer.Kube.CoreV1().Events("work").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + refused.Name})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "ProviderCreateFailed" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events, none a ProviderCreateFailed warning", len(evs.Items))
	})

	// A pod that tolerates every taint runs, without the toleration: where
	// it runs on the provider is the provider's to say.
	tolerant := harmlessPod("via-tolerant", "work")
	tolerant.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	if _, err := consumer.Kube.CoreV1().Pods("work").Create(ctx, tolerant, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 2*time.Minute, "the tolerant pod to run on the provider without its toleration", func(ctx context.Context) (bool, string) {
		r, err := provider.Kube.CoreV1().Pods(twin).Get(ctx, tolerant.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, tol := range r.Spec.Tolerations {
			if tol.Key != corev1.TaintNodeNotReady && tol.Key != corev1.TaintNodeUnreachable {
				t.Fatalf("remote pod %s tolerates %+v", r.Name, tol)
			}
		}
		return r.Status.Phase == corev1.PodRunning, string(r.Status.Phase)
	})

	// Nothing of the attacks exists on the provider.
	for _, p := range remotePods(ctx, t, provider, twin, consumerID) {
		if strings.HasPrefix(p.Name, "direct-") || p.Name == refused.Name || p.Name == mounting.Name {
			t.Errorf("attack pod %s exists on the provider", p.Name)
		}
	}
	all, err := provider.Kube.CoreV1().Pods(twin).List(ctx, metav1.ListOptions{LabelSelector: "attack"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range all.Items {
		if p.Name != tolerant.Name {
			t.Errorf("attack pod %s exists on the provider", p.Name)
		}
	}
	for _, name := range []string{refused.Name, mounting.Name, tolerant.Name} {
		if err := consumer.Kube.CoreV1().Pods("work").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// expectOneBudget checks, with the consumer's own credentials, that two
// twin namespaces together cannot use more cpu than the offer: a pod asking
// for 60% of it is admitted in the first, and then refused in the second.
func expectOneBudget(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, first, second string) {
	t.Helper()
	held, tenant := tenantClient(ctx, t, consumer)
	var offer offloadv1alpha1.ResourceOfferList
	if err := ctrlClient(t, provider).List(ctx, &offer, client.InNamespace(held.namespace)); err != nil || len(offer.Items) != 1 {
		t.Fatalf("the consumer's ResourceOffer: %v (%d)", err, len(offer.Items))
	}
	cpu := offer.Items[0].Spec.Resources.Cpu().MilliValue()
	share := resource.NewMilliQuantity(cpu*6/10, resource.DecimalSI)
	pod := func(ns string) *corev1.Pod {
		p := harmlessPod("budget", ns)
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: *share}
		return p
	}
	// The quota of a fresh twin namespace is ready once the quota
	// controller has computed its use.
	waitFor(ctx, t, time.Minute, "a pod using 60% of the offer in "+first, func(ctx context.Context) (bool, string) {
		_, err := tenant.CoreV1().Pods(first).Create(ctx, pod(first), metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	// The API server admits against the quota's status, which the
	// provider's quota controller copies from the spec the agent shrank:
	// both must show the smaller budget.
	waitFor(ctx, t, time.Minute, "the second twin namespace's budget to shrink", func(ctx context.Context) (bool, string) {
		q, err := provider.Kube.CoreV1().ResourceQuotas(second).Get(ctx, "offload-quota", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		spec := q.Spec.Hard[corev1.ResourceRequestsCPU]
		status, synced := q.Status.Hard[corev1.ResourceRequestsCPU]
		left := cpu - share.MilliValue()
		return synced && spec.MilliValue() <= left && status.MilliValue() <= left, fmt.Sprintf("spec %s, status %s", spec.String(), status.String())
	})
	_, err := tenant.CoreV1().Pods(second).Create(ctx, pod(second), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") {
		t.Errorf("a second pod using 60%% of the offer, in another twin namespace: err=%v, want Forbidden by the quota", err)
	}
	t.Logf("offer %dm cpu: a %s pod in one twin namespace, the same refused in another", cpu, share)
	if err := tenant.CoreV1().Pods(first).Delete(ctx, "budget", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
}
