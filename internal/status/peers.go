package status

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// foreignClusterCRD is the CRD every peer is an object of.
var foreignClusterCRD = "foreignclusters." + offloadv1alpha1.GroupVersion.Group

// expiryWarning is how close to their expiry credentials make a warning.
const expiryWarning = time.Hour

// The states of a virtual node, as the VIRTUAL NODE column shows them.
const (
	nodeReady    = "Ready"
	nodeNotReady = "NotReady"
	nodeMissing  = "Missing"
)

// none stands in for an empty cell of the peers table.
const none = "-"

// peerColumns are the columns of the peers table.
var peerColumns = []string{"NAME", "CLUSTER ID", "ROLE", "AUTH", "OUTGOING", "INCOMING", "VIRTUAL NODE", "CREDENTIALS", "LAST SEEN"}

// peer is what the status commands read about one ForeignCluster.
type peer struct {
	fc offloadv1alpha1.ForeignCluster
	// tenant is this cluster's record of the peer as a consumer, if any.
	tenant *offloadv1alpha1.Tenant
	// node is the virtual node; it is only looked up when outgoing peering is enabled.
	node    *corev1.Node
	nodeErr error
}

func (p *peer) outgoing() bool { return p.fc.Spec.OutgoingPeering.Enabled }

func (p *peer) deleting() bool { return p.fc.DeletionTimestamp != nil }

// condition returns the ForeignCluster's condition of type t, or nil.
func (p *peer) condition(t string) *metav1.Condition {
	return meta.FindStatusCondition(p.fc.Status.Conditions, t)
}

// reason returns the message of condition t when it is not True, and
// otherwise fallback: what the agent says is wrong, or where to look.
func (p *peer) reason(t, fallback string) string {
	if c := p.condition(t); c != nil && c.Status != metav1.ConditionTrue && c.Message != "" {
		return c.Message
	}
	return fallback
}

// nodeState returns Ready, NotReady or Missing for the virtual node, or ""
// when outgoing peering is disabled and there is none.
func (p *peer) nodeState() string {
	switch {
	case p.node != nil && nodeIsReady(p.node):
		return nodeReady
	case p.node != nil:
		return nodeNotReady
	case p.outgoing() && p.nodeErr == nil:
		return nodeMissing
	}
	return ""
}

func nodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// errNoForeignClusterCRD says that ForeignClusters cannot be read because
// their CRD is missing: kubectl-offload is not installed.
type errNoForeignClusterCRD struct{ err error }

func (e *errNoForeignClusterCRD) Error() string {
	return fmt.Sprintf("CRD %s not found", foreignClusterCRD)
}

func (e *errNoForeignClusterCRD) Unwrap() error { return e.err }

// MissingCRD reports whether err means that the CRD of what was read does
// not exist: the REST mapper does not know the kind, or the API server no
// longer serves it.
func MissingCRD(err error) bool { return meta.IsNoMatchError(err) || apierrors.IsNotFound(err) }

// readPeers returns every ForeignCluster, sorted by name, with its Tenant
// and, when outgoing peering is enabled, its virtual node.
func readPeers(ctx context.Context, env *Env) ([]*peer, error) {
	fcs, err := env.ForeignClusters(ctx)
	if err != nil {
		if MissingCRD(err) {
			return nil, &errNoForeignClusterCRD{err: err}
		}
		return nil, err
	}
	tenants, err := readTenants(ctx, env)
	if err != nil {
		return nil, err
	}
	peers := make([]*peer, 0, len(fcs))
	for _, fc := range fcs {
		peers = append(peers, completePeer(ctx, env, fc, tenants))
	}
	return peers, nil
}

// completePeer adds the Tenant and the virtual node of fc.
func completePeer(ctx context.Context, env *Env, fc offloadv1alpha1.ForeignCluster, tenants []offloadv1alpha1.Tenant) *peer {
	p := &peer{fc: fc}
	for i := range tenants {
		if fc.Spec.ClusterID != "" && tenants[i].Spec.ClusterID == fc.Spec.ClusterID {
			p.tenant = &tenants[i]
			break
		}
	}
	if p.outgoing() {
		name := offloadv1alpha1.VirtualNodeName(fc.Name)
		node, err := env.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			p.nodeErr = fmt.Errorf("reading node %s: %w", name, err)
		default:
			p.node = node
		}
	}
	return p
}

