package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Names of the objects kubectl-offload installs, so that the CLI and the
// agent agree on them.
const (
	// ReleaseName is the Helm release of the offload chart.
	ReleaseName = "offload"
	// ChartName is the name of the embedded chart.
	ChartName = "offload"
	// IdentityConfigMap holds the cluster identity (ID and name).
	IdentityConfigMap = "offload-cluster-identity"
	// ControllerManager is the Deployment running offload-agent controller-manager.
	ControllerManager = "offload-controller-manager"
	// Auth is the Deployment and Service running offload-agent auth.
	Auth = "offload-auth"
	// AuthCASecret is the Secret, in the install namespace, holding the CA
	// that the auth service manages; consumers pin it by its hash.
	AuthCASecret = "offload-auth-ca"
	// WebhookCertSecret holds the scheduling webhook's CA and serving
	// certificate, kept by the controller-manager.
	WebhookCertSecret = "offload-webhook-cert"
	// AuthCACertKey is the key of the PEM CA certificate in AuthCASecret.
	AuthCACertKey = "ca.crt"
	// VersionLabel is the standard label carrying a component's version.
	VersionLabel = "app.kubernetes.io/version"
	// PartOfLabel, set to PartOfValue, marks the objects of kubectl-offload
	// itself, such as the chart's DaemonSet.
	PartOfLabel = "app.kubernetes.io/part-of"
	// PartOfValue is the value of PartOfLabel on kubectl-offload's objects.
	PartOfValue = "kubectl-offload"
)

// Labels and taint of every virtual node.
const (
	// LabelType, set to TypeVirtualNode, marks virtual nodes: their capacity
	// is borrowed, their addresses are not reachable, and nothing is offered on them.
	LabelType = "offload.io/type"
	// TypeVirtualNode is the value of LabelType on virtual nodes.
	TypeVirtualNode = "virtual-node"
	// LabelRemoteClusterID is the cluster ID of the provider a virtual node stands for.
	LabelRemoteClusterID = "offload.io/remote-cluster-id"
	// TaintVirtualNode is the key of the NoExecute taint virtual nodes
	// carry (VirtualNodeTaint), unless the consumer's agent was installed
	// with virtualNodes.taint=false.
	TaintVirtualNode = "offload.io/virtual-node"
)

// VirtualNodeTaint is the taint a virtual node carries, so that only the
// pods of offloaded namespaces, which the scheduling mutation gives its
// toleration, go there.
func VirtualNodeTaint() corev1.Taint {
	return corev1.Taint{Key: TaintVirtualNode, Value: "true", Effect: corev1.TaintEffectNoExecute}
}

// VirtualNodeUntainted tells whether node, a virtual node, lacks the
// VirtualNodeTaint (installed so, or untainted by hand): every pod and
// every DaemonSet may then be scheduled on it.
func VirtualNodeUntainted(node *corev1.Node) bool {
	return !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == TaintVirtualNode && t.Effect == corev1.TaintEffectNoExecute
	})
}

// VirtualNodeName is the name of the virtual node that stands for peer
// (the name of its ForeignCluster): offload-<peer>.
func VirtualNodeName(peer string) string { return "offload-" + peer }

// Names of a tenant's objects on the provider.
const (
	// TenantNamespacePrefix starts the name of every tenant namespace:
	// offload-tenant-<consumer name>.
	TenantNamespacePrefix = "offload-tenant-"
	// LabelTenant labels a tenant namespace with its consumer's cluster ID.
	LabelTenant = "offload.io/tenant"
	// ConsumerServiceAccount is the consumer's ServiceAccount in its tenant
	// namespace; its tokens are the consumer's credentials.
	ConsumerServiceAccount = "offload-consumer"
	// TenantRole is the ClusterRole, and the RoleBinding in each tenant
	// namespace, that scope the consumer's identity.
	TenantRole = "offload-tenant"
)

