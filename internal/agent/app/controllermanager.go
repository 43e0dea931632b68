package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/daemonset"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/foreigncluster"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/kubeletapi"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/namespaceoffloading"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/providerclient"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/storage"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/virtualnode"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/webhook"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/fabric/network"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/manager"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/metrics"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/provider/incoming"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/provider/remotenamespace"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/provider/resourceoffer"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/provider/tenant"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/summary"
	"github.com/kubectl-offload/kubectl-offload/internal/ipam"
)

const controllerManagerLong = `Run the controller-manager: the offload.io controllers, the webhook and the
virtual kubelets, with liveness (/healthz) and readiness (/readyz) probes on
--health-probe-bind-address.

Replicas elect a leader through Lease offload-controller-manager in the
agent's namespace; only the leader runs the controllers. At start every
replica reads and logs the cluster identity (ConfigMap
offload-cluster-identity) and stops with an error when it is missing.

The process stops gracefully on SIGTERM or SIGINT.`

const controllerManagerExample = `  # In a pod, as the chart runs it
  offload-agent controller-manager --health-probe-bind-address=:8081

  # Out of the cluster, for debugging, without competing for the Lease
  offload-agent controller-manager --kubeconfig ~/.kube/config --namespace offload-system --leader-elect=false`

// controllerManagerOptions are the options of offload-agent controller-manager.
type controllerManagerOptions struct {
	manager.Options
	// SharingPercentage is the share of the resources (OfferBasis) offered
	// to each consumer.
	SharingPercentage int
	// OfferBasis is what an offer is a share of: the lent nodes'
	// allocatable resources, or what is free of them.
	OfferBasis string
	// UnreachableTolerationSeconds is how long offloaded pods stay bound to
	// an unreachable or NotReady virtual node; negative means for ever.
	UnreachableTolerationSeconds int64
	// SchedulingWebhook serves the scheduling webhook. Where the chart
	// installed the MutatingAdmissionPolicy that does its work, the
	// webhook gets only the pods that mount claims, which a policy cannot
	// read.
	SchedulingWebhook bool
	// VirtualNodeTaint registers the virtual nodes with the virtual-node
	// taint, so that only the pods of offloaded namespaces go there.
	VirtualNodeTaint bool
	// NodeIP is the address of the virtual nodes, where the kubelet API is
	// served: this pod's IP.
	NodeIP string
	// KubeletPort is the port of the virtual nodes' kubelet API; 0 serves none.
	KubeletPort int32
	// Network runs the network fabric's controllers.
	Network bool
	// PodCIDRs, ServiceCIDRs, RemapPools and ReservedCIDRs are this
	// cluster's network settings, as the install detected or was told.
	PodCIDRs, ServiceCIDRs, RemapPools, ReservedCIDRs []string
	// PeerRanges are the ranges a peer's pod CIDRs must lie within; empty
	// means ipam.DefaultPeerRanges.
	PeerRanges []string
	// GatewayServiceType and GatewayAddress publish this cluster's gateways
	// to its consumers.
	GatewayServiceType, GatewayAddress string
	// CredentialGrace is how long a consumer's replaced credentials keep
	// working after a new one is issued.
	CredentialGrace time.Duration
	// AbandonedAfter is how long after its credentials expired a consumer
	// is taken as gone for good and removed.
	AbandonedAfter time.Duration
	// ReservedNamespaces are namespaces no consumer may have, besides
	// remotenamespace.DefaultReservedNamespaces and the built-in ones.
	ReservedNamespaces []string
	// TenantEndpointCIDRs are where tenants' EndpointSlices may point
	// besides this cluster's pod CIDRs and, with the fabric, their views.
	TenantEndpointCIDRs []string
	global              *globalOptions
}

