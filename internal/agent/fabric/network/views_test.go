package network

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// Peers whose Tunnels are reconciled at the same instant, by the consumer
// and the provider controllers, never get the same view, and a Tunnel that
// holds its views keeps them without taking the allocation lock.
func TestConcurrentAllocationsNeverShareAView(t *testing.T) {
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	envtest.InstallCRDs(t, c)
	ctx := context.Background()
	ns := "views-" + rand.String(5)
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	s := Settings{Namespace: ns, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		Pools: []netip.Prefix{netip.MustParsePrefix("10.64.0.0/12")}}

	const peers = 6
	tunnels := make([]*offloadv1alpha1.Tunnel, peers)
	for i := range tunnels {
		role := offloadv1alpha1.TunnelClient
		if i%2 == 1 {
			role = offloadv1alpha1.TunnelServer
		}
		tunnels[i] = &offloadv1alpha1.Tunnel{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: offloadv1alpha1.TunnelName(role, fmt.Sprintf("peer-%d", i))},
			Spec:       offloadv1alpha1.TunnelSpec{ClusterID: fmt.Sprint(i), ClusterName: fmt.Sprint(i), Role: role, LocalPodCIDRs: []string{"10.244.0.0/16"}},
		}
		must(t, c.Create(ctx, tunnels[i]))
	}
	// Every peer uses the same pod CIDR as this cluster, as kind clusters do.
	var wg sync.WaitGroup
	errs := make([]error, peers)
	for i, tn := range tunnels {
		wg.Go(func() {
			mappings, done, err := views(ctx, c, s, tn, []string{"10.244.0.0/16"})
			defer done()
			if err != nil {
				errs[i] = err
				return
			}
			tn.Spec.Mappings = mappings
			errs[i] = c.Update(ctx, tn)
		})
	}
	wg.Wait()
	seen := map[string]string{}
	for i, tn := range tunnels {
		if errs[i] != nil {
			t.Fatalf("tunnel %s: %v", tn.Name, errs[i])
		}
		v := tn.Spec.Mappings[0].View
		if other, dup := seen[v]; dup {
			t.Errorf("tunnels %s and %s both got view %s", other, tn.Name, v)
		}
		seen[v] = tn.Name
	}

	// A Tunnel that holds its view keeps it, while another allocation
	// holds the lock.
	allocation.Lock()
	defer allocation.Unlock()
	mappings, done, err := views(ctx, c, s, tunnels[0], []string{"10.244.0.0/16"})
	done()
	if err != nil || len(mappings) != 1 || mappings[0] != tunnels[0].Spec.Mappings[0] {
		t.Errorf("the kept view: %v, %v; want %v", mappings, err, tunnels[0].Spec.Mappings)
	}
}
