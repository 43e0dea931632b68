package status

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// ErrPeerNotFound is wrapped by the error of `kubectl offload status peer`
// for a name without a ForeignCluster.
var ErrPeerNotFound = errors.New("no peer")

// conditionOrder is the order in which `status peer` shows the conditions
// of a ForeignCluster; others follow by type.
var conditionOrder = []string{
	offloadv1alpha1.ConditionAuthenticated,
	offloadv1alpha1.ConditionOutgoingPeering,
	offloadv1alpha1.ConditionIncomingPeering,
	offloadv1alpha1.ConditionVirtualNodeReady,
	offloadv1alpha1.ConditionNetworkReady,
}

// PeerOptions are the options of `kubectl offload status peer`.
type PeerOptions struct {
	genericiooptions.IOStreams

	// Name is the ForeignCluster to show.
	Name    string
	Output  output.Format
	Timeout time.Duration

	kube   kubernetes.Interface
	newEnv func() *Env
	// now is the clock of the report; nil means time.Now.
	now func() time.Time
}

// NewPeerOptions returns PeerOptions with defaults.
func NewPeerOptions(streams genericiooptions.IOStreams) *PeerOptions {
	return &PeerOptions{IOStreams: streams, Output: output.Table, Timeout: 30 * time.Second}
}

// Complete takes the peer's name from args and builds the clients.
func (o *PeerOptions) Complete(f factory.Factory, args []string) error {
	if len(args) > 0 {
		o.Name = args[0]
	}
	ns := f.Namespace()
	kube, err := f.KubeClient()
	if err != nil {
		return err
	}
	c, err := f.Client()
	if err != nil {
		return err
	}
	o.kube = kube
	o.newEnv = func() *Env {
		// The peer report reads no Helm release.
		env := NewEnv(kube, c, nil, ns)
		env.clock = o.now
		return env
	}
	return nil
}

// Validate checks the options.
func (o *PeerOptions) Validate() error {
	if o.Name == "" {
		return errors.New("a peer name is required: kubectl offload status lists the peers")
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", o.Timeout)
	}
	return o.Output.Validate()
}

// Run prints the report on the peer. It returns an exit error with code 1
// when a check failed, and an error wrapping ErrPeerNotFound when there is
// no such peer.
func (o *PeerOptions) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := Reachable(ctx, o.kube); err != nil {
		return err
	}
	env := o.newEnv()
	r, err := PeerReport(ctx, env, o.Name)
	if err != nil {
		return err
	}
	err = output.Write(o.Out, o.Output, r, func(w io.Writer) error {
		tty := output.IsTerminal(w)
		return writeTable(w, r, tty, tableWidth(w, tty))
	})
	if err != nil {
		return err
	}
	return r.Err()
}

// PeerReport returns the report on the peer called name: one section, peer,
// with its facts and one check per condition of its ForeignCluster. It
// returns an error wrapping ErrPeerNotFound when there is no such peer.
func PeerReport(ctx context.Context, env *Env, name string) (Report, error) {
	fc := &offloadv1alpha1.ForeignCluster{}
	err := env.Client.Get(ctx, client.ObjectKey{Name: name}, fc)
	switch {
	case meta.IsNoMatchError(err):
		return Report{}, fmt.Errorf("%w: run kubectl offload install", &errNoForeignClusterCRD{err: err})
	case apierrors.IsNotFound(err):
		return Report{}, fmt.Errorf("%w %q: kubectl offload status lists the peers", ErrPeerNotFound, name)
	case err != nil:
		return Report{}, fmt.Errorf("reading ForeignCluster %s: %w", name, err)
	}
	tenants, err := readTenants(ctx, env)
	if err != nil {
		return Report{}, err
	}
	p := completePeer(ctx, env, *fc, tenants)
	s := p.detail(env)
	s.Name = "peer"
	if fc.Spec.ClusterID != "" {
		ends, err := readTunnels(ctx, env, []offloadv1alpha1.ForeignCluster{*fc}, map[string]bool{fc.Spec.ClusterID: true})
		if err != nil {
			s.Checks = append(s.Checks, Fail("tunnels", "%v", err))
		} else if len(ends) > 0 {
			tunnels, checks := tunnelReports(ctx, env, ends, nil)
			s.Tunnels, s.Checks = tunnels, append(s.Checks, checks...)
			for _, rt := range tunnels {
				s.Fields = append(s.Fields, rt.fields(env.now())...)
			}
		}
	}
	if s.Checks == nil {
		s.Checks = []Check{}
	}
	s.Status = worst(s.Checks)
	r := Report{TypeMeta: reportType, Namespace: env.Namespace, Sections: []Section{s}}
	r.Healthy = r.Err() == nil
	return r, nil
}