func newCmdControllerManager(g *globalOptions) *cobra.Command {
	o := &controllerManagerOptions{Options: manager.NewOptions(), SharingPercentage: resourceoffer.DefaultSharingPercentage,
		OfferBasis:                   string(resourceoffer.BasisAllocatable),
		UnreachableTolerationSeconds: -1, SchedulingWebhook: true, VirtualNodeTaint: true, KubeletPort: 10250, RemapPools: []string{"10.64.0.0/12"},
		GatewayServiceType: string(corev1.ServiceTypeNodePort), CredentialGrace: tenant.DefaultCredentialGrace, AbandonedAfter: tenant.DefaultAbandonedAfter, global: g}
	cmd := &cobra.Command{
		Use:     "controller-manager",
		Short:   "Run the controllers, the webhook and the virtual kubelets",
		Long:    controllerManagerLong,
		Example: controllerManagerExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the agent, which holds the Lease and the cluster identity (default: $POD_NAMESPACE).")
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "Name of this cluster, checked against the identity ConfigMap (default: $OFFLOAD_CLUSTER_NAME).")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address of the /healthz and /readyz endpoints.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, `Address of the Prometheus /metrics endpoint, such as ":8443", served over HTTPS to the clients the API server authorizes to get /metrics; "0" turns it off.`)
	fs.StringVar(&o.PprofBindAddress, "pprof-bind-address", o.PprofBindAddress, `Address of Go's /debug/pprof profiling endpoints, such as "127.0.0.1:6060"; empty or "0" (the default) turns them off.`)
	fs.BoolVar(&o.LeaderElection, "leader-elect", o.LeaderElection, "Run the controllers on one replica at a time, elected through Lease "+offloadv1alpha1.ControllerManager+".")
	fs.IntVar(&o.SharingPercentage, "sharing-percentage", o.SharingPercentage, "Percentage of the lent nodes' cpu, memory and pods (--offer-basis) offered to each consumer.")
	fs.StringVar(&o.OfferBasis, "offer-basis", o.OfferBasis, `What an offer is a share of: "allocatable", the lent nodes' allocatable resources (this cluster's scheduler leaves pending what does not fit beside its own pods), or "free", what this cluster's other pods leave of them (at the cost of watching every pod of the cluster).`)
	fs.Int64Var(&o.UnreachableTolerationSeconds, "unreachable-toleration-seconds", o.UnreachableTolerationSeconds,
		"How long offloaded pods stay bound to an unreachable or NotReady virtual node; negative means for ever.")
	fs.BoolVar(&o.SchedulingWebhook, "scheduling-webhook", o.SchedulingWebhook,
		"Serve the scheduling webhook (where the API server applies the offload-scheduling MutatingAdmissionPolicy, only the pods that mount claims reach it); false serves none.")
	fs.BoolVar(&o.VirtualNodeTaint, "virtual-node-taint", o.VirtualNodeTaint,
		"Give the virtual nodes the NoExecute taint offload.io/virtual-node, which only the pods of offloaded namespaces tolerate; false lets any pod be scheduled there and keeps every DaemonSet off them.")
	fs.StringVar(&o.NodeIP, "node-ip", o.NodeIP, "Address of the virtual nodes, where their kubelet API is served (default: $POD_IP).")
	fs.Int32Var(&o.KubeletPort, "kubelet-port", o.KubeletPort, "First port of the virtual nodes' kubelet API (logs, exec, attach, port-forward, resource metrics): each virtual node takes the lowest free port from it on; 0 turns it off.")
	fs.BoolVar(&o.Network, "network", o.Network, "Run the network fabric: a WireGuard gateway per peering, with pod CIDRs remapped where they overlap.")
	fs.StringSliceVar(&o.PodCIDRs, "pod-cidr", o.PodCIDRs, "This cluster's pod CIDR (repeatable); needed with --network.")
	fs.StringSliceVar(&o.ServiceCIDRs, "service-cidr", o.ServiceCIDRs, "This cluster's service CIDR (repeatable); never used by a peer's view.")
	fs.StringSliceVar(&o.RemapPools, "remap-pool", o.RemapPools, "CIDR from which overlapping peer pod CIDRs get their view here (repeatable).")
	fs.StringSliceVar(&o.PeerRanges, "peer-range", o.PeerRanges, "CIDR a peer's pod CIDRs must lie within (repeatable); by default the private ranges 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 and 100.64.0.0/10.")
	fs.StringSliceVar(&o.ReservedCIDRs, "reserved-cidr", o.ReservedCIDRs, "CIDR no peer's view may use, such as the node network (repeatable).")
	fs.StringVar(&o.GatewayServiceType, "gateway-service-type", o.GatewayServiceType, "Service type that publishes this cluster's gateways to consumers: NodePort or LoadBalancer.")
	fs.DurationVar(&o.CredentialGrace, "credential-grace", o.CredentialGrace,
		"How long a consumer's replaced credentials keep working after the auth service issues new ones.")
	fs.DurationVar(&o.AbandonedAfter, "abandoned-tenant-after", o.AbandonedAfter,
		"How long after its credentials expired a consumer that never renewed them is removed, with its twin namespaces.")
	fs.StringSliceVar(&o.ReservedNamespaces, "reserved-namespace", o.ReservedNamespaces,
		"Namespace no consumer may have as a twin namespace, besides kube-*, default, the install namespace and common add-on namespaces (repeatable).")
	fs.StringSliceVar(&o.TenantEndpointCIDRs, "tenant-endpoint-cidr", o.TenantEndpointCIDRs,
		"CIDR the EndpointSlices of consumers' twin namespaces may point into besides --pod-cidr and the fabric's views, such as the consumers' pod CIDRs on a shared flat network (repeatable).")
	fs.StringVar(&o.GatewayAddress, "gateway-address", o.GatewayAddress, "Address consumers dial to reach this cluster's gateways (host or host:port), behind NAT or a fixed load balancer.")
	fs.DurationVar(&o.GracefulShutdownTimeout, "graceful-shutdown-timeout", o.GracefulShutdownTimeout, "How long the controllers may take to stop after SIGTERM.")
	return cmd
}

