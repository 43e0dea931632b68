// Command local-clusters starts and stops named local clusters for
// developers and the demo (make clusters-up / clusters-down). The clusters
// keep running after it exits. For each it prints a line: the name, the
// kubeconfig and the API server URL its peers use (tab-separated).
//
//	go run ./hack/local-clusters up [--flavour kubeadm|k3s] [--fake-nodes N] [--taint-fake-nodes=false] [--real-node=false] [--metrics-server=false] [--images A.tar,B.tar] [NAME ...]   (default: consumer provider)
//	go run ./hack/local-clusters down [NAME ...]                  (default: every cluster)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: local-clusters up|down [flags] [NAME ...]")
	}
	cache, err := framework.CacheDir()
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	workdir := fs.String("workdir", filepath.Join(cache, "clusters"), "Directory holding the clusters.")
	fakeNodes := fs.Int("fake-nodes", 2, "Fake nodes per cluster (up only).")
	taintFakeNodes := fs.Bool("taint-fake-nodes", true, "Taint the fake nodes "+framework.FakeNodeTaint.ToString()+", so that only pods that tolerate it go there: kwok runs no container (up only).")
	realNode := fs.Bool("real-node", true, "Give each cluster a real node, kubelet and containerd, that runs containers (up only; needs root).")
	metricsServer := fs.Bool("metrics-server", true, "Run metrics-server on each real node, for kubectl top (up only; needs --real-node).")
	isolated := fs.Bool("isolated", true, "Isolate the clusters as separate machines: only node addresses and API servers reach across, not pods (up only; needs --real-node).")
	flavour := fs.String("flavour", "kubeadm", "The distribution the clusters imitate: kubeadm (kubeadm's and kind's defaults) or k3s (kine over SQLite, k3s's CIDRs, node metadata and kubeconfig at https://127.0.0.1:6443; one cluster per machine, needs --real-node) (up only).")
	images := fs.String("images", "", "More image archives, comma-separated, to import into the real nodes beside the standard test images (up only).")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	env, err := framework.NewEnv(ctx, *workdir)
	if err != nil {
		return err
	}
	names := fs.Args()
	switch args[0] {
	case "up":
		if len(names) == 0 {
			names = []string{"consumer", "provider"}
		}
		f, err := framework.ParseFlavour(*flavour)
		if err != nil {
			return err
		}
		if f == framework.FlavourK3s && len(names) != 1 {
			return fmt.Errorf("--flavour k3s starts one cluster, not %d: its API server takes the host's port %d", len(names), framework.K3sAPIServerPort)
		}
		o := framework.ClusterOptions{Flavour: f, FakeNodes: *fakeNodes, TaintFakeNodes: *taintFakeNodes, RealNode: *realNode, Isolated: *isolated && *realNode, MetricsServer: *metricsServer && *realNode}
		if *images != "" {
			archives, err := framework.TestImages(ctx)
			if err != nil {
				return err
			}
			o.Images = append(slices.Collect(maps.Values(archives)), strings.Split(*images, ",")...)
		}
		return up(ctx, env, names, o)
	case "down":
		if len(names) == 0 {
			names = env.Names()
		}
		var errs []error
		for _, n := range names {
			errs = append(errs, env.Delete(ctx, n))
			fmt.Fprintf(os.Stderr, " ✓ deleted cluster %s\n", n)
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("unknown action %q: use up or down", args[0])
}

// up starts the clusters that are not running yet; running ones are reused.
func up(ctx context.Context, env *framework.Env, names []string, o framework.ClusterOptions) error {
	start := time.Now()
	var missing []framework.ClusterOptions
	for _, n := range names {
		if _, err := env.Open(ctx, n); err == nil {
			fmt.Fprintf(os.Stderr, " ✓ cluster %s is already running\n", n)
			continue
		}
		// A cluster that exists but does not answer is restarted from scratch.
		if err := env.Delete(ctx, n); err != nil {
			return err
		}
		o.Name = n
		missing = append(missing, o)
	}
	if len(missing) > 0 {
		if _, err := env.CreateClusters(ctx, missing...); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, " ✓ started %d cluster(s) in %s\n", len(missing), time.Since(start).Round(time.Millisecond))
	}
	for _, n := range names {
		c, err := env.Open(ctx, n)
		if err != nil {
			return err
		}
		fmt.Printf("%s\t%s\t%s\n", c.Name, c.Kubeconfig, c.PeerAPIServerURL())
	}
	return nil
}