// readTenants returns every Tenant; none when their CRD is missing, which
// the CRDs section reports.
func readTenants(ctx context.Context, env *Env) ([]offloadv1alpha1.Tenant, error) {
	list := &offloadv1alpha1.TenantList{}
	err := env.Client.List(ctx, list)
	switch {
	case MissingCRD(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing Tenants: %w", err)
	}
	return list.Items, nil
}

// peersChecker lists the peers of this cluster and checks each one.
type peersChecker struct{}

func (peersChecker) Name() string { return "peers" }

func (peersChecker) Check(ctx context.Context, env *Env) Section {
	s := Section{Title: "Peers"}
	peers, err := readPeers(ctx, env)
	var noCRD *errNoForeignClusterCRD
	switch {
	case errors.As(err, &noCRD):
		s.Checks = append(s.Checks, Fail("peers", "%v: %s", noCRD, crdRemedy(env)))
		return s
	case err != nil:
		s.Checks = append(s.Checks, Fail("peers", "%v", err))
		return s
	}
	s.Table = &Table{Columns: peerColumns, Rows: [][]string{}}
	if len(peers) == 0 {
		s.Checks = append(s.Checks, OK("peers", "no peers yet: run kubectl offload peer generate on a provider"))
		return s
	}
	now := env.now()
	for _, p := range peers {
		s.Table.Rows = append(s.Table.Rows, p.row(now))
		s.Checks = append(s.Checks, p.checks(env, now)...)
	}
	return s
}

// row returns the peer's row of the peers table.
func (p *peer) row(now time.Time) []string {
	st := p.fc.Status
	node := p.nodeState()
	if !p.outgoing() || node == "" {
		node = none
	}
	creds := none
	if exp := p.shownExpiry(); exp != nil {
		creds = expiryText(now, exp.Time)
	}
	seen := none
	if st.LastSeen != nil {
		seen = ageText(now, st.LastSeen.Time)
	}
	return []string{p.fc.Name, orNone(p.fc.Spec.ClusterID), orNone(string(st.Role)), orNone(string(st.Auth)),
		orNone(string(st.Outgoing)), orNone(string(st.Incoming)), node, creds, seen}
}

// shownExpiry returns the credential expiry of the CREDENTIALS column: that
// of the credentials this cluster holds for the peer, when it consumes the
// peer or holds some, and otherwise that of the credentials the peer holds
// as a consumer of this cluster.
func (p *peer) shownExpiry() *metav1.Time {
	if p.outgoing() || p.fc.Status.CredentialExpiry != nil {
		return p.fc.Status.CredentialExpiry
	}
	if p.tenant != nil {
		return p.tenant.Status.CredentialExpiry
	}
	return nil
}

// checks returns the verdicts on the peer for the peers section. Their
// names start with peer/NAME/.
func (p *peer) checks(env *Env, now time.Time) []Check {
	var out []Check
	prefix := "peer/" + p.fc.Name + "/"
	if c, applies := p.authCheck(); applies {
		out = append(out, c)
	}
	if c, applies := p.virtualNodeCheck(env); applies {
		out = append(out, c)
	}
	out = append(out, p.credentialChecks(env, now)...)
	out = append(out, p.policyChecks()...)
	if c, applies := p.unpeerCheck(); applies {
		out = append(out, c)
	}
	for i := range out {
		out[i].Name = prefix + out[i].Name
	}
	return out
}

// authCheck checks that this cluster obtained credentials from the peer.
// It applies when outgoing peering is enabled or the agent tried anyway.
func (p *peer) authCheck() (Check, bool) {
	name, phase := p.fc.Name, p.fc.Status.Auth
	if !p.outgoing() && (phase == "" || phase == offloadv1alpha1.PhaseNone) {
		return Check{}, false
	}
	describe := "see kubectl describe foreigncluster " + name
	switch phase {
	case offloadv1alpha1.PhaseEstablished:
		return OK("auth", "peer %s is authenticated", name), true
	case offloadv1alpha1.PhaseFailed:
		return Fail("auth", "peer %s failed to authenticate: %s", name, p.reason(offloadv1alpha1.ConditionAuthenticated, describe)), true
	case offloadv1alpha1.PhaseDisconnected:
		return Warn("auth", "peer %s is disconnected: %s", name, p.reason(offloadv1alpha1.ConditionAuthenticated, describe)), true
	}
	return Warn("auth", "peer %s is not authenticated yet: %s", name,
		p.reason(offloadv1alpha1.ConditionAuthenticated, "the agent has not exchanged the peering token with the peer yet")), true
}

// virtualNodeCheck checks that the virtual node of an authenticated peer
// this cluster consumes is Ready. It does not apply while the peer is
// being unpeered, when the node is going away.
func (p *peer) virtualNodeCheck(env *Env) (Check, bool) {
	if !p.outgoing() || p.fc.Status.Auth != offloadv1alpha1.PhaseEstablished || p.deleting() {
		return Check{}, false
	}
	node := offloadv1alpha1.VirtualNodeName(p.fc.Name)
	why := p.reason(offloadv1alpha1.ConditionVirtualNodeReady,
		fmt.Sprintf("see kubectl logs -n %s deployment/%s", env.Namespace, offloadv1alpha1.ControllerManager))
	switch p.nodeState() {
	case nodeReady:
		return OK("virtualNode", "virtual node %s is Ready", node), true
	case nodeNotReady:
		return Fail("virtualNode", "virtual node %s is not Ready: %s", node, why), true
	case nodeMissing:
		return Fail("virtualNode", "virtual node %s not found: %s", node, why), true
	}
	return Fail("virtualNode", "%v", p.nodeErr), true
}

// credentialChecks check the expiry of the credentials this cluster holds
// for the peer (credentials) and of those the peer holds as a consumer of
// this cluster (tenantCredentials), when they are known.
func (p *peer) credentialChecks(env *Env, now time.Time) []Check {
	var out []Check
	name := p.fc.Name
	if exp := p.fc.Status.CredentialExpiry; exp != nil {
		logs := fmt.Sprintf("see kubectl logs -n %s deployment/%s", env.Namespace, offloadv1alpha1.ControllerManager)
		left := exp.Sub(now)
		switch {
		case left <= 0:
			out = append(out, Fail("credentials", "the credentials for peer %s expired %s ago: the agent did not rotate them; %s, or peer again with kubectl offload peer out-of-band",
				name, duration.HumanDuration(-left), logs))
		case left < expiryWarning:
			out = append(out, Warn("credentials", "the credentials for peer %s expire in %s: the agent rotates them before then; if it does not, %s",
				name, duration.HumanDuration(left), logs))
		default:
			out = append(out, OK("credentials", "the credentials for peer %s expire in %s", name, duration.HumanDuration(left)))
		}
	}
	if p.tenant != nil {
		if c := meta.FindStatusCondition(p.tenant.Status.Conditions, offloadv1alpha1.ConditionCredentialReplayed); c != nil && c.Status == metav1.ConditionTrue {
			return append(out, Fail("tenantCredentials", "%s (since %s)", c.Message, c.LastTransitionTime.UTC().Format(time.RFC3339)))
		}
	}
	if p.tenant != nil && p.tenant.Status.CredentialExpiry != nil {
		left := p.tenant.Status.CredentialExpiry.Sub(now)
		switch {
		case left <= 0:
			out = append(out, Fail("tenantCredentials", "the credentials consumer %s holds for this cluster expired %s ago: its agent did not refresh them; run kubectl offload status on %s, or peer it again",
				name, duration.HumanDuration(-left), name))
		case left < expiryWarning:
			out = append(out, Warn("tenantCredentials", "the credentials consumer %s holds for this cluster expire in %s: its agent refreshes them before then; if it does not, run kubectl offload status on %s",
				name, duration.HumanDuration(left), name))
		default:
			out = append(out, OK("tenantCredentials", "the credentials consumer %s holds for this cluster expire in %s", name, duration.HumanDuration(left)))
		}
	}
	return out
}

// unpeerCheck warns while the peer is being unpeered, with what the agent
// says holds it up.
func (p *peer) unpeerCheck() (Check, bool) {
	if !p.deleting() {
		return Check{}, false
	}
	return Warn("unpeer", "peer %s is being unpeered: %s", p.fc.Name,
		p.reason(offloadv1alpha1.ConditionUnpeered, "waiting for the agent to remove it")), true
}

// expiryText says when t comes relative to now, such as "expires in 23h"
// or "expired 5m ago".
func expiryText(now, t time.Time) string {
	if left := t.Sub(now); left > 0 {
		return "expires in " + duration.HumanDuration(left)
	}
	return "expired " + duration.HumanDuration(now.Sub(t)) + " ago"
}

// ageText says how long ago t was, such as "5m ago"; a t in the future,
// from clock skew, counts as now.
func ageText(now, t time.Time) string {
	return duration.HumanDuration(max(now.Sub(t), 0)) + " ago"
}

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

// placementText says whether a policy lets a consumer pick the provider's nodes.
func placementText(p offloadv1alpha1.ConsumerPolicy) string {
	if p.NodePlacement {
		return "allowed"
	}
	return "not allowed"
}

// limitsText says how a policy limits a consumer's containers.
func limitsText(p offloadv1alpha1.ConsumerPolicy) string {
	if p.UnlimitedContainers {
		return "none: containers may use idle capacity"
	}
	return "what is lent"
}

// nodesText says which of the provider's nodes run a consumer's pods under p.
func nodesText(p offloadv1alpha1.ConsumerPolicy) string {
	out := "any node"
	if len(p.NodeSelector) > 0 {
		out = "nodes labelled " + offloadv1alpha1.NodeSelectorString(p.NodeSelector)
	}
	if len(p.Tolerations) > 0 {
		out += ", tolerating " + offloadv1alpha1.TolerationsString(p.Tolerations)
	}
	return out
}

// lentText names the extended resources p lends, or says none is.
func lentText(p offloadv1alpha1.ConsumerPolicy) string {
	if len(p.ExtendedResources) == 0 {
		return "none"
	}
	names := make([]string, 0, len(p.ExtendedResources))
	for _, r := range offloadv1alpha1.SortedResourceNames(p.ExtendedResources) {
		names = append(names, string(r))
	}
	return strings.Join(names, ", ")
}

// lentList says what p lends besides cpu, memory and pods: its extended
// resources and its storage; empty when nothing.
func lentList(p offloadv1alpha1.ConsumerPolicy) string {
	var lent []string
	if len(p.ExtendedResources) > 0 {
		lent = append(lent, lentText(p))
	}
	if p.Storage != nil {
		lent = append(lent, peering.StorageString(p.Storage))
	}
	return strings.Join(lent, " and ")
}

// policyChecks say what each side lets the other's pods do: the policy the
// peer applies to this cluster's pods (policy), known once the virtual node
// read the peer's offer, and the one this cluster applies to the peer's
// pods (tenantPolicy). Both are choices, not faults: they are ok.
func (p *peer) policyChecks() []Check {
	var out []Check
	if pol := p.fc.Status.ProviderPolicy; pol != nil && p.outgoing() {
		c := OK("policy", "peer %s runs this cluster's pods on %s at Pod Security %s; node placement %s",
			p.fc.Name, nodesText(*pol), pol.Level(), placementText(*pol))
		if lent := lentList(*pol); lent != "" {
			c.Message += "; it lends " + lent
		}
		out = append(out, c)
	}
	if p.tenant != nil {
		pol := p.tenant.Spec.Policy
		c := OK("tenantPolicy", "this cluster runs the pods of consumer %s on %s at Pod Security %s; node placement %s",
			p.fc.Name, nodesText(pol), pol.Level(), placementText(pol))
		if lent := lentList(pol); lent != "" {
			c.Message += "; this cluster lends it " + lent
		}
		if pol.Level() == offloadv1alpha1.PodSecurityPrivileged {
			c.Message += ": its pods may run privileged, as root on this cluster's nodes"
		}
		out = append(out, c)
	}
	return out
}
