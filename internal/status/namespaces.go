package status

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// namespaceOffloadingCRD is the CRD of the NamespaceOffloadings.
var namespaceOffloadingCRD = "namespaceoffloadings." + offloadv1alpha1.GroupVersion.Group

// offloadedNamespaceColumns are the columns of the offloaded namespaces table.
var offloadedNamespaceColumns = []string{"NAMESPACE", "PEER", "REMOTE NAMESPACE", "PHASE", "STRATEGY", "PODS"}

// OffloadedNamespace is one namespace and one peer it is offloaded to, in
// the offloadedNamespaces section of the report. A namespace that no peer
// was selected for yet has one OffloadedNamespace without a cluster ID.
type OffloadedNamespace struct {
	// Namespace is the offloaded namespace in this cluster.
	Namespace string `json:"namespace"`
	// Peer is the name of the ForeignCluster of the peer; empty when no
	// ForeignCluster has its cluster ID.
	Peer string `json:"peer"`
	// ClusterID is the cluster ID of the peer.
	ClusterID string `json:"clusterID"`
	// RemoteNamespace is the twin namespace in the peer.
	RemoteNamespace string `json:"remoteNamespace"`
	// Phase is Pending, Ready, Failed or Terminating; Terminating while the
	// NamespaceOffloading is being deleted.
	Phase string `json:"phase"`
	// Message is what the agent says about the twin namespace.
	Message string `json:"message,omitempty"`
	// PodOffloadingStrategy is where the namespace's pods may run:
	// LocalAndRemote, Remote or Local.
	PodOffloadingStrategy string `json:"podOffloadingStrategy"`
	// PeerPods counts the namespace's pods on the peer's virtual node, out
	// of the TotalPods of the namespace.
	PeerPods  int `json:"peerPods"`
	TotalPods int `json:"totalPods"`
}

// offloadedNamespacesChecker lists the namespaces that span peers, one row
// per namespace and peer, and checks their twin namespaces.
type offloadedNamespacesChecker struct{}

func (offloadedNamespacesChecker) Name() string { return "offloadedNamespaces" }

func (offloadedNamespacesChecker) Check(ctx context.Context, env *Env) Section {
	s := Section{Title: "Offloaded namespaces"}
	list := &offloadv1alpha1.NamespaceOffloadingList{}
	if err := env.Client.List(ctx, list); err != nil {
		if MissingCRD(err) {
			s.Checks = append(s.Checks, Fail("offloadedNamespaces", "CRD %s not found: %s", namespaceOffloadingCRD, crdRemedy(env)))
		} else {
			s.Checks = append(s.Checks, Fail("offloadedNamespaces", "listing NamespaceOffloadings: %v", err))
		}
		return s
	}
	s.Table = &Table{Columns: offloadedNamespaceColumns, Rows: [][]string{}}
	if len(list.Items) == 0 {
		s.Checks = append(s.Checks, OK("offloadedNamespaces", "no offloaded namespaces: run kubectl offload namespace NS"))
		return s
	}
	peers, err := readPeerNames(ctx, env)
	if err != nil {
		s.Checks = append(s.Checks, Fail("offloadedNamespaces", "%v", err))
		return s
	}
	nodes, err := ReadVirtualNodes(ctx, env)
	if err != nil {
		s.Checks = append(s.Checks, Fail("offloadedNamespaces", "%v", err))
		return s
	}
	// The virtual nodes of each peer, by cluster ID.
	nodesOf := map[string][]string{}
	for _, n := range nodes {
		id := n.Labels[offloadv1alpha1.LabelRemoteClusterID]
		nodesOf[id] = append(nodesOf[id], n.Name)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Namespace < list.Items[j].Namespace })
	for i := range list.Items {
		no := &list.Items[i]
		pods, podsErr := env.Kube.CoreV1().Pods(no.Namespace).List(ctx, metav1.ListOptions{})
		if podsErr != nil {
			s.Checks = append(s.Checks, Fail("namespace/"+no.Namespace+"/pods", "listing the pods of namespace %s: %v", no.Namespace, podsErr))
			pods = nil
		}
		for _, on := range offloadedNamespaces(no, peers) {
			if pods != nil {
				on.countPods(pods.Items, nodesOf[on.ClusterID])
			}
			s.OffloadedNamespaces = append(s.OffloadedNamespaces, on)
			s.Table.Rows = append(s.Table.Rows, on.row(pods != nil))
			s.Checks = append(s.Checks, on.check(no))
		}
	}
	return s
}

