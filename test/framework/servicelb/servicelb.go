// Package servicelb is k3s's ServiceLB for k3s-flavoured local clusters:
// each Service of type LoadBalancer (without a loadBalancerClass) gets a
// DaemonSet of svclb pods in kube-system, one container per port, each
// listening on the node's port (hostPort) and forwarding to the Service's
// cluster IPs; the Service's load balancer addresses are the addresses of
// the nodes whose svclb pod is Ready. As on k3s, two Services on one port
// cannot share a node: the second one's pods stay Pending, and it gets no
// address.
//
// It is what k3s's pkg/cloudprovider/servicelb.go does, written for the
// test harness; the svclb container is this repository's servicelb image
// (test/images/servicelb forward), k3s's klipper-lb.
package servicelb

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Names k3s's ServiceLB uses.
const (
	Namespace      = "kube-system"
	ServiceAccount = "svclb"
	LabelSvcName   = "svccontroller.k3s.cattle.io/svcname"
	LabelSvcNS     = "svccontroller.k3s.cattle.io/svcnamespace"
	LabelNodeSel   = "svccontroller.k3s.cattle.io/nodeselector"
	// LabelEnableLB on nodes opts them in: once a node has it, svclb pods
	// run only on nodes where it is "true".
	LabelEnableLB = "svccontroller.k3s.cattle.io/enablelb"
	// Finalizer is the upstream service controller's: the DaemonSet, in
	// another namespace than its Service, goes before the Service does.
	Finalizer = "service.kubernetes.io/load-balancer-cleanup"
	// resync re-reads every Service now and then, as k3s's controller does.
	resync = 30 * time.Second
)

// DaemonSetName is the name of the svclb DaemonSet of svc.
func DaemonSetName(svc *corev1.Service) string {
	name := svc.Name
	if len(name) > 48 {
		name = name[:48]
	}
	uid := string(svc.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return "svclb-" + strings.TrimSuffix(name, "-") + "-" + uid
}

// wants tells whether ServiceLB serves svc.
func wants(svc *corev1.Service) bool {
	return svc.DeletionTimestamp == nil && svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.LoadBalancerClass == nil
}

// DaemonSet is the svclb DaemonSet of svc, with image as its containers'
// image; nodeSelector restricts it to nodes labelled LabelEnableLB=true.
func DaemonSet(svc *corev1.Service, image string, nodeSelector bool) *appsv1.DaemonSet {
	name := DaemonSetName(svc)
	labels := map[string]string{"app": name, LabelSvcName: svc.Name, LabelSvcNS: svc.Namespace}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{
			LabelSvcName: svc.Name, LabelSvcNS: svc.Namespace, LabelNodeSel: fmt.Sprint(nodeSelector)}},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:           ServiceAccount,
					AutomountServiceAccountToken: ptr.To(false),
					PriorityClassName:            "system-node-critical",
					SecurityContext: &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{
						{Name: "net.ipv4.ip_forward", Value: "1"}}},
					Tolerations: []corev1.Toleration{
						{Key: "node-role.kubernetes.io/master", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
					},
				},
			},
		},
	}
	if nodeSelector {
		ds.Spec.Template.Spec.NodeSelector = map[string]string{LabelEnableLB: "true"}
	}
	dest := strings.Join(svc.Spec.ClusterIPs, " ")
	for _, p := range svc.Spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		portName := fmt.Sprintf("lb-%s-%d", strings.ToLower(string(proto)), p.Port)
		ds.Spec.Template.Spec.Containers = append(ds.Spec.Template.Spec.Containers, corev1.Container{
			Name:            portName,
			Image:           image,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Ports:           []corev1.ContainerPort{{Name: portName, ContainerPort: p.Port, HostPort: p.Port, Protocol: proto}},
			Env: []corev1.EnvVar{
				{Name: "SRC_PORT", Value: fmt.Sprint(p.Port)},
				{Name: "SRC_RANGES", Value: sourceRanges(svc)},
				{Name: "DEST_PROTO", Value: string(proto)},
				{Name: "DEST_PORT", Value: fmt.Sprint(p.Port)},
				{Name: "DEST_IPS", Value: dest},
			},
			SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}},
		})
	}
	return ds
}

// sourceRanges are the client ranges the Service admits.
func sourceRanges(svc *corev1.Service) string {
	if len(svc.Spec.LoadBalancerSourceRanges) == 0 {
		return "0.0.0.0/0"
	}
	return strings.Join(svc.Spec.LoadBalancerSourceRanges, " ")
}

