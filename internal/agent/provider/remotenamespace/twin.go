package remotenamespace

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

const (
	// QuotaName is the ResourceQuota of a twin namespace.
	QuotaName = "offload-quota"
	// LimitRangeName is the LimitRange of a twin namespace: it gives
	// containers without requests a zero request, which the quota needs.
	LimitRangeName = "offload-defaults"
)

// refusal is a request the controller will not serve as it stands.
type refusal struct{ message string }

func (e *refusal) Error() string { return e.message }

func refuse(format string, args ...any) error { return &refusal{message: fmt.Sprintf(format, args...)} }

// validate checks that rn comes from the consumer of the tenant namespace
// it lives in, for itself, and asks for a namespace it may have. It
// returns the tenant, or a *refusal.
func (r *Reconciler) validate(ctx context.Context, rn *offloadv1alpha1.RemoteNamespace) (*offloadv1alpha1.Tenant, error) {
	consumer, ok := strings.CutPrefix(rn.Namespace, offloadv1alpha1.TenantNamespacePrefix)
	if !ok || consumer == "" {
		return nil, refuse("namespace %s is not a tenant namespace: RemoteNamespaces are only served in %s<consumer> namespaces", rn.Namespace, offloadv1alpha1.TenantNamespacePrefix)
	}
	var t offloadv1alpha1.Tenant
	err := r.Client.Get(ctx, types.NamespacedName{Name: consumer}, &t)
	switch {
	case apierrors.IsNotFound(err):
		return nil, refuse("no tenant %s on this cluster: the consumer is not peered with it, peer it again", consumer)
	case err != nil:
		return nil, fmt.Errorf("reading tenant %s: %w", consumer, err)
	case t.Spec.TenantNamespace != rn.Namespace:
		return nil, refuse("namespace %s is not the tenant namespace of tenant %s (%s)", rn.Namespace, consumer, t.Spec.TenantNamespace)
	case !t.DeletionTimestamp.IsZero():
		return nil, refuse("tenant %s is being removed", consumer)
	case rn.Spec.ConsumerClusterID != t.Spec.ClusterID:
		return nil, refuse("consumerClusterID %q is not the ID of consumer %s: a consumer can only ask for twin namespaces for itself", rn.Spec.ConsumerClusterID, consumer)
	}
	if errs := validation.IsDNS1123Label(rn.Spec.SourceNamespace); len(errs) > 0 {
		return nil, refuse("sourceNamespace %q is not a namespace name: %s", rn.Spec.SourceNamespace, errs[0])
	}
	target := rn.Spec.TargetNamespace
	if errs := validation.IsDNS1123Label(target); len(errs) > 0 {
		return nil, refuse("targetNamespace %q is not a namespace name: %s", target, errs[0])
	}
	// The provider gives the names: the consumer's own only when it may.
	switch rn.Spec.MappingStrategy {
	case offloadv1alpha1.EnforceSameName:
		if !t.Spec.Policy.SameNameNamespaces {
			return nil, refuse("this provider does not let consumer %s name its twin namespaces (EnforceSameName): pick --namespace-mapping-strategy DefaultName, or ask the provider for kubectl offload peer generate --allow-same-name-namespaces", consumer)
		}
		if target != rn.Spec.SourceNamespace {
			return nil, refuse("targetNamespace %q is not sourceNamespace %q, as EnforceSameName asks", target, rn.Spec.SourceNamespace)
		}
	default:
		if want := offloadv1alpha1.TwinNamespace(rn.Spec.SourceNamespace, t.Spec.ClusterName, t.Spec.ClusterID); target != want {
			return nil, refuse("targetNamespace %q is not the DefaultName of namespace %s for consumer %s, %s: the provider names twin namespaces", target, rn.Spec.SourceNamespace, consumer, want)
		}
	}
	if r.isReserved(target) {
		return nil, refuse("namespace %s is reserved on the provider (Kubernetes, kubectl-offload, a tenant or the provider's own software uses it): pick --namespace-mapping-strategy DefaultName", target)
	}
	return &t, nil
}