// offloadedNamespaces returns the rows of no: one per peer, by peer, or one
// without a peer when none was selected yet.
func offloadedNamespaces(no *offloadv1alpha1.NamespaceOffloading, peers map[string]string) []OffloadedNamespace {
	base := OffloadedNamespace{Namespace: no.Namespace, PodOffloadingStrategy: string(no.Spec.PodOffloadingStrategy)}
	if len(no.Status.RemoteNamespaces) == 0 {
		base.Phase = string(offloadv1alpha1.RemoteNamespacePending)
		if c := meta.FindStatusCondition(no.Status.Conditions, offloadv1alpha1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
			base.Message = c.Message
		}
		if no.DeletionTimestamp != nil {
			base.Phase = string(offloadv1alpha1.RemoteNamespaceTerminating)
		}
		return []OffloadedNamespace{base}
	}
	out := make([]OffloadedNamespace, 0, len(no.Status.RemoteNamespaces))
	for _, rn := range no.Status.RemoteNamespaces {
		on := base
		on.Peer, on.ClusterID = peers[rn.ClusterID], rn.ClusterID
		on.RemoteNamespace, on.Phase, on.Message = rn.RemoteNamespace, string(rn.Phase), rn.Message
		if no.DeletionTimestamp != nil {
			on.Phase = string(offloadv1alpha1.RemoteNamespaceTerminating)
		}
		out = append(out, on)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].peerText() < out[j].peerText() })
	return out
}

// countPods counts pods, the pods of the namespace, and those of them on
// nodes, the virtual nodes of the peer.
func (on *OffloadedNamespace) countPods(pods []corev1.Pod, nodes []string) {
	on.TotalPods = len(pods)
	for _, p := range pods {
		for _, n := range nodes {
			if p.Spec.NodeName == n {
				on.PeerPods++
				break
			}
		}
	}
}

// peerText is the peer's name, or its cluster ID when no ForeignCluster has it.
func (on *OffloadedNamespace) peerText() string {
	if on.Peer != "" {
		return on.Peer
	}
	return on.ClusterID
}

// row returns the row of the offloaded namespaces table; counted is false
// when the namespace's pods could not be listed.
func (on *OffloadedNamespace) row(counted bool) []string {
	pods := none
	switch {
	case counted && on.ClusterID == "":
		pods = "-/" + strconv.Itoa(on.TotalPods)
	case counted:
		pods = strconv.Itoa(on.PeerPods) + "/" + strconv.Itoa(on.TotalPods)
	}
	return []string{on.Namespace, orNone(on.peerText()), orNone(on.RemoteNamespace), on.Phase, orNone(on.PodOffloadingStrategy), pods}
}

// check returns the verdict on the twin namespace: a Failed one fails,
// one that is Pending or Terminating is a warning.
func (on *OffloadedNamespace) check(no *offloadv1alpha1.NamespaceOffloading) Check {
	ns, peer := on.Namespace, on.peerText()
	describe := fmt.Sprintf("see kubectl describe namespaceoffloading %s -n %s", no.Name, ns)
	if peer == "" {
		name := "namespace/" + ns
		if on.Phase == string(offloadv1alpha1.RemoteNamespaceTerminating) {
			return Warn(name, "namespace %s is being unoffloaded", ns)
		}
		return Warn(name, "namespace %s is not offloaded to any peer yet: %s", ns,
			orElse(on.Message, "no virtual node matches its cluster selector; kubectl get nodes -l offload.io/type=virtual-node --show-labels lists them"))
	}
	name := "namespace/" + ns + "/" + peer
	switch offloadv1alpha1.RemoteNamespacePhase(on.Phase) {
	case offloadv1alpha1.RemoteNamespaceReady:
		return OK(name, "namespace %s is offloaded to peer %s as %s", ns, peer, on.RemoteNamespace)
	case offloadv1alpha1.RemoteNamespaceFailed:
		return Fail(name, "namespace %s failed to offload to peer %s: %s; %s, and run kubectl offload status peer %s",
			ns, peer, orElse(on.Message, "the agent gave no reason"), describe, peer)
	case offloadv1alpha1.RemoteNamespaceTerminating:
		return Warn(name, "namespace %s is being unoffloaded from peer %s: %s", ns, peer,
			orElse(on.Message, "waiting for the agent to delete "+orNone(on.RemoteNamespace)))
	}
	return Warn(name, "namespace %s is not offloaded to peer %s yet: %s", ns, peer,
		orElse(on.Message, "waiting for the agent to create the twin namespace; "+describe))
}

// orElse returns s, or fallback when s is empty.
func orElse(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}