// Ingress is the load balancer status of a Service whose svclb pods are
// pods: the address of each node where one is Ready, ExternalIP before
// InternalIP, IPv4, sorted.
func Ingress(pods []corev1.Pod, nodes map[string]*corev1.Node) []corev1.LoadBalancerIngress {
	var ips []netip.Addr
	for _, p := range pods {
		n := nodes[p.Spec.NodeName]
		if n == nil || p.DeletionTimestamp != nil || !ready(&p) {
			continue
		}
		if ip, ok := nodeAddress(n); ok && !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	var out []corev1.LoadBalancerIngress
	for _, ip := range ips {
		out = append(out, corev1.LoadBalancerIngress{IP: ip.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)})
	}
	return out
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeAddress(n *corev1.Node) (netip.Addr, bool) {
	for _, t := range []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP} {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); a.Type == t && err == nil && ip.Is4() {
				return ip, true
			}
		}
	}
	return netip.Addr{}, false
}

// Reconciler keeps each Service's svclb DaemonSet and load balancer status.
type Reconciler struct {
	client.Client
	// Image is the svclb containers' image.
	Image string
}

// Reconcile implements reconcile.Reconciler for a Service.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var svc corev1.Service
	if err := r.Get(ctx, req.NamespacedName, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.deleteDaemonSets(ctx, req.NamespacedName, "")
		}
		return ctrl.Result{}, err
	}
	if !wants(&svc) {
		if err := r.deleteDaemonSets(ctx, req.NamespacedName, ""); err != nil {
			return ctrl.Result{}, err
		}
		if svc.DeletionTimestamp == nil && len(svc.Status.LoadBalancer.Ingress) > 0 {
			svc.Status.LoadBalancer = corev1.LoadBalancerStatus{}
			if err := r.Status().Update(ctx, &svc); err != nil {
				return ctrl.Result{}, err
			}
		}
		if controllerutil.RemoveFinalizer(&svc, Finalizer) {
			return ctrl.Result{}, r.Update(ctx, &svc)
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(&svc, Finalizer) {
		if err := r.Update(ctx, &svc); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.ensureServiceAccount(ctx); err != nil {
		return ctrl.Result{}, err
	}
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes); err != nil {
		return ctrl.Result{}, err
	}
	byName := map[string]*corev1.Node{}
	selector := false
	for i := range nodes.Items {
		n := &nodes.Items[i]
		byName[n.Name] = n
		_, labelled := n.Labels[LabelEnableLB]
		selector = selector || labelled
	}
	want := DaemonSet(&svc, r.Image, selector)
	// Only the current DaemonSet of the Service: one of an older UID goes.
	if err := r.deleteDaemonSets(ctx, req.NamespacedName, want.Name); err != nil {
		return ctrl.Result{}, err
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: want.Name, Namespace: want.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, ds, func() error {
		ds.Labels = want.Labels
		if ds.CreationTimestamp.IsZero() {
			ds.Spec.Selector = want.Spec.Selector
		}
		ds.Spec.Template = want.Spec.Template
		return nil
	}); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying DaemonSet %s: %w", want.Name, err)
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(Namespace), client.MatchingLabels{"app": want.Name}); err != nil {
		return ctrl.Result{}, err
	}
	ingress := Ingress(pods.Items, byName)
	if !apiequality.Semantic.DeepEqual(ingress, svc.Status.LoadBalancer.Ingress) {
		svc.Status.LoadBalancer.Ingress = ingress
		if err := r.Status().Update(ctx, &svc); err != nil {
			return ctrl.Result{}, err
		}
	}
	if svc.DeletionTimestamp == nil {
		return ctrl.Result{RequeueAfter: resync}, nil
	}
	return ctrl.Result{}, nil
}

// deleteDaemonSets deletes the svclb DaemonSets of Service key, except
// keep.
func (r *Reconciler) deleteDaemonSets(ctx context.Context, key types.NamespacedName, keep string) error {
	var list appsv1.DaemonSetList
	if err := r.List(ctx, &list, client.InNamespace(Namespace), client.MatchingLabels{LabelSvcName: key.Name, LabelSvcNS: key.Namespace}); err != nil {
		return err
	}
	for i := range list.Items {
		if ds := &list.Items[i]; ds.Name != keep {
			if err := r.Delete(ctx, ds, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
	}
	return nil
}

func (r *Reconciler) ensureServiceAccount(ctx context.Context) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ServiceAccount, Namespace: Namespace}}
	if err := r.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// SetupWithManager watches Services, the svclb DaemonSets' pods, and nodes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ofPod := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name, ns := o.GetLabels()[LabelSvcName], o.GetLabels()[LabelSvcNS]
		if name == "" || ns == "" || o.GetNamespace() != Namespace {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
	})
	everyService := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list corev1.ServiceList
		if err := mgr.GetClient().List(ctx, &list); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, s := range list.Items {
			if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
			}
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("servicelb").
		For(&corev1.Service{}).
		Watches(&corev1.Pod{}, ofPod).
		Watches(&appsv1.DaemonSet{}, ofPod).
		Watches(&corev1.Node{}, everyService).
		Complete(r)
}
