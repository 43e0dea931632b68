package v1alpha1

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// PodSecurityLevel is a level of the Kubernetes Pod Security Standards.
// +kubebuilder:validation:Enum=privileged;baseline;restricted
type PodSecurityLevel string

// The Pod Security Standards levels a provider can enforce on a consumer.
const (
	// PodSecurityPrivileged enforces nothing: the consumer's pods may do
	// anything a pod may do, root on the provider's nodes included.
	PodSecurityPrivileged PodSecurityLevel = "privileged"
	// PodSecurityBaseline, the default, refuses privileged containers, host
	// namespaces, hostPath volumes, host ports and added capabilities
	// beyond the runtime's default set.
	PodSecurityBaseline PodSecurityLevel = "baseline"
	// PodSecurityRestricted adds to baseline: non-root, no privilege
	// escalation, a seccomp profile, every capability dropped.
	PodSecurityRestricted PodSecurityLevel = "restricted"
)

// PodSecurityLevels are the levels, from the most to the least permissive.
var PodSecurityLevels = []PodSecurityLevel{PodSecurityPrivileged, PodSecurityBaseline, PodSecurityRestricted}

// ParsePodSecurityLevel returns the level s names; empty means baseline.
func ParsePodSecurityLevel(s string) (PodSecurityLevel, bool) {
	if s == "" {
		return PodSecurityBaseline, true
	}
	for _, l := range PodSecurityLevels {
		if string(l) == s {
			return l, true
		}
	}
	return "", false
}

// ConsumerPolicy is what a provider lets one consumer's pods do on its
// nodes. The provider's API server enforces it in the consumer's twin
// namespaces, whoever sends the pod: the Pod Security level through the
// namespaces' pod-security.kubernetes.io labels, node placement through
// the chart's ValidatingAdmissionPolicy (PodPolicyName).
type ConsumerPolicy struct {
	// PodSecurity is the Pod Security Standards level enforced in the
	// consumer's twin namespaces. Empty means baseline.
	// +optional
	PodSecurity PodSecurityLevel `json:"podSecurity,omitempty"`
	// NodePlacement lets the consumer's pods pick provider nodes: set a
	// nodeName, tolerate any taint, select or prefer nodes by any label.
	// When false, the default, they tolerate only the not-ready and
	// unreachable NoExecute taints, select nodes only by PlacementLabels,
	// and never set a nodeName.
	// +optional
	NodePlacement bool `json:"nodePlacement,omitempty"`
	// SameNameNamespaces lets the consumer ask for twin namespaces named
	// as its own namespaces (namespace mapping strategy EnforceSameName),
	// except the names the provider reserves. When false, the default, its
	// twin namespaces are always named by TwinNamespace.
	// +optional
	SameNameNamespaces bool `json:"sameNameNamespaces,omitempty"`
	// UnlimitedContainers lets the consumer's containers run without
	// limits: one that sets no cpu, memory or ephemeral-storage limit
	// gets none, and one may set a limit above what is lent, so that it
	// uses the provider's idle capacity (what it uses beyond its requests
	// is reclaimed first: Kubernetes evicts it first under memory
	// pressure). When false, the default, the twin namespaces' LimitRange
	// gives a container that sets no limit the lent capacity as its limit,
	// and refuses one above it.
	// +optional
	UnlimitedContainers bool `json:"unlimitedContainers,omitempty"`
	// NodeSelector is the provider's choice of the nodes that run the
	// consumer's pods: every pod in the consumer's twin namespaces must
	// select nodes with these labels, node placement or not. The consumer's
	// agent adds it to the pods it sends; the provider's API server refuses
	// pods without it (PodNodesPolicyName), and the ResourceOffer counts
	// only the nodes it selects. Empty means every node.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations are the taints of the provider's nodes the consumer's
	// pods tolerate, so that nodes the provider taints for tenants serve
	// them. The consumer's agent adds them to the pods it sends; the
	// provider's API server lets its pods tolerate only these and the
	// not-ready and unreachable NoExecute taints (unless NodePlacement),
	// and the ResourceOffer counts only nodes whose NoSchedule and
	// NoExecute taints they tolerate. Each has a key; operator Exists
	// when it has no value.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// ExtendedResources are the extended resources of the provider's nodes
	// (vendor-domain/name, such as nvidia.com/gpu) that the consumer's pods
	// may use. The ResourceOffer lends the same share of each as of cpu,
	// and the twin namespaces' quotas cap them at it; the devices not
	// listed here the offer lists at 0 and the quotas hold at 0. Empty
	// means none is lent.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	ExtendedResources []corev1.ResourceName `json:"extendedResources,omitempty"`
	// Storage is the persistent storage lent to the consumer's pods: the
	// claims they mount are claims of the consumer's agent in its twin
	// namespaces, on this StorageClass and within this capacity. Nil, the
	// default, lends none: the twin namespaces hold no claim.
	// +optional
	Storage *StoragePolicy `json:"storage,omitempty"`
}

