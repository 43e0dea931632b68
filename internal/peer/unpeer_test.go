package peer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// runUnpeer runs kubectl offload unpeer with args against c, polling fast.
func runUnpeer(t *testing.T, c client.Client, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	o := NewUnpeerOptions(streams)
	o.pollInterval, o.agentWait = 10*time.Millisecond, 200*time.Millisecond
	cmd := newCmdUnpeer(oobFactory{c: c}, o)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func exists(t *testing.T, c client.Client, o client.Object) bool {
	t.Helper()
	err := c.Get(context.Background(), client.ObjectKeyFromObject(o), o)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func peeredConsumerObjects() []client.Object {
	fc := withVirtualNode(peeredProvider(metav1.ConditionTrue, "Authenticated", "ok"), metav1.ConditionTrue)
	fc.Finalizers = []string{offloadv1alpha1.FinalizerUnpeer, offloadv1alpha1.FinalizerVirtualNode}
	return []client.Object{
		fc,
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "offload-provider"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "offload-provider", Namespace: corev1.NamespaceNodeLease}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: peering.PeerKubeconfigSecretName("provider"), Namespace: testNS}},
	}
}

func TestUnpeerRefusesAnUnknownPeerAndChangesNothing(t *testing.T) {
	c := newFakeClient(peeredConsumerObjects()...)
	_, _, err := runUnpeer(t, c, "nobody")
	if err == nil || !strings.Contains(err.Error(), `no peer "nobody"`) {
		t.Fatalf("error %v, want no peer", err)
	}
	if !exists(t, c, &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "provider"}}) {
		t.Error("another peer was removed")
	}
	if _, _, err := runUnpeer(t, c); err == nil || !strings.Contains(err.Error(), "exactly one NAME") {
		t.Errorf("no NAME: %v", err)
	}
}

func TestUnpeerReportsAProviderTheAgentCannotReach(t *testing.T) {
	objs := peeredConsumerObjects()
	const why = "cannot get the provider to remove this cluster's tenant: connection refused; the agent keeps retrying"
	meta.SetStatusCondition(&objs[0].(*offloadv1alpha1.ForeignCluster).Status.Conditions, metav1.Condition{
		Type: offloadv1alpha1.ConditionUnpeered, Status: metav1.ConditionFalse, Reason: "ProviderNotCleaned", Message: why})
	c := newFakeClient(objs...)
	_, stderr, err := runUnpeer(t, c, "provider")
	if err == nil || !strings.Contains(err.Error(), why) {
		t.Fatalf("error %v, want the agent's message", err)
	}
	if !strings.Contains(stderr, "✗ The provider removed this cluster's tenant") {
		t.Errorf("stderr %q, want the failed step", stderr)
	}
}

// When the agent does not act, --force removes its finalizers and
// nothing else: the peering's parts are the ForeignCluster's, and the
// garbage collector takes them (test/e2e: TestPeerOutOfBand..., the
// forced unpeer with the agent down). The fake client has no garbage
// collector, so the parts here are those it would have taken already.
func TestUnpeerForceRemovesTheFinalizersWhenTheAgentDoesNot(t *testing.T) {
	fc := peeredConsumerObjects()[0]
	kubeconfig := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: peering.PeerKubeconfigSecretName("provider"), Namespace: testNS,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: offloadv1alpha1.GroupVersion.String(), Kind: "ForeignCluster", Name: "provider", UID: fc.GetUID()}}}}
	c := newFakeClient(fc, kubeconfig)
	_, stderr, err := runUnpeer(t, c, "provider", "--force")
	if err != nil {
		t.Fatalf("unpeer --force: %v\n%s", err, stderr)
	}
	if exists(t, c, fc) {
		t.Error("the ForeignCluster is left")
	}
	if !exists(t, c, kubeconfig) {
		t.Error("the CLI deleted the kubeconfig Secret itself: that is the garbage collector's job, through its owner reference")
	}
	for _, want := range []string{"skipped the provider (--force)", "Removed the agent's finalizers"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q, want %q", stderr, want)
		}
	}
}