// Complete fills the namespace and the cluster name from the environment the
// chart sets when the flags leave them empty.
func (o *controllerManagerOptions) Complete() {
	o.Namespace = fromEnv(o.Namespace, envNamespace)
	o.ClusterName = fromEnv(o.ClusterName, envClusterName)
	o.NodeIP = fromEnv(o.NodeIP, envPodIP)
}

// Validate checks the options.
func (o *controllerManagerOptions) Validate() error {
	if o.KubeletPort < 0 || o.KubeletPort > 65535 {
		return fmt.Errorf("--kubelet-port must be between 0 and 65535, got %d", o.KubeletPort)
	}
	if o.NodeIP != "" && net.ParseIP(o.NodeIP) == nil {
		return fmt.Errorf("--node-ip must be an IP address, got %q", o.NodeIP)
	}
	if o.SharingPercentage < 0 || o.SharingPercentage > 100 {
		return fmt.Errorf("--sharing-percentage must be between 0 and 100, got %d", o.SharingPercentage)
	}
	if err := resourceoffer.Basis(o.OfferBasis).Validate(); err != nil {
		return fmt.Errorf("--offer-basis: %w", err)
	}
	if o.Network {
		if _, err := o.networkSettings(); err != nil {
			return err
		}
	}
	if _, _, err := o.endpointCIDRs(); err != nil {
		return err
	}
	return o.Options.Validate()
}

// networkSettings parses the network flags.
func (o *controllerManagerOptions) networkSettings() (network.Settings, error) {
	s := network.Settings{Namespace: o.Namespace, GatewayAddress: o.GatewayAddress}
	var err error
	if s.PodCIDRs, err = ipam.ParsePrefixes("--pod-cidr", o.PodCIDRs); err != nil {
		return s, err
	}
	if len(s.PodCIDRs) == 0 {
		return s, errors.New("--network needs --pod-cidr: reinstall with kubectl offload install --pod-cidr CIDR")
	}
	if s.ServiceCIDRs, err = ipam.ParsePrefixes("--service-cidr", o.ServiceCIDRs); err != nil {
		return s, err
	}
	if s.Pools, err = ipam.ParsePrefixes("--remap-pool", o.RemapPools); err != nil {
		return s, err
	}
	if s.Reserved, err = ipam.ParsePrefixes("--reserved-cidr", o.ReservedCIDRs); err != nil {
		return s, err
	}
	if s.PeerRanges.Allowed, err = ipam.ParsePrefixes("--peer-range", o.PeerRanges); err != nil {
		return s, err
	}
	if err := (ipam.Space{Pools: s.Pools, Reserved: s.Reserved}).Validate(); err != nil {
		return s, err
	}
	switch corev1.ServiceType(o.GatewayServiceType) {
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		s.GatewayServiceType = corev1.ServiceType(o.GatewayServiceType)
	default:
		return s, fmt.Errorf("--gateway-service-type must be NodePort or LoadBalancer, got %q", o.GatewayServiceType)
	}
	return s, nil
}