// StoragePolicy is the storage a provider lends one consumer. The
// provider's API server enforces it in the consumer's twin namespaces:
// the ResourceQuotas share Capacity and Claims as one budget across them,
// and the chart's ValidatingAdmissionPolicy (StoragePolicyName) holds
// every claim there to StorageClassName, with no volumeName, selector or
// data source, so that a claim never binds a volume it was not given.
type StoragePolicy struct {
	// StorageClassName is the provider's StorageClass of the consumer's claims.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	StorageClassName string `json:"storageClassName"`
	// Capacity is the total storage the consumer's claims may request.
	Capacity resource.Quantity `json:"capacity"`
	// Claims is the most claims the consumer may hold; 0 means DefaultStorageClaims.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Claims int32 `json:"claims,omitempty"`
}

// DefaultStorageClaims is how many claims a consumer may hold when its
// StoragePolicy does not say.
const DefaultStorageClaims = 100

// MaxClaims is the number of claims the policy allows.
func (s StoragePolicy) MaxClaims() int32 {
	if s.Claims <= 0 {
		return DefaultStorageClaims
	}
	return s.Claims
}

// StoragePolicyName is the chart's ValidatingAdmissionPolicy that holds
// the claims of twin namespaces to the lent StorageClass
// (AnnotationStorageClass).
const StoragePolicyName = "offload-tenant-claims"

// Equal reports whether s and t lend the same storage; nil lends none.
func (s *StoragePolicy) Equal(t *StoragePolicy) bool {
	if s == nil || t == nil {
		return s == t
	}
	return s.StorageClassName == t.StorageClassName && s.Capacity.Cmp(t.Capacity) == 0 && s.MaxClaims() == t.MaxClaims()
}

// Lends reports whether the policy lets the consumer's pods use resource
// r: every resource but the devices (Device) the policy does not list.
func (p ConsumerPolicy) Lends(r corev1.ResourceName) bool {
	return !Device(r) || slices.Contains(p.ExtendedResources, r)
}

// Level returns the policy's Pod Security level, baseline when unset.
func (p ConsumerPolicy) Level() PodSecurityLevel {
	if p.PodSecurity == "" {
		return PodSecurityBaseline
	}
	return p.PodSecurity
}

// Equal reports whether p and q are the same policy.
func (p ConsumerPolicy) Equal(q ConsumerPolicy) bool {
	return p.Level() == q.Level() && p.NodePlacement == q.NodePlacement && p.SameNameNamespaces == q.SameNameNamespaces &&
		p.UnlimitedContainers == q.UnlimitedContainers &&
		maps.Equal(p.NodeSelector, q.NodeSelector) &&
		slices.Equal(SortedResourceNames(p.ExtendedResources), SortedResourceNames(q.ExtendedResources)) &&
		p.Storage.Equal(q.Storage) &&
		slices.EqualFunc(p.Tolerations, q.Tolerations, func(a, b corev1.Toleration) bool {
			return a.MatchToleration(&b) && ptr.Equal(a.TolerationSeconds, b.TolerationSeconds)
		})
}

// PlacementLabels are the node labels a consumer's pods may always select
// or prefer nodes by, since they say what a workload can run on, not where:
// the operating system and the architecture.
var PlacementLabels = []string{"kubernetes.io/os", "kubernetes.io/arch"}