// detail returns the section of `status peer`.
func (p *peer) detail(env *Env) Section {
	now := env.now()
	fc, st := p.fc, p.fc.Status
	s := Section{Title: "Peer " + fc.Name}
	field := func(name, label, value string) {
		s.Fields = append(s.Fields, Field{Name: name, Label: label, Value: value})
	}
	field("clusterID", "Cluster ID", fc.Spec.ClusterID)
	field("clusterName", "Cluster name", fc.Spec.ClusterName)
	field("role", "Role", string(st.Role))
	field("authURL", "Auth URL", fc.Spec.AuthURL)
	field("apiServerURL", "API server URL", cmp.Or(st.APIServerURL, fc.Spec.APIServerURL))
	field("caCertHash", "CA cert hash", fc.Spec.CACertHash)
	field("auth", "Auth", string(st.Auth))
	field("outgoing", "Outgoing", string(st.Outgoing))
	field("incoming", "Incoming", string(st.Incoming))
	field("network", "Network", string(st.Network))
	nodeName := ""
	if p.outgoing() || p.node != nil {
		nodeName = offloadv1alpha1.VirtualNodeName(fc.Name)
	}
	field("virtualNode", "Virtual node", nodeName)
	field("virtualNodeStatus", "Virtual node status", p.nodeState())
	if p.node != nil {
		alloc := p.node.Status.Allocatable
		field("allocatableCPU", "Allocatable CPU", quantity(alloc, corev1.ResourceCPU))
		field("allocatableMemory", "Allocatable memory", quantity(alloc, corev1.ResourceMemory))
		field("allocatablePods", "Allocatable pods", quantity(alloc, corev1.ResourcePods))
		field("allocatableExtendedResources", "Allocatable devices", cmp.Or(devicesText(alloc), "none"))
	}
	if pol := st.ProviderPolicy; pol != nil {
		field("podSecurity", "Pod Security there", string(pol.Level()))
		field("nodePlacement", "Node placement there", placementText(*pol))
		field("nodes", "Nodes there", nodesText(*pol))
		field("extendedResources", "Extended resources there", lentText(*pol))
		field("storage", "Storage there", peering.StorageString(pol.Storage))
		field("containerLimits", "Container limits there", limitsText(*pol))
	}
	field("credentialExpiry", "Credential expiry", timeText(st.CredentialExpiry, func(t time.Time) string { return expiryText(now, t) }))
	field("lastSeen", "Last seen", timeText(st.LastSeen, func(t time.Time) string { return ageText(now, t) }))
	if p.tenant != nil {
		field("tenantNamespace", "Tenant namespace", p.tenant.Spec.TenantNamespace)
		field("tenantCredentialExpiry", "Tenant credential expiry",
			timeText(p.tenant.Status.CredentialExpiry, func(t time.Time) string { return expiryText(now, t) }))
		field("tenantPodSecurity", "Tenant Pod Security", string(p.tenant.Spec.Policy.Level()))
		field("tenantNodePlacement", "Tenant node placement", placementText(p.tenant.Spec.Policy))
		field("tenantNodes", "Tenant nodes", nodesText(p.tenant.Spec.Policy))
		field("tenantExtendedResources", "Tenant extended resources", lentText(p.tenant.Spec.Policy))
		field("tenantStorage", "Tenant storage", peering.StorageString(p.tenant.Spec.Policy.Storage))
		field("tenantContainerLimits", "Tenant container limits", limitsText(p.tenant.Spec.Policy))
	}

	s.Checks = append(s.Checks, p.conditionChecks()...)
	if p.nodeErr != nil {
		s.Checks = append(s.Checks, Fail("virtualNode", "%v", p.nodeErr))
	}
	s.Checks = append(s.Checks, p.credentialChecks(env, now)...)
	s.Checks = append(s.Checks, p.policyChecks()...)
	if c, applies := p.unpeerCheck(); applies {
		s.Checks = append(s.Checks, c)
	}
	return s
}