// endpointCIDRs parses --pod-cidr and --tenant-endpoint-cidr.
func (o *controllerManagerOptions) endpointCIDRs() (pods, flat []netip.Prefix, err error) {
	if pods, err = ipam.ParsePrefixes("--pod-cidr", o.PodCIDRs); err != nil {
		return nil, nil, err
	}
	if flat, err = ipam.ParsePrefixes("--tenant-endpoint-cidr", o.TenantEndpointCIDRs); err != nil {
		return nil, nil, err
	}
	return pods, flat, nil
}

// Run runs the controller-manager until ctx is cancelled.
func (o *controllerManagerOptions) Run(ctx context.Context) error {
	o.Logger = o.global.logger("controller-manager")
	cfg, err := o.global.restConfig("controller-manager")
	if err != nil {
		return err
	}
	// One source of the providers' credentials for every consumer
	// controller that talks to a provider.
	var shared *providerclient.Set
	providers := func(mgr ctrlmanager.Manager) *providerclient.Set {
		if shared == nil {
			shared = &providerclient.Set{Reader: mgr.GetAPIReader(), Namespace: o.Namespace}
		}
		return shared
	}
	o.Controllers = append(o.Controllers,
		// Provider side: what each consumer may use.
		func(mgr ctrlmanager.Manager) error {
			r := &resourceoffer.Reconciler{Client: mgr.GetClient(), Namespace: o.Namespace, SharingPercentage: o.SharingPercentage, Basis: resourceoffer.Basis(o.OfferBasis)}
			return r.SetupWithManager(mgr)
		},
		// Provider side: twin namespaces for the consumers' RemoteNamespaces,
		// and those of consumers without a Tenant any more.
		func(mgr ctrlmanager.Manager) error {
			pods, flat, err := o.endpointCIDRs()
			if err != nil {
				return err
			}
			return (&remotenamespace.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Namespace: o.Namespace, Reserved: o.ReservedNamespaces,
				PodCIDRs: pods, FlatCIDRs: flat}).SetupWithManager(mgr)
		},
		func(mgr ctrlmanager.Manager) error {
			return (&remotenamespace.GarbageCollector{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}).SetupWithManager(mgr)
		},
		// Provider side: the one owner of a consumer's tenant teardown.
		func(mgr ctrlmanager.Manager) error {
			return (&tenant.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: o.Namespace, CredentialGrace: o.CredentialGrace, AbandonedAfter: o.AbandonedAfter}).SetupWithManager(mgr)
		},
		// Provider side: each consumer recorded as a ForeignCluster.
		func(mgr ctrlmanager.Manager) error {
			return (&incoming.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
		},
		// Both sides: the one writer of the ForeignClusters' status.
		func(mgr ctrlmanager.Manager) error {
			return (&summary.Reconciler{Client: mgr.GetClient(), Namespace: o.Namespace}).SetupWithManager(mgr)
		},
		// Consumer side: authenticating to the providers it peers with.
		func(mgr ctrlmanager.Manager) error {
			r := &foreigncluster.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: o.Namespace}
			return r.SetupWithManager(mgr)
		},
		// Consumer side: the scheduling webhook, on every replica, unless
		// the API server does its work (a MutatingAdmissionPolicy).
		func(mgr ctrlmanager.Manager) error {
			if !o.SchedulingWebhook {
				return nil
			}
			wo := webhook.NewOptions()
			wo.Namespace = o.Namespace
			wo.Logger = o.Logger.WithName("webhook")
			if o.UnreachableTolerationSeconds >= 0 {
				wo.TolerationSeconds = &o.UnreachableTolerationSeconds
			}
			return webhook.Setup(mgr, wo)
		},
		// Consumer side: DaemonSets kept off the virtual nodes, unless they opt in.
		func(mgr ctrlmanager.Manager) error {
			return (&daemonset.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
		},
		// Consumer side: twin namespaces on the providers for each offloaded namespace.
		func(mgr ctrlmanager.Manager) error {
			r := &namespaceoffloading.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: o.Namespace, Providers: providers(mgr)}
			return r.SetupWithManager(mgr)
		},
		// Consumer side: one virtual node per authenticated provider.
		func(mgr ctrlmanager.Manager) error {
			r := &virtualnode.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: o.Namespace, NodeIP: o.NodeIP, Network: o.Network, Providers: providers(mgr),
				Untainted: !o.VirtualNodeTaint}
			if err := r.SetupWithManager(mgr); err != nil {
				return err
			}
			if err := addStorage(mgr, r); err != nil {
				return err
			}
			if err := metrics.Register(&metrics.Collector{Reader: mgr.GetClient(), Namespace: o.Namespace, Peers: r.PeerStats}); err != nil {
				return err
			}
			if o.KubeletPort == 0 || o.NodeIP == "" {
				o.Logger.Info("Not serving the kubelet API of the virtual nodes: kubectl logs and exec will not reach offloaded pods",
					"kubeletPort", o.KubeletPort, "nodeIP", o.NodeIP)
				return nil
			}
			return addKubeletAPI(mgr, o, r)
		},
	)
	// The gateways' objects live in this namespace only, and RBAC allows no
	// more: their caches watch just here. The provider's twin-namespace
	// controller watches Tunnels with the fabric off too.
	o.NamespacedObjects = []client.Object{&offloadv1alpha1.Tunnel{}, &appsv1.Deployment{}, &corev1.Service{}, &corev1.ServiceAccount{}, &rbacv1.Role{}}
	if o.Network {
		settings, err := o.networkSettings()
		if err != nil {
			return err
		}
		o.Controllers = append(o.Controllers,
			// Provider side: each consumer's tunnel and gateway.
			func(mgr ctrlmanager.Manager) error {
				return (&network.ProviderReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Settings: settings}).SetupWithManager(mgr)
			},
			// Consumer side: the tunnel to each provider, and NetworkReady.
			func(mgr ctrlmanager.Manager) error {
				r := &network.ConsumerReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Settings: settings, Providers: providers(mgr)}
				return r.SetupWithManager(mgr)
			},
			// Consumer side: what the providers' pods may reach here.
			func(mgr ctrlmanager.Manager) error {
				return (&network.ConsumerFilterReconciler{Client: mgr.GetClient(), Settings: settings}).SetupWithManager(mgr)
			},
		)
	}
	return manager.Run(ctx, cfg, o.Options)
}