// DefaultReservedNamespaces are the namespaces no consumer may have besides
// the Kubernetes ones, the install namespace and the tenant namespaces:
// those where common cluster software installs itself, so that a consumer
// cannot take one before the provider installs it.
var DefaultReservedNamespaces = []string{
	"cert-manager", "monitoring", "observability", "logging", "ingress-nginx", "istio-system", "linkerd",
	"gatekeeper-system", "kyverno", "argocd", "flux-system", "local-path-storage", "metallb-system",
	"tigera-operator", "calico-system", "cilium", "longhorn-system", "velero", "vault", "external-dns",
}

// isReserved says whether no consumer may have namespace ns: the
// Kubernetes namespaces, the install namespace, the tenant namespaces,
// DefaultReservedNamespaces and the Reserved ones.
func (r *Reconciler) isReserved(ns string) bool {
	return strings.HasPrefix(ns, "kube-") || ns == metav1.NamespaceDefault || ns == r.Namespace ||
		strings.HasPrefix(ns, offloadv1alpha1.TenantNamespacePrefix) ||
		slices.Contains(DefaultReservedNamespaces, ns) || slices.Contains(r.Reserved, ns)
}

// owns says whether namespace ns is the twin namespace rn asks for: made
// for the same source namespace of the same consumer, by a request of the
// same tenant namespace. The tenant is what counts, not the cluster ID it
// states: a namespace made for one tenant is never another's.
func owns(ns *corev1.Namespace, rn *offloadv1alpha1.RemoteNamespace) bool {
	return ns.Labels[offloadv1alpha1.LabelOriginClusterID] == rn.Spec.ConsumerClusterID &&
		ns.Labels[offloadv1alpha1.LabelOriginNamespace] == rn.Spec.SourceNamespace &&
		strings.HasPrefix(ns.Annotations[AnnotationRemoteNamespace], rn.Namespace+"/")
}

// managedMeta returns the metadata of an object the controller makes for rn.
func managedMeta(rn *offloadv1alpha1.RemoteNamespace, name, namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        name,
		Namespace:   namespace,
		Labels:      map[string]string{offloadv1alpha1.LabelOriginClusterID: rn.Spec.ConsumerClusterID},
		Annotations: map[string]string{AnnotationRemoteNamespace: rn.Namespace + "/" + rn.Name},
	}
}

// getNamespace reads namespace name, nil when there is none.
func (r *Reconciler) getNamespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	var ns corev1.Namespace
	err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &ns)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading namespace %s: %w", name, err)
	}
	return &ns, nil
}

// deleteNamespace deletes ns, and only the namespace read, not one made
// again under the same name since.
func deleteNamespace(ctx context.Context, c client.Client, ns *corev1.Namespace) error {
	err := c.Delete(ctx, ns, client.Preconditions{UID: &ns.UID})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting namespace %s: %w", ns.Name, err)
	}
	return nil
}