// conditionChecks returns one check per condition of the ForeignCluster,
// named condition/TYPE: True is ok, False failed and Unknown a warning.
// OutgoingPeering and VirtualNodeReady are ok while outgoing peering is
// disabled, and NetworkReady while networking is, since they are then
// False on purpose; a pending NetworkReady is a warning. Unpeered is left
// to the unpeer check.
func (p *peer) conditionChecks() []Check {
	conds := append([]metav1.Condition{}, p.fc.Status.Conditions...)
	rank := func(t string) int {
		for i, o := range conditionOrder {
			if o == t {
				return i
			}
		}
		return len(conditionOrder)
	}
	sort.SliceStable(conds, func(i, j int) bool {
		ri, rj := rank(conds[i].Type), rank(conds[j].Type)
		if ri != rj {
			return ri < rj
		}
		return conds[i].Type < conds[j].Type
	})
	var out []Check
	for _, c := range conds {
		if c.Type == offloadv1alpha1.ConditionUnpeered {
			continue
		}
		name := "condition/" + c.Type
		disabled := !p.outgoing() && (c.Type == offloadv1alpha1.ConditionOutgoingPeering || c.Type == offloadv1alpha1.ConditionVirtualNodeReady) ||
			c.Type == offloadv1alpha1.ConditionNetworkReady && c.Reason == offloadv1alpha1.ReasonNetworkingDisabled
		// The network comes up after the peering: pending is not broken.
		pending := c.Type == offloadv1alpha1.ConditionNetworkReady && p.fc.Status.Network == offloadv1alpha1.PhasePending
		switch {
		case c.Status == metav1.ConditionTrue || (disabled && c.Status == metav1.ConditionFalse):
			out = append(out, OK(name, "%s", conditionText(c)))
		case pending:
			out = append(out, Warn(name, "%s", conditionText(c)))
		case c.Status == metav1.ConditionFalse:
			out = append(out, Fail(name, "%s", conditionText(c)))
		default:
			out = append(out, Warn(name, "%s", conditionText(c)))
		}
	}
	if len(out) == 0 && !p.deleting() {
		out = append(out, Warn("conditions", "the agent has not reported on peer %s yet: check its control plane with kubectl offload status", p.fc.Name))
	}
	return out
}

// conditionText renders c as "Type is Status (Reason): message".
func conditionText(c metav1.Condition) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s is %s", c.Type, c.Status)
	if c.Reason != "" {
		fmt.Fprintf(&b, " (%s)", c.Reason)
	}
	if c.Message != "" {
		fmt.Fprintf(&b, ": %s", c.Message)
	}
	return b.String()
}

// timeText renders t as RFC 3339 followed by rel(t) in brackets, or "" when t is nil.
func timeText(t *metav1.Time, rel func(time.Time) string) string {
	if t == nil {
		return ""
	}
	return fmt.Sprintf("%s (%s)", t.UTC().Format(time.RFC3339), rel(t.Time))
}

// quantity returns the quantity of resource r in l in the units kubectl
// shows, or "" when there is none: memory in Gi to one decimal (Mi below a
// Gi), cpu in cores or millicores, anything else as the API writes it. An
// offer is a share of free memory, which the API would write as
// 280677150Ki.
func quantity(l corev1.ResourceList, r corev1.ResourceName) string {
	q, found := l[r]
	if !found {
		return ""
	}
	switch r {
	case corev1.ResourceMemory:
		const mi, gi = 1 << 20, 1 << 30
		switch b := q.Value(); {
		case b >= gi:
			return strings.TrimSuffix(strconv.FormatFloat(float64(b)/gi, 'f', 1, 64), ".0") + "Gi"
		case b >= mi:
			return strconv.FormatInt(b/mi, 10) + "Mi"
		}
	case corev1.ResourceCPU:
		if m := q.MilliValue(); m%1000 != 0 {
			return strconv.FormatInt(m, 10) + "m"
		}
		return strconv.FormatInt(q.Value(), 10)
	}
	return q.String()
}

// devicesText lists the devices of l (offloadv1alpha1.Device), such as
// GPUs, as NAME=QUANTITY sorted by name: those a provider does not lend
// are at 0. It is "" when l has none.
func devicesText(l corev1.ResourceList) string {
	var out []string
	for r, q := range l {
		if offloadv1alpha1.Device(r) {
			out = append(out, string(r)+"="+q.String())
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// PeerNames returns the names of the ForeignClusters that start with
// prefix, for shell completion. It returns nothing when they cannot be read.
func PeerNames(ctx context.Context, c client.Client, prefix string) []string {
	list := &offloadv1alpha1.ForeignClusterList{}
	if err := c.List(ctx, list); err != nil {
		return nil
	}
	var out []string
	for _, fc := range list.Items {
		if strings.HasPrefix(fc.Name, prefix) {
			out = append(out, fc.Name)
		}
	}
	sort.Strings(out)
	return out
}