// TenantNamespace returns the tenant namespace of the consumer named
// consumerName on a provider.
func TenantNamespace(consumerName string) string { return TenantNamespacePrefix + consumerName }

// TwinNamespace is the DefaultName of the provider namespace that mirrors
// consumer namespace ns: NS-<consumer>-<hash6>, where hash6 is the start of
// the SHA-256 of the consumer's cluster ID and ns, so two consumers with the
// same name never share one. Long names are cut to fit the 63 characters of
// a namespace name, keeping the hash.
func TwinNamespace(ns, consumerName, consumerID string) string {
	sum := sha256.Sum256([]byte(consumerID + "/" + ns))
	suffix := "-" + hex.EncodeToString(sum[:])[:6]
	prefix := ns + "-" + consumerName
	if limit := 63 - len(suffix); len(prefix) > limit {
		prefix = strings.TrimRight(prefix[:limit], "-")
	}
	return prefix + suffix
}

// The network fabric's names and labels.
const (
	// LabelTunnel names the Tunnel a gateway's objects belong to.
	LabelTunnel = "offload.io/tunnel"
	// LabelComponent is the component label of the agent's workloads.
	LabelComponent = "app.kubernetes.io/component"
	// ComponentGateway is the component of gateway pods.
	ComponentGateway = "gateway"
	// Fabric is the DaemonSet that routes peers' pod views on every node.
	Fabric = "offload-fabric"
	// GatewayTemplateConfigMap holds the gateway pod template the chart
	// renders from its values (image, resources, scheduling).
	GatewayTemplateConfigMap = "offload-gateway-template"
	// GatewayTemplateKey is the key of the template in that ConfigMap.
	GatewayTemplateKey = "pod.yaml"
	// GatewayPrivateKeyKey is the key of the private key in a gateway's Secret.
	GatewayPrivateKeyKey = "privateKey"
	// GatewayPort is the UDP port gateways listen on, in their pods.
	GatewayPort = 51820
)

// TunnelName is the name of this cluster's Tunnel to peer: out-PEER when
// this cluster consumes the peer (it is the client), in-PEER when the peer
// consumes it (it is the server).
func TunnelName(role TunnelRole, peer string) string {
	if role == TunnelServer {
		return "in-" + peer
	}
	return "out-" + peer
}

// GatewayName is the name of the Deployment, Secret, ServiceAccount, Role
// and Service of tunnel's gateway: offload-gateway-TUNNEL, cut to the 63
// characters of a Service name with a hash that keeps it unique.
func GatewayName(tunnel string) string {
	name := "offload-gateway-" + tunnel
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(tunnel))
	suffix := "-" + hex.EncodeToString(sum[:])[:6]
	return strings.TrimRight(name[:63-len(suffix)], "-") + suffix
}

// Persistent storage on a consumer (StoragePolicy on the provider).
const (
	// StorageClassName is the consumer's StorageClass, installed by the
	// chart, whose claims are claims of this cluster's agent on the
	// provider whose virtual node runs the pod.
	StorageClassName = "offload"
	// StorageProvisioner is that StorageClass's provisioner, the consumer's
	// agent.
	StorageProvisioner = "offload.io/virtual-node"
	// StorageDriver is the CSI driver the agent's PersistentVolumes name.
	// No CSI driver runs: no kubelet mounts these volumes, the provider's
	// kubelet mounts the remote claim. Their volume attributes say where
	// the data lives (the Storage* attribute keys).
	StorageDriver = "offload.io"
	// StorageAttributeProvider, StorageAttributeProviderID,
	// StorageAttributeNamespace, StorageAttributeClaim and
	// StorageAttributeClass are the volume attributes of such a volume:
	// the provider's name and cluster ID, and the remote claim's namespace,
	// name and StorageClass.
	StorageAttributeProvider   = "provider"
	StorageAttributeProviderID = "providerClusterID"
	StorageAttributeNamespace  = "namespace"
	StorageAttributeClaim      = "claim"
	StorageAttributeClass      = "storageClass"
)
