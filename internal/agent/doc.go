// Package agent holds no code: it is the map of the offload-agent's
// packages below it. The tree shows which side of a peering each one
// serves: consumer/ (this cluster runs its pods in a provider), provider/
// (this cluster lends capacity to consumers), fabric/ (the network, both
// sides), and at this root what every side shares.
//
// Shared, at this root:
//   - app: the offload-agent command tree (controller-manager, auth,
//     gateway, fabric).
//   - manager: the controller-runtime manager, its caches and the identity check.
//   - summary: the one writer of every ForeignCluster's status, which it
//     computes from the ForeignCluster's children (and, on a provider, the
//     consumer's Tenant).
//   - ssa: status writes by server-side apply, one field manager per
//     controller.
//   - children: the parts of a peering a controller owns, created, and
//     replaced when an earlier owner of the same name left them.
//   - metrics: what the controller-manager tells Prometheus about the
//     peers, pod reflection and the tunnels (docs/metrics.md), beside
//     controller-runtime's own metrics.
//   - pki: the certificate authority and the serving certificates it
//     issues and renews: the auth service's CA, which peers pin, the
//     webhook's and the virtual nodes' kubelet API's. It imports neither
//     side, so the consumer's webhook and kubelet API do not import the
//     provider's auth service.
//
// The network fabric, fabric/ (internal/ipam holds the views of peers'
// pod CIDRs, pure):
//   - network: the network fabric's controllers, one per side (the
//     consumer's tunnel to each provider; the provider's answer to each
//     consumer's NetworkPeering), rendering one gateway per Tunnel and
//     reporting the peering's network on it (NetworkReady).
//   - gateway: offload-agent gateway, one per peering, in its own pod: the
//     WireGuard device, the address translation, the tenant filter.
//   - routing: offload-agent fabric, a DaemonSet: routes to the gateways on
//     every node.
//
// Consumer side, consumer/:
//   - foreigncluster: authenticates with each provider, rotates the
//     credentials, reports in the PeeringCredentials (Authenticated),
//     releases the tenant on unpeer.
//   - virtualnode: a thin reconciler over one runtime per provider, which
//     runs the node controller, the pod controller and object reflection
//     as named steps, each restarted on its own, and reports in the
//     VirtualNode.
//   - podreflection: the virtual-kubelet pod lifecycle handler (remote pods
//     in twin namespaces, status back), with its own loops (orphan
//     collection, service-account token renewal).
//   - objectreflection: ConfigMaps, Secrets, Services and EndpointSlices
//     of offloaded namespaces into their twins, and the one writer of
//     reflected objects (Kind.Apply), which pod reflection uses too.
//   - reflection: every translation, pure: consumer objects for the
//     provider (pods, ConfigMaps, Secrets, Services, EndpointSlices) and
//     remote pods back for the consumer (status, the consumer's view).
//   - providerclient: the one per-peer source of a provider's client
//     configuration (credentials from the kubeconfig Secret, the token
//     renewed in place), shared by virtualnode and namespaceoffloading.
//   - namespaceoffloading: NamespaceOffloadings into RemoteNamespaces.
//   - webhook: the scheduling webhook for pods of offloaded namespaces.
//   - daemonset: DaemonSets kept off the virtual nodes unless they opt in
//     (a webhook and a controller).
//   - kubeletapi: logs, exec, attach and port-forward of the virtual nodes.
//
// Provider side, provider/:
//   - auth: the peering service (/v1/peer, /v1/refresh, /v1/unpeer).
//   - tenant: the one owner of a Tenant's teardown (finalizer offload.io/tenant).
//   - incoming: keeps a ForeignCluster for each consumer.
//   - remotenamespace: twin namespaces for RemoteNamespaces, and their GC.
//   - resourceoffer: the ResourceOffer each consumer reads.
//
// The agent never imports the CLI (internal/cli, peer, status, install,
// offload, version); what both need is in api/v1alpha1 and
// internal/peering. A consumer's package never imports a provider's, nor
// the reverse. internal/layering and depguard enforce both.
package agent