// ensureNamespace creates the twin namespace or adopts it. It returns an
// outcome when the request cannot go further now.
func (r *Reconciler) ensureNamespace(ctx context.Context, rn *offloadv1alpha1.RemoteNamespace, tenant *offloadv1alpha1.Tenant) (*outcome, error) {
	target := rn.Spec.TargetNamespace
	want := managedMeta(rn, target, "")
	want.Labels[offloadv1alpha1.LabelOriginNamespace] = rn.Spec.SourceNamespace
	want.Labels[offloadv1alpha1.LabelTenant] = tenant.Spec.ClusterID
	maps.Copy(want.Labels, PolicyLabels(tenant.Spec.Policy))
	addrs, err := r.addressesOf(ctx, tenant)
	if err != nil {
		return nil, err
	}
	want.Annotations[offloadv1alpha1.AnnotationEndpointCIDRs] = addrs.endpointCIDRs()
	maps.Copy(want.Annotations, PolicyAnnotations(tenant.Spec.Policy))
	defaults, err := r.defaultPriorityClasses(ctx)
	if err != nil {
		return nil, err
	}
	want.Annotations[offloadv1alpha1.AnnotationPriorityClasses] = defaults
	ns, err := r.getNamespace(ctx, target)
	if err != nil {
		return nil, err
	}
	if ns == nil {
		ns = &corev1.Namespace{ObjectMeta: want}
		if err := r.Client.Create(ctx, ns); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// The cache is behind: look again.
				return &outcome{phase: offloadv1alpha1.RemoteNamespacePending, reason: ReasonNamespaceTerminating, retry: retryWait,
					message: fmt.Sprintf("namespace %s appeared meanwhile: looking again", target)}, nil
			}
			return nil, fmt.Errorf("creating namespace %s: %w", target, err)
		}
		ctrl.LoggerFrom(ctx).Info("Created twin namespace", "namespace", target, "remoteNamespace", klog.KObj(rn))
		return nil, nil
	}
	if !owns(ns, rn) {
		hint := "delete or rename it on the provider"
		if rn.Spec.MappingStrategy == offloadv1alpha1.EnforceSameName {
			hint = "pick --namespace-mapping-strategy DefaultName"
		}
		return &outcome{phase: offloadv1alpha1.RemoteNamespaceFailed, reason: ReasonNamespaceTaken, retry: takenRetry,
			message: fmt.Sprintf("namespace %s already exists on the provider and belongs to someone else: %s", target, hint)}, nil
	}
	if !ns.DeletionTimestamp.IsZero() {
		return &outcome{phase: offloadv1alpha1.RemoteNamespacePending, reason: ReasonNamespaceTerminating, retry: retryWait,
			message: fmt.Sprintf("namespace %s is still being deleted: it is made again once it is gone", target)}, nil
	}
	// Adopt: add what an older agent, or a user, left out.
	if _, ok := ns.Annotations[AnnotationRemoteNamespace]; ok {
		delete(want.Annotations, AnnotationRemoteNamespace)
	}
	_, placement := ns.Labels[offloadv1alpha1.LabelNodePlacement]
	stalePlacement := placement && !tenant.Spec.Policy.NodePlacement
	if hasAll(ns.Labels, want.Labels) && hasAll(ns.Annotations, want.Annotations) && !stalePlacement {
		return nil, nil
	}
	patch := client.MergeFrom(ns.DeepCopy())
	ns.Labels = merged(ns.Labels, want.Labels)
	if stalePlacement {
		delete(ns.Labels, offloadv1alpha1.LabelNodePlacement)
	}
	ns.Annotations = merged(ns.Annotations, want.Annotations)
	if err := r.Client.Patch(ctx, ns, patch); err != nil {
		return nil, fmt.Errorf("labelling namespace %s: %w", target, err)
	}
	return nil, nil
}

// PolicyLabels are the labels of a twin namespace that make the provider's
// API server enforce policy: Pod Security admission's, at the policy's
// level and the API server's own version of the standards, and, when the
// tenant may place its pods, the exemption from the node-placement rules of
// the chart's ValidatingAdmissionPolicy.
func PolicyLabels(policy offloadv1alpha1.ConsumerPolicy) map[string]string {
	level := string(policy.Level())
	labels := map[string]string{
		offloadv1alpha1.LabelPodSecurityEnforce:        level,
		offloadv1alpha1.LabelPodSecurityEnforceVersion: "latest",
		offloadv1alpha1.LabelPodSecurityWarn:           level,
		offloadv1alpha1.LabelPodSecurityWarnVersion:    "latest",
	}
	if policy.NodePlacement {
		labels[offloadv1alpha1.LabelNodePlacement] = offloadv1alpha1.NodePlacementAllowed
	}
	return labels
}