// consumerTenant is the Tenant of consumer name on this cluster, the provider.
func consumerTenant(name string) *offloadv1alpha1.Tenant {
	return &offloadv1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: offloadv1alpha1.TenantSpec{ClusterID: consumerID, ClusterName: name, TenantNamespace: offloadv1alpha1.TenantNamespace(name)}}
}

func TestUnpeerRefusesAConsumerWithoutIncomingAndChangesNothing(t *testing.T) {
	tenant := consumerTenant("consumer")
	objs := []client.Object{tenant, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant.Spec.TenantNamespace}},
		&offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "consumer", Labels: map[string]string{offloadv1alpha1.LabelIncomingOnly: "true"}}}}
	c := newFakeClient(objs...)
	_, _, err := runUnpeer(t, c, "consumer")
	if err == nil || !strings.Contains(err.Error(), "kubectl offload unpeer consumer --incoming") {
		t.Fatalf("error %v, want a refusal naming --incoming", err)
	}
	for _, o := range objs {
		if !exists(t, c, o) {
			t.Errorf("a refused unpeer removed %T %s", o, o.GetName())
		}
	}
	if _, _, err := runUnpeer(t, c, "provider", "--incoming"); err == nil || !strings.Contains(err.Error(), "does not consume this cluster") {
		t.Errorf("--incoming for a cluster that is no consumer: %v", err)
	}
	if _, _, err := runUnpeer(t, c, "consumer", "--incoming", "--force"); err == nil || !strings.Contains(err.Error(), "--force applies to the outgoing peering only") {
		t.Errorf("--incoming --force: %v", err)
	}
}

func TestUnpeerIncomingDeletesTheTenantAndWaitsForTheAgentOnly(t *testing.T) {
	tenant := consumerTenant("provider")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant.Spec.TenantNamespace}}
	outgoing := peeredConsumerObjects()
	c := newFakeClient(append([]client.Object{tenant, ns}, outgoing...)...)
	// The agent's tenant controller: once the Tenant is gone, the tenant
	// namespace goes. The CLI must not delete it itself.
	agent := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		agent <- wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(tenant), &offloadv1alpha1.Tenant{}); !apierrors.IsNotFound(err) {
				if err := c.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{}); apierrors.IsNotFound(err) {
					return false, errors.New("the tenant namespace went before the Tenant: the CLI deleted it")
				}
				return false, nil
			}
			return true, c.Delete(ctx, ns.DeepCopy())
		})
	}()
	stdout, stderr, err := runUnpeer(t, c, "provider", "--incoming")
	if err != nil {
		t.Fatalf("unpeer --incoming: %v\n%s", err, stderr)
	}
	if err := <-agent; err != nil {
		t.Fatal(err)
	}
	if exists(t, c, tenant) || exists(t, c, ns) {
		t.Error("the tenant or its namespace is left")
	}
	for _, o := range outgoing {
		if !exists(t, c, o) {
			t.Errorf("unpeer --incoming removed %T %s of the outgoing peering", o, o.GetName())
		}
	}
	if !strings.Contains(stdout, "unpeered provider (incoming") {
		t.Errorf("stdout %q", stdout)
	}
}

func TestUnpeerOfAPeerBothWaysEndsTheOutgoingPeeringOnly(t *testing.T) {
	tenant := consumerTenant("provider")
	// The ForeignCluster: with no garbage collector here, its parts are
	// taken already.
	outgoing := peeredConsumerObjects()[:1]
	c := newFakeClient(append([]client.Object{tenant}, outgoing...)...)
	_, stderr, err := runUnpeer(t, c, "provider", "--force")
	if err != nil {
		t.Fatalf("unpeer: %v\n%s", err, stderr)
	}
	for _, o := range outgoing {
		if exists(t, c, o) {
			t.Errorf("%T %s of the outgoing peering is left", o, o.GetName())
		}
	}
	if !exists(t, c, tenant) {
		t.Error("unpeer without --incoming removed the consumer's Tenant")
	}
	if !strings.Contains(stderr, "kubectl offload unpeer provider --incoming") {
		t.Errorf("stderr %q, want a note that the incoming peering stays", stderr)
	}
}