// addStorage provisions the claims of StorageClass offload on the
// providers of the virtual nodes r runs, on the leader only.
func addStorage(mgr ctrlmanager.Manager, r *virtualnode.Reconciler) error {
	kube, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("creating the client of the storage provisioner: %w", err)
	}
	return mgr.Add(&storage.Controller{Kube: kube, Provisioner: &storage.Provisioner{Peers: r}})
}

// addKubeletAPI serves the kubelet API of the virtual nodes, a port each
// from o.KubeletPort on, for the pods r resolves and with the usage r reads
// from the providers. It runs on the leader only, with the virtual nodes,
// whose address is this pod's.
func addKubeletAPI(mgr ctrlmanager.Manager, o *controllerManagerOptions, r *virtualnode.Reconciler) error {
	kube, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("creating the client of the kubelet API: %w", err)
	}
	srv, err := kubeletapi.New(kubeletapi.Options{
		Addr:     net.JoinHostPort("", strconv.Itoa(int(o.KubeletPort))),
		Resolver: r,
		Usage:    r,
		Kube:     kube,
		IPs:      []net.IP{net.ParseIP(o.NodeIP)},
		Logger:   o.Logger.WithName("kubelet-api"),
	})
	if err != nil {
		return err
	}
	r.KubeletPorts = srv
	return mgr.Add(srv)
}