// PolicyAnnotations are the annotations of a twin namespace that tell the
// chart's ValidatingAdmissionPolicies which nodes the tenant's pods must
// select, which taints they may tolerate and which StorageClass its claims
// use. They are always set, empty
// when the policy has none, so that a policy that drops them clears them.
func PolicyAnnotations(policy offloadv1alpha1.ConsumerPolicy) map[string]string {
	class := ""
	if policy.Storage != nil {
		class = policy.Storage.StorageClassName
	}
	return map[string]string{
		offloadv1alpha1.AnnotationNodeSelector: offloadv1alpha1.NodeSelectorString(policy.NodeSelector),
		offloadv1alpha1.AnnotationTolerations:  offloadv1alpha1.TolerationsString(policy.Tolerations),
		offloadv1alpha1.AnnotationStorageClass: class,
	}
}

// defaultPriorityClasses lists, comma-separated and sorted, the cluster's
// globalDefault PriorityClasses: the API server's Priority admission gives
// one of them to every pod that names none, so a tenant's pods may carry it
// (AnnotationPriorityClasses), and no other.
func (r *Reconciler) defaultPriorityClasses(ctx context.Context) (string, error) {
	var list schedulingv1.PriorityClassList
	if err := r.Client.List(ctx, &list); err != nil {
		return "", fmt.Errorf("listing PriorityClasses: %w", err)
	}
	var names []string
	for _, pc := range list.Items {
		if pc.GlobalDefault {
			names = append(names, pc.Name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ","), nil
}

func hasAll(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func merged(base, extra map[string]string) map[string]string {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, extra)
	return out
}

// offer returns the ResourceOffer in the tenant namespace, nil when there
// is none. A provider publishes one per tenant; should there be more, the
// first by name wins, so the choice is stable.
func (r *Reconciler) offer(ctx context.Context, tenantNamespace string) (*offloadv1alpha1.ResourceOffer, error) {
	var list offloadv1alpha1.ResourceOfferList
	if err := r.Client.List(ctx, &list, client.InNamespace(tenantNamespace)); err != nil {
		return nil, fmt.Errorf("listing the ResourceOffers of namespace %s: %w", tenantNamespace, err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp.IsZero() {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// ObjectLimits cap the objects of a twin namespace besides pods: a consumer
// cannot fill the provider's etcd, and never gets a NodePort or a load
// balancer (the offload-tenant-services admission policy refuses them too).
var ObjectLimits = corev1.ResourceList{
	corev1.ResourceServices:              resource.MustParse("100"),
	corev1.ResourceServicesNodePorts:     resource.MustParse("0"),
	corev1.ResourceServicesLoadBalancers: resource.MustParse("0"),
	corev1.ResourceConfigMaps:            resource.MustParse("500"),
	corev1.ResourceSecrets:               resource.MustParse("500"),
	// The default ServiceAccount, the only one a tenant's pods may run as
	// (offload-tenant-pod-runtime), and a few for the provider's add-ons.
	"count/serviceaccounts":                 resource.MustParse("10"),
	"count/endpointslices.discovery.k8s.io": resource.MustParse("500"),
	// No storage unless the policy lends some (QuotaFor).
	corev1.ResourcePersistentVolumeClaims:               resource.MustParse("0"),
	corev1.ResourceRequestsStorage:                      resource.MustParse("0"),
	corev1.ResourceName("count/replicationcontrollers"): resource.MustParse("0"),
}

// QuotaFor returns the hard limits of a twin namespace's ResourceQuota for
// the resources of an offer: the sum of the pods' cpu, memory and
// ephemeral storage requests, and their number, the requests of the
// devices the offer lists (offloadv1alpha1.Device): what the policy lends
// at the offer's share, the others at 0, so that a pod that asks for one
// is refused, the storage the policy lends (requests.storage and the
// number of claims; none when storage is nil), and
// ObjectLimits, with room for one more Secret per offered pod: each
// offloaded pod that uses a service-account token has a token Secret of its
// own, so a Secret cap alone would cap the pods.
// Limits are not capped: a quota on limits would refuse every pod that
// sets none.
func QuotaFor(offered corev1.ResourceList, storage *offloadv1alpha1.StoragePolicy) corev1.ResourceList {
	hard := ObjectLimits.DeepCopy()
	if storage != nil {
		hard[corev1.ResourceRequestsStorage] = storage.Capacity.DeepCopy()
		hard[corev1.ResourcePersistentVolumeClaims] = *resource.NewQuantity(int64(storage.MaxClaims()), resource.DecimalSI)
	}
	for from, to := range map[corev1.ResourceName]corev1.ResourceName{
		corev1.ResourceCPU:              corev1.ResourceRequestsCPU,
		corev1.ResourceMemory:           corev1.ResourceRequestsMemory,
		corev1.ResourcePods:             corev1.ResourcePods,
		corev1.ResourceEphemeralStorage: corev1.ResourceRequestsEphemeralStorage,
	} {
		if q, ok := offered[from]; ok {
			hard[to] = q.DeepCopy()
		}
	}
	for r, q := range offered {
		if offloadv1alpha1.Device(r) {
			hard[corev1.ResourceName(corev1.DefaultResourceRequestsPrefix+string(r))] = q.DeepCopy()
		}
	}
	if pods, ok := offered[corev1.ResourcePods]; ok {
		secrets := hard[corev1.ResourceSecrets]
		secrets.Add(pods)
		hard[corev1.ResourceSecrets] = secrets
	}
	return hard
}

func (r *Reconciler) ensureQuota(ctx context.Context, rn *offloadv1alpha1.RemoteNamespace, offer *offloadv1alpha1.ResourceOffer, storage *offloadv1alpha1.StoragePolicy) error {
	elsewhere, err := r.usedElsewhere(ctx, rn)
	if err != nil {
		return err
	}
	want := &corev1.ResourceQuota{ObjectMeta: managedMeta(rn, QuotaName, rn.Spec.TargetNamespace),
		Spec: corev1.ResourceQuotaSpec{Hard: BudgetFor(offer.Spec.Resources, storage, elsewhere)}}
	return ensureObject(ctx, r.Client, want, &corev1.ResourceQuota{}, func(have *corev1.ResourceQuota) bool {
		if sameResources(have.Spec.Hard, want.Spec.Hard) && have.Spec.Scopes == nil && have.Spec.ScopeSelector == nil {
			return false
		}
		have.Spec = want.Spec
		return true
	})
}

// DefaultRequests are what a container that asks for no cpu or memory is
// given in a twin namespace, so that it counts against the offer: a
// consumer cannot run unbounded numbers of free pods on the provider.
var DefaultRequests = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("100m"),
	corev1.ResourceMemory: resource.MustParse("128Mi"),
	// Nothing, so that a pod fits nodes that report no ephemeral storage
	// (the scheduler refuses any request there); the quota needs a request.
	corev1.ResourceEphemeralStorage: resource.MustParse("0"),
}

// LimitRangeFor returns the LimitRange of a twin namespace: containers
// without cpu, memory or ephemeral storage requests get DefaultRequests,
// which the quota needs to admit them and which count against the offer;
// unless unlimited (the policy's UnlimitedContainers), no container may
// use more cpu, memory or ephemeral storage than offered (Max), and one
// that sets no limit gets that as its limit (Default, which the API server
// would set to Max anyway): a tenant's container never bursts past what
// was lent.
func LimitRangeFor(offered corev1.ResourceList, unlimited bool) corev1.LimitRangeSpec {
	most := corev1.ResourceList{}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		// An offer below the default request has no room for a container
		// anyway (the quota refuses it), and a LimitRange whose maximum is
		// below its default request is invalid.
		if q, ok := offered[r]; ok && q.Sign() > 0 && q.Cmp(DefaultRequests[r]) >= 0 {
			most[r] = q.DeepCopy()
		}
	}
	item := corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, DefaultRequest: DefaultRequests.DeepCopy()}
	if len(most) > 0 && !unlimited {
		item.Max, item.Default = most, most.DeepCopy()
	}
	return corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{item}}
}

func (r *Reconciler) ensureLimitRange(ctx context.Context, rn *offloadv1alpha1.RemoteNamespace, offer *offloadv1alpha1.ResourceOffer, unlimited bool) error {
	want := &corev1.LimitRange{ObjectMeta: managedMeta(rn, LimitRangeName, rn.Spec.TargetNamespace), Spec: LimitRangeFor(offer.Spec.Resources, unlimited)}
	return ensureObject(ctx, r.Client, want, &corev1.LimitRange{}, func(have *corev1.LimitRange) bool {
		if equality.Semantic.DeepEqual(have.Spec, want.Spec) {
			return false
		}
		have.Spec = want.Spec
		return true
	})
}

// ensureRoleBinding binds RemoteWorkloadsRole to the consumer's
// ServiceAccount in the twin namespace. A RoleBinding of that name that
// refers to another role is replaced, since roleRef cannot change.
func (r *Reconciler) ensureRoleBinding(ctx context.Context, rn *offloadv1alpha1.RemoteNamespace) error {
	want := &rbacv1.RoleBinding{
		ObjectMeta: managedMeta(rn, RoleBindingName, rn.Spec.TargetNamespace),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: RemoteWorkloadsRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: rn.Namespace}},
	}
	var have rbacv1.RoleBinding
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), &have)
	if err == nil && have.RoleRef != want.RoleRef {
		if err := r.Client.Delete(ctx, &have, client.Preconditions{UID: &have.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting RoleBinding %s, which binds another role: %w", klog.KObj(&have), err)
		}
		err = apierrors.NewNotFound(rbacv1.Resource("rolebindings"), want.Name)
	}
	if apierrors.IsNotFound(err) {
		if err := r.Client.Create(ctx, want); err != nil {
			return fmt.Errorf("creating RoleBinding %s: %w", klog.KObj(want), err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading RoleBinding %s: %w", klog.KObj(want), err)
	}
	if equality.Semantic.DeepEqual(have.Subjects, want.Subjects) && hasAll(have.Labels, want.Labels) {
		return nil
	}
	have.Subjects = want.Subjects
	have.Labels = merged(have.Labels, want.Labels)
	have.Annotations = merged(have.Annotations, want.Annotations)
	if err := r.Client.Update(ctx, &have); err != nil {
		return fmt.Errorf("updating RoleBinding %s: %w", klog.KObj(want), err)
	}
	return nil
}

// ensureObject creates want, or reads it into have and updates it when fix
// changes it.
func ensureObject[T client.Object](ctx context.Context, c client.Client, want, have T, fix func(T) bool) error {
	err := c.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		if err := c.Create(ctx, want); err != nil {
			return fmt.Errorf("creating %T %s: %w", want, klog.KObj(want), err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %T %s: %w", want, klog.KObj(want), err)
	}
	changed := fix(have)
	if !hasAll(have.GetLabels(), want.GetLabels()) {
		have.SetLabels(merged(have.GetLabels(), want.GetLabels()))
		have.SetAnnotations(merged(have.GetAnnotations(), want.GetAnnotations()))
		changed = true
	}
	if !changed {
		return nil
	}
	if err := c.Update(ctx, have); err != nil {
		return fmt.Errorf("updating %T %s: %w", want, klog.KObj(want), err)
	}
	return nil
}

// sameResources compares quantities by value, so "1" and "1000m" are equal.
func sameResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		other, ok := b[name]
		if !ok || q.Cmp(other) != 0 {
			return false
		}
	}
	return true
}