// Pod Security admission's namespace labels (k8s.io/pod-security-admission/api).
const (
	LabelPodSecurityEnforce        = "pod-security.kubernetes.io/enforce"
	LabelPodSecurityEnforceVersion = "pod-security.kubernetes.io/enforce-version"
	LabelPodSecurityWarn           = "pod-security.kubernetes.io/warn"
	LabelPodSecurityWarnVersion    = "pod-security.kubernetes.io/warn-version"
)

// LabelNodePlacement, set to NodePlacementAllowed on a twin namespace,
// exempts its pods from the node-placement rules of PodPolicyName. Only
// the provider's remotenamespace controller sets it, from the Tenant's
// policy; consumers cannot write namespaces.
const (
	LabelNodePlacement   = "offload.io/node-placement"
	NodePlacementAllowed = "allowed"
)

// AnnotationNodeSelector and AnnotationTolerations, on a consumer's twin
// namespaces, record its ConsumerPolicy's NodeSelector and Tolerations in
// the forms the chart's admission policies read: "key=value" pairs and
// tolerations written as TolerationString, comma-separated and sorted.
// Only the provider's remotenamespace controller sets them, from the
// Tenant's policy; consumers cannot write namespaces.
const (
	AnnotationNodeSelector = "offload.io/node-selector"
	AnnotationTolerations  = "offload.io/tolerations"
)

// AnnotationStorageClass, on a consumer's twin namespaces, names the
// StorageClass its claims must use (StoragePolicy); empty when the policy
// lends no storage. Only the provider's remotenamespace controller sets
// it; consumers cannot write namespaces.
const AnnotationStorageClass = "offload.io/storage-class"

// AnnotationPeeringToken names, on a Tenant, the peering token that last
// peered it; the auth service writes it, and never the Tenant's policy.
// AnnotationPolicyFromToken names the token whose policy the provider's
// controller-manager then gave the Tenant: it reads the policy from the
// token the provider's admin made, which the auth service cannot change.
const (
	AnnotationPeeringToken    = "offload.io/peering-token"
	AnnotationPolicyFromToken = "offload.io/policy-from-token"
)

// PendingPolicy is the policy of a Tenant the auth service makes, until
// the controller-manager gives it its token's: Pod Security restricted and
// nothing else, no more than any token grants.
func PendingPolicy() ConsumerPolicy { return ConsumerPolicy{PodSecurity: PodSecurityRestricted} }

// PodNodesPolicyName is the ValidatingAdmissionPolicy, and its binding,
// that keeps the pods of twin namespaces on the nodes their provider chose
// (AnnotationNodeSelector), node placement or not.
const PodNodesPolicyName = "offload-tenant-pod-nodes"

// AnnotationEndpointCIDRs, on a twin namespace, lists (comma-separated)
// the CIDRs the addresses of EndpointSlices its tenant writes must fall in:
// the provider's pod CIDRs, the provider's views of the consumer's pod
// CIDRs, and what the provider's admin adds. The provider's
// remotenamespace controller sets it and the chart's ValidatingAdmissionPolicy
// offload-tenant-endpoints enforces it; without it a tenant's EndpointSlice
// could point the provider's kube-proxy, ingress controllers or monitoring
// at its API server, its nodes or another tenant's pods.
const AnnotationEndpointCIDRs = "offload.io/endpoint-cidrs"

// PodRuntimePolicyName is the ValidatingAdmissionPolicy, and its binding,
// that keeps the pods of twin namespaces to what a stranger may run: the
// volume types the consumer's agent reflects, no provider ServiceAccount,
// no priority class but the cluster's defaults (AnnotationPriorityClasses),
// no runtime class or other scheduler, NET_RAW dropped. Twin namespaces at
// Pod Security level privileged are exempt.
const PodRuntimePolicyName = "offload-tenant-pod-runtime"

// AnnotationPriorityClasses, on a twin namespace, lists (comma-separated,
// sorted) the PriorityClasses its pods may name: the cluster's
// globalDefault ones, which the API server's Priority admission gives every
// pod that names none. The provider's remotenamespace controller sets it.
const AnnotationPriorityClasses = "offload.io/priority-classes"

// PodPolicyName is the ValidatingAdmissionPolicy, and its binding, that
// the chart installs on providers: in every namespace labelled
// LabelTenant, pods keep to the node-placement rules of ConsumerPolicy.
const PodPolicyName = "offload-tenant-pods"
