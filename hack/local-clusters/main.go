// Command local-clusters starts and stops named local clusters for
// developers and the demo (make clusters-up / clusters-down). The clusters
// keep running after it exits. For each it prints a line: the name, the
// kubeconfig and the API server URL its peers use (tab-separated).
//
//	go run ./hack/local-clusters up [--flavour kubeadm|k3s] [--fake-nodes N] [--taint-fake-nodes=false] [--real-node=false] [--metrics-server=false] [--storage] [--images A.tar,B.tar] [NAME ...]   (default: consumer provider)
//	go run ./hack/local-clusters up --install [--peer] [--set K=V ...] [--generate-flags "..."] CONSUMER PROVIDER
//	    also installs kubectl-offload (bin/kubectl-offload, the agent from
//	    the test image) on both and, with --peer, peers CONSUMER with
//	    PROVIDER (localcluster.InstallPair, then PeerPair unless CONSUMER is
//	    peered already): the fixture the e2e tests and the benchmarks use.
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

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/test/framework/images"
	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

func main() {
	// The controller-runtime client that checks for an existing peering
	// logs nothing worth showing; without a logger it prints a warning
	// with a stack trace.
	ctrllog.SetLogger(logr.Discard())
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
	cache, err := tools.CacheDir()
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	workdir := fs.String("workdir", filepath.Join(cache, "clusters"), "Directory holding the clusters.")
	fakeNodes := fs.Int("fake-nodes", 2, "Fake nodes per cluster (up only).")
	taintFakeNodes := fs.Bool("taint-fake-nodes", true, "Taint the fake nodes "+localcluster.FakeNodeTaint.ToString()+", so that only pods that tolerate it go there: kwok runs no container (up only).")
	realNode := fs.Bool("real-node", true, "Give each cluster a real node, kubelet and containerd, that runs containers (up only; needs root).")
	metricsServer := fs.Bool("metrics-server", true, "Run metrics-server on each real node, for kubectl top (up only; needs --real-node).")
	storage := fs.Bool("storage", false, "Run the local-path provisioner on each real node and make its class, "+localcluster.StorageClassName+", the default (up only; needs --real-node).")
	isolated := fs.Bool("isolated", true, "Isolate the clusters as separate machines: only node addresses and API servers reach across, not pods (up only; needs --real-node).")
	flavour := fs.String("flavour", "kubeadm", "The distribution the clusters imitate: kubeadm (kubeadm's and kind's defaults) or k3s (kine over SQLite, k3s's CIDRs, node metadata and kubeconfig at https://127.0.0.1:6443; one cluster per machine, needs --real-node) (up only).")
	moreImages := fs.String("images", "", "More image archives, comma-separated, to import into the real nodes beside the standard test images (up only).")
	install := fs.Bool("install", false, "Install kubectl-offload on both clusters, CONSUMER and PROVIDER, with the agent from the test image on their real nodes (up only).")
	peer := fs.Bool("peer", false, "Peer CONSUMER with PROVIDER as a user does, peer generate and the command it prints (up only; implies --install).")
	bin := fs.String("bin", "bin", "The directory holding the kubectl-offload binary (make build) for --install.")
	generateFlags := fs.String("generate-flags", "", "More flags of peer generate, space-separated, for --peer.")
	var sets []string
	fs.Func("set", "A chart value K=V for --install; repeat it.", func(v string) error { sets = append(sets, "--set", v); return nil })
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	env, err := localcluster.NewEnv(ctx, *workdir)
	if err != nil {
		return err
	}
	names := fs.Args()
	switch args[0] {
	case "up":
		if len(names) == 0 {
			names = []string{"consumer", "provider"}
		}
		f, err := localcluster.ParseFlavour(*flavour)
		if err != nil {
			return err
		}
		if f == localcluster.FlavourK3s && len(names) != 1 {
			return fmt.Errorf("--flavour k3s starts one cluster, not %d: its API server takes the host's port %d", len(names), localcluster.K3sAPIServerPort)
		}
		if *storage && !*realNode {
			return errors.New("--storage needs --real-node: the volumes live on the real nodes")
		}
		o := localcluster.ClusterOptions{Flavour: f, FakeNodes: *fakeNodes, TaintFakeNodes: *taintFakeNodes, RealNode: *realNode, Isolated: *isolated && *realNode, MetricsServer: *metricsServer && *realNode, Storage: *storage}
		if *moreImages != "" {
			archives, err := images.TestImages(ctx)
			if err != nil {
				return err
			}
			o.Images = append(slices.Collect(maps.Values(archives)), strings.Split(*moreImages, ",")...)
		}
		if err := up(ctx, env, names, o); err != nil || !*install && !*peer {
			return err
		}
		if len(names) != 2 {
			return fmt.Errorf("--install and --peer take two clusters, CONSUMER PROVIDER, not %d", len(names))
		}
		return installAndPeer(ctx, env, names, *peer, localcluster.PairOptions{Bin: *bin, Install: sets, Generate: strings.Fields(*generateFlags),
			Log: func(format string, args ...any) { fmt.Fprintf(os.Stderr, " ✓ "+format+"\n", args...) }})
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

// installAndPeer installs kubectl-offload on the two clusters and, with
// peer, peers the first with the second, unless it is peered already.
func installAndPeer(ctx context.Context, env *localcluster.Env, names []string, peer bool, o localcluster.PairOptions) error {
	consumer, err := env.Open(ctx, names[0])
	if err != nil {
		return err
	}
	provider, err := env.Open(ctx, names[1])
	if err != nil {
		return err
	}
	start := time.Now()
	if err := localcluster.InstallPair(ctx, consumer, provider, o); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, " ✓ installed kubectl-offload on %s and %s in %s\n", consumer.Name, provider.Name, time.Since(start).Round(time.Millisecond))
	if !peer {
		return nil
	}
	c, err := client.New(consumer.Config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return err
	}
	if err := c.Get(ctx, client.ObjectKey{Name: provider.Name}, &offloadv1alpha1.ForeignCluster{}); err == nil {
		fmt.Fprintf(os.Stderr, " ✓ %s is already peered with %s\n", consumer.Name, provider.Name)
		return nil
	}
	p, err := localcluster.PeerPair(ctx, consumer, provider, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, " ✓ %s peered with %s: virtual node %s Ready in %s\n", consumer.Name, provider.Name,
		"offload-"+p.Peer.Name, p.OutOfBand.Round(time.Millisecond))
	return nil
}

// up starts the clusters that are not running yet; running ones are reused.
func up(ctx context.Context, env *localcluster.Env, names []string, o localcluster.ClusterOptions) error {
	start := time.Now()
	var missing []localcluster.ClusterOptions
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
