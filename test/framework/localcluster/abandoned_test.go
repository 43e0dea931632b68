package localcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
)

// freeNodeIndex returns an index whose node namespace does not exist,
// counting down from the last, away from the ones clusters take first.
func freeNodeIndex(t *testing.T, skip int) int {
	t.Helper()
	for i := maxRealNodes; i > 0; i-- {
		if _, err := os.Stat(fmt.Sprintf("/run/netns/offload-%d", i)); os.IsNotExist(err) && i != skip {
			return i
		}
	}
	t.Fatal("no free node namespace name")
	return 0
}

// fakeNode creates node namespace offload-i with its host veth ovh<i>, as
// nodeNetwork does, and removes them after the test if they are left.
func fakeNode(t *testing.T, i int) string {
	t.Helper()
	ns, host := fmt.Sprintf("offload-%d", i), fmt.Sprintf("ovh%d", i)
	ctx := context.Background()
	for _, s := range [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", host, "type", "veth", "peer", "name", fmt.Sprintf("ovn%d", i)},
		{"ip", "link", "set", fmt.Sprintf("ovn%d", i), "netns", ns},
	} {
		if _, err := machine.Run(ctx, s[0], s[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = machine.Run(ctx, "ip", "link", "delete", host)
		_, _ = machine.Run(ctx, "ip", "netns", "delete", ns)
	})
	return ns
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// A run killed while its nodes existed leaves their namespaces with no
// process in them. The next run removes them, with their host interfaces,
// and leaves alone a node whose processes run and one that is starting.
func TestTheNodesAKilledRunLeftAreRemovedAndRunningOnesAreNot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("node networks need root")
	}
	abandoned := freeNodeIndex(t, 0)
	running := freeNodeIndex(t, abandoned)
	abandonedNS, runningNS := fakeNode(t, abandoned), fakeNode(t, running)
	proc := exec.Command("ip", "netns", "exec", runningNS, "sleep", "600")
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Process.Kill(); _ = proc.Wait() })
	framework.Eventually(t, 10*time.Second, "a process in namespace "+runningNS, func(context.Context) bool {
		return !machine.NamespaceAbandoned(runningNS, 0)
	})

	// Younger than the age given: a node that is starting.
	if err := removeAbandonedNodes(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if !exists("/run/netns/" + abandonedNS) {
		t.Fatalf("namespace %s, younger than the age given, was removed", abandonedNS)
	}

	if err := removeAbandonedNodes(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if exists("/run/netns/" + abandonedNS) {
		t.Errorf("namespace %s, with no process in it, is left", abandonedNS)
	}
	if exists(fmt.Sprintf("/sys/class/net/ovh%d", abandoned)) {
		t.Errorf("interface ovh%d of the abandoned node is left", abandoned)
	}
	if !exists("/run/netns/" + runningNS) {
		t.Errorf("namespace %s, with a process in it, was removed", runningNS)
	}
	if !exists(fmt.Sprintf("/sys/class/net/ovh%d", running)) {
		t.Errorf("interface ovh%d of the running node was removed", running)
	}
}
