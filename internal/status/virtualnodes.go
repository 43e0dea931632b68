package status

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/duration"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// nodeUnknown is the state of a virtual node whose Ready condition is
// Unknown or missing; nodeReady and nodeNotReady are in peers.go.
const nodeUnknown = "Unknown"

// virtualNodeColumns are the columns of the virtual nodes table.
var virtualNodeColumns = []string{"NAME", "PEER", "READY", "CPU", "MEMORY", "PODS", "RUNNING", "AGE"}

// VirtualNode is one virtual node in the virtualNodes section of the report.
type VirtualNode struct {
	// Name is the name of the Node.
	Name string `json:"name"`
	// Peer is the name of the ForeignCluster of the node's peer; empty when
	// no ForeignCluster has its cluster ID.
	Peer string `json:"peer"`
	// ClusterID is the cluster ID of the peer, from the node's labels.
	ClusterID string `json:"clusterID"`
	// Ready is Ready, NotReady or Unknown: the status of the node's Ready condition.
	Ready string `json:"ready"`
	// Reason and Message are those of the Ready condition when it is not True.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// CPU, Memory and Pods are the node's allocatable resources; empty when not set.
	CPU    string `json:"cpu"`
	Memory string `json:"memory"`
	Pods   string `json:"pods"`
	// ExtendedResources are the node's allocatable devices, such as GPUs,
	// as NAME=QUANTITY; those the provider does not lend are at 0.
	ExtendedResources string `json:"extendedResources,omitempty"`
	// RunningPods counts the pods on the node in phase Running, out of TotalPods.
	RunningPods int `json:"runningPods"`
	TotalPods   int `json:"totalPods"`
	// Created is when the node was created.
	Created metav1.Time `json:"created"`
}

// ReadVirtualNodes returns the virtual nodes, sorted by name.
func ReadVirtualNodes(ctx context.Context, env *Env) ([]corev1.Node, error) {
	list, err := env.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: offloadv1alpha1.LabelType + "=" + offloadv1alpha1.TypeVirtualNode})
	if err != nil {
		return nil, fmt.Errorf("listing virtual nodes: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

// readPeerNames returns the names of the ForeignClusters by cluster ID;
// none when their CRD is missing, which the peers section reports.
func readPeerNames(ctx context.Context, env *Env) (map[string]string, error) {
	fcs, err := readForeignClusters(ctx, env)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(fcs))
	for _, fc := range fcs {
		if fc.Spec.ClusterID != "" {
			out[fc.Spec.ClusterID] = fc.Name
		}
	}
	return out, nil
}

// virtualNodesChecker lists the virtual nodes, one per peer this cluster
// consumes, and checks that each is Ready.
type virtualNodesChecker struct{}

func (virtualNodesChecker) Name() string { return "virtualNodes" }

func (virtualNodesChecker) Check(ctx context.Context, env *Env) Section {
	s := Section{Title: "Virtual nodes"}
	nodes, err := ReadVirtualNodes(ctx, env)
	if err != nil {
		s.Checks = append(s.Checks, Fail("virtualNodes", "%v", err))
		return s
	}
	s.Table = &Table{Columns: virtualNodeColumns, Rows: [][]string{}}
	if len(nodes) == 0 {
		s.Checks = append(s.Checks, OK("virtualNodes", "no virtual nodes: run kubectl offload peer generate on a provider"))
		return s
	}
	peers, err := readPeerNames(ctx, env)
	if err != nil {
		s.Checks = append(s.Checks, Fail("virtualNodes", "%v", err))
		return s
	}
	now := env.now()
	for i := range nodes {
		vn := newVirtualNode(&nodes[i], peers)
		podsErr := vn.countPods(ctx, env)
		s.VirtualNodes = append(s.VirtualNodes, vn)
		s.Table.Rows = append(s.Table.Rows, vn.row(now, podsErr == nil))
		s.Checks = append(s.Checks, vn.check())
		if podsErr != nil {
			s.Checks = append(s.Checks, Fail("node/"+vn.Name+"/pods", "%v", podsErr))
		}
	}
	return s
}

// newVirtualNode returns what the report shows of node, whose peer is
// named by peers, without its pods.
func newVirtualNode(node *corev1.Node, peers map[string]string) VirtualNode {
	id := node.Labels[offloadv1alpha1.LabelRemoteClusterID]
	vn := VirtualNode{
		Name:              node.Name,
		Peer:              peers[id],
		ClusterID:         id,
		Ready:             nodeUnknown,
		CPU:               quantity(node.Status.Allocatable, corev1.ResourceCPU),
		Memory:            quantity(node.Status.Allocatable, corev1.ResourceMemory),
		Pods:              quantity(node.Status.Allocatable, corev1.ResourcePods),
		ExtendedResources: devicesText(node.Status.Allocatable),
		Created:           node.CreationTimestamp,
	}
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		switch c.Status {
		case corev1.ConditionTrue:
			vn.Ready = nodeReady
			return vn
		case corev1.ConditionFalse:
			vn.Ready = nodeNotReady
		}
		vn.Reason, vn.Message = c.Reason, c.Message
		return vn
	}
	vn.Message = "the node has no Ready condition"
	return vn
}

// countPods counts the pods on the node, and those of them that run.
func (vn *VirtualNode) countPods(ctx context.Context, env *Env) error {
	pods, err := env.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", vn.Name).String(),
	})
	if err != nil {
		return fmt.Errorf("listing the pods on virtual node %s: %w", vn.Name, err)
	}
	vn.TotalPods = len(pods.Items)
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			vn.RunningPods++
		}
	}
	return nil
}

// peerText is the peer's name, or its cluster ID when no ForeignCluster has it.
func (vn *VirtualNode) peerText() string {
	if vn.Peer != "" {
		return vn.Peer
	}
	return orNone(vn.ClusterID)
}

// row returns the node's row of the virtual nodes table; counted is false
// when its pods could not be listed.
func (vn *VirtualNode) row(now time.Time, counted bool) []string {
	ready := vn.Ready
	if vn.Ready != nodeReady && vn.Reason != "" {
		ready += " (" + vn.Reason + ")"
	}
	running := none
	if counted {
		running = strconv.Itoa(vn.RunningPods) + "/" + strconv.Itoa(vn.TotalPods)
	}
	return []string{vn.Name, vn.peerText(), ready, orNone(vn.CPU), orNone(vn.Memory), orNone(vn.Pods), running,
		duration.HumanDuration(max(now.Sub(vn.Created.Time), 0))}
}

// check passes when the node is Ready, and otherwise fails with what the
// node says and where to look next.
func (vn *VirtualNode) check() Check {
	name := "node/" + vn.Name
	if vn.Ready == nodeReady {
		return OK(name, "virtual node %s is Ready", vn.Name)
	}
	why := vn.Message
	if why == "" {
		why = vn.Reason
	}
	next := "kubectl offload status lists the peers; see kubectl describe node " + vn.Name
	if vn.Peer != "" {
		next = "run kubectl offload status peer " + vn.Peer
	} else if vn.ClusterID != "" {
		next = fmt.Sprintf("no peer has cluster ID %s: %s", vn.ClusterID, next)
	}
	if why == "" {
		return Fail(name, "virtual node %s is %s: %s", vn.Name, vn.Ready, next)
	}
	return Fail(name, "virtual node %s is %s: %s; %s", vn.Name, vn.Ready, why, next)
}
