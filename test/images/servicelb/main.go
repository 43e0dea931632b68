// Command servicelb is k3s's ServiceLB for k3s-flavoured local clusters,
// in two parts (see package test/framework/servicelb):
//
//	servicelb controller --kubeconfig FILE --image REF
//	    the controller, a process of the cluster's control plane as it is
//	    one of a k3s server's: svclb DaemonSets and load balancer status;
//	servicelb forward
//	    the svclb container (k3s's klipper-lb): in its pod's network
//	    namespace, connections to SRC_PORT (DEST_PROTO) from SRC_RANGES go
//	    to DEST_IPS at DEST_PORT, from the pod's address; then it waits to
//	    be stopped.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kubectl-offload/kubectl-offload/internal/nftexpr"
	"github.com/kubectl-offload/kubectl-offload/test/framework/servicelb"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "controller":
		err = controller(ctx, os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "forward":
		err = forward(ctx)
	default:
		err = errors.New("usage: servicelb controller --kubeconfig FILE --image REF | servicelb forward")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "servicelb:", err)
		os.Exit(1)
	}
}

func controller(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "The cluster's admin kubeconfig.")
	image := fs.String("image", "", "The svclb containers' image.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" || *image == "" {
		return errors.New("--kubeconfig and --image are required")
	}
	ctrl.SetLogger(textlogger.NewLogger(textlogger.NewConfig()))
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return err
	}
	if err := (&servicelb.Reconciler{Client: mgr.GetClient(), Image: *image}).SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// forward installs the forwarding of one port, as klipper-lb's entrypoint
// does with iptables, in an nftables table of the pod's own.
func forward(ctx context.Context) error {
	port, err := envPort("SRC_PORT")
	if err != nil {
		return err
	}
	destPort, err := envPort("DEST_PORT")
	if err != nil {
		return err
	}
	var proto byte
	switch p := os.Getenv("DEST_PROTO"); p {
	case "TCP":
		proto = unix.IPPROTO_TCP
	case "UDP":
		proto = unix.IPPROTO_UDP
	default:
		return fmt.Errorf("DEST_PROTO %q: want TCP or UDP", p)
	}
	var dest netip.Addr
	for _, f := range strings.Fields(os.Getenv("DEST_IPS")) {
		if ip, err := netip.ParseAddr(f); err == nil && ip.Is4() {
			dest = ip
			break
		}
	}
	if !dest.IsValid() {
		return fmt.Errorf("DEST_IPS %q has no IPv4 address", os.Getenv("DEST_IPS"))
	}
	var ranges []netip.Prefix
	for _, f := range strings.Fields(strings.ReplaceAll(os.Getenv("SRC_RANGES"), ",", " ")) {
		if p, err := netip.ParsePrefix(f); err == nil && p.Addr().Is4() {
			ranges = append(ranges, p)
		}
	}
	if len(ranges) == 0 {
		ranges = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	}

	c, err := nftables.New()
	if err != nil {
		return err
	}
	name := fmt.Sprintf("svclb-%s-%d", strings.ToLower(os.Getenv("DEST_PROTO")), port)
	nftexpr.DeleteTable(c, name)
	tbl := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: name})
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: tbl, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	for _, r := range ranges {
		c.AddRule(&nftables.Rule{Table: tbl, Chain: pre, Exprs: nftexpr.Rule(
			nftexpr.MatchPrefix(nftexpr.Source, r), nftexpr.Protocol(proto), nftexpr.DestinationPort(port), nftexpr.DNAT(dest, destPort))})
	}
	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: tbl, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	c.AddRule(&nftables.Rule{Table: tbl, Chain: post, Exprs: nftexpr.Rule(
		nftexpr.MatchPrefix(nftexpr.Destination, netip.PrefixFrom(dest, 32)), nftexpr.Protocol(proto), nftexpr.DestinationPort(destPort), nftexpr.Masquerade())})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing the forwarding of %s port %d to %s:%d: %w", os.Getenv("DEST_PROTO"), port, dest, destPort, err)
	}
	fmt.Printf("forwarding %s port %d from %v to %s:%d\n", os.Getenv("DEST_PROTO"), port, ranges, dest, destPort)
	<-ctx.Done()
	return nil
}

func envPort(name string) (uint16, error) {
	p, err := strconv.ParseUint(os.Getenv(name), 10, 16)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("%s %q: want a port number", name, os.Getenv(name))
	}
	return uint16(p), nil
}
