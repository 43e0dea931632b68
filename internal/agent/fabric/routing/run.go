package routing

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
)

// PlanFor is what node must hold given the Tunnels, their gateway pods and
// the nodes' addresses: each view via the gateway pod's IP on the
// gateway's node, via that node's address elsewhere. A Tunnel whose
// gateway runs nowhere yet has no route.
func PlanFor(node string, tunnels []offloadv1alpha1.Tunnel, gateways []corev1.Pod, nodeIPs map[string]netip.Addr) Plan {
	var p Plan
	for _, t := range tunnels {
		for _, c := range t.Spec.LocalPodCIDRs {
			if pr, err := netip.ParsePrefix(c); err == nil && !slices.Contains(p.LocalPodCIDRs, pr.Masked()) {
				p.LocalPodCIDRs = append(p.LocalPodCIDRs, pr.Masked())
			}
		}
		gw := gatewayOf(t.Name, gateways)
		if gw == nil {
			continue
		}
		via, err := netip.ParseAddr(gw.Status.PodIP)
		if err != nil {
			continue
		}
		if gw.Spec.NodeName != node {
			if via = nodeIPs[gw.Spec.NodeName]; !via.IsValid() {
				continue
			}
		}
		for _, m := range t.RoutedViews() {
			if v, err := netip.ParsePrefix(m.View); err == nil {
				p.Routes = append(p.Routes, Route{View: v.Masked(), Via: via})
			}
		}
	}
	sort.Slice(p.Routes, func(i, j int) bool { return p.Routes[i].View.String() < p.Routes[j].View.String() })
	sort.Slice(p.LocalPodCIDRs, func(i, j int) bool { return p.LocalPodCIDRs[i].String() < p.LocalPodCIDRs[j].String() })
	return p
}

// gatewayOf is tunnel's running gateway pod, the newest when a restart
// briefly shows two.
func gatewayOf(tunnel string, pods []corev1.Pod) *corev1.Pod {
	var best *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Labels[offloadv1alpha1.LabelTunnel] != tunnel || p.Status.PodIP == "" || p.Spec.NodeName == "" ||
			!p.DeletionTimestamp.IsZero() || p.Status.Phase != corev1.PodRunning {
			continue
		}
		if best == nil || p.CreationTimestamp.After(best.CreationTimestamp.Time) {
			best = p
		}
	}
	return best
}

// Options are the settings of the fabric on one node.
type Options struct {
	// Namespace is the install namespace: Tunnels and gateway pods.
	Namespace string
	// NodeName is this node.
	NodeName string
	// Interval is how often the plan is recomputed from the caches and the
	// node's routes checked; rules change only when the plan does.
	Interval time.Duration
}

// Run keeps this node's routes and rules as the Tunnels and gateway pods
// say until ctx ends, then removes them all: the DaemonSet's pod ends on
// uninstall, or when the node stops being eligible.
func Run(ctx context.Context, cfg *rest.Config, o Options, log klog.Logger) error {
	gatewaySelector := labels.SelectorFromSet(labels.Set{offloadv1alpha1.LabelComponent: offloadv1alpha1.ComponentGateway})
	c, err := cache.New(cfg, cache.Options{
		Scheme: scheme.Scheme,
		ByObject: map[client.Object]cache.ByObject{
			&offloadv1alpha1.Tunnel{}: {Namespaces: map[string]cache.Config{o.Namespace: {}}},
			&corev1.Pod{}:             {Namespaces: map[string]cache.Config{o.Namespace: {}}, Label: gatewaySelector},
		},
	})
	if err != nil {
		return fmt.Errorf("creating the caches: %w", err)
	}
	// Informers for what the plan reads start before the cache does.
	for _, obj := range []client.Object{&offloadv1alpha1.Tunnel{}, &corev1.Pod{}, &corev1.Node{}} {
		if _, err := c.GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("watching %T: %w", obj, err)
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("the caches did not sync")
	}
	defer func() {
		if err := Remove(); err != nil {
			log.Error(err, "Removing the fabric's routes and rules")
			return
		}
		log.Info("Removed the fabric's routes and rules")
	}()

	var applied *Plan
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		p, err := plan(ctx, c, o)
		if err != nil {
			log.Error(err, "Reading the Tunnels")
		} else if applied == nil || !p.Equal(*applied) || drifted(p) {
			if err := Apply(p); err != nil {
				log.Error(err, "Applying the routes")
			} else {
				log.Info("Routes applied", "routes", len(p.Routes), "plan", p.Routes)
				applied = &p
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func plan(ctx context.Context, c client.Reader, o Options) (Plan, error) {
	var tunnels offloadv1alpha1.TunnelList
	if err := c.List(ctx, &tunnels, client.InNamespace(o.Namespace)); err != nil {
		return Plan{}, err
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(o.Namespace)); err != nil {
		return Plan{}, err
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return Plan{}, err
	}
	ips := map[string]netip.Addr{}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
					ips[n.Name] = ip
				}
			}
		}
	}
	return PlanFor(o.NodeName, tunnels.Items, pods.Items, ips), nil
}

// drifted tells whether the node's routes or rules differ from p's
// (someone deleted one).
func drifted(p Plan) bool {
	have, err := Routes()
	if err != nil || !slices.Equal(have, p.Routes) {
		return true
	}
	rules, err := policyRules()
	if err != nil {
		return true
	}
	stale, missing := policyDiff(rules, p.policy())
	return len(stale)+len(missing) > 0
}
