package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// InstallNamespace is where the fixture installs kubectl-offload: the
// CLI's default, factory.DefaultNamespace (a test holds them equal; the
// harness does not link the CLI's factory).
const InstallNamespace = "offload-system"

// AgentValues are the install flags that run the agent from the test image
// (TestImages) on the clusters' real nodes: its controller-manager, auth
// service and gateways.
func AgentValues() []string {
	var out []string
	for _, v := range []string{
		"image.repository=registry.local/offload/offload-agent",
		"image.tag=test",
		"image.pullPolicy=Never",
		`controllerManager.nodeSelector.offload\.io/test-node=real`,
		`auth.nodeSelector.offload\.io/test-node=real`,
		`network.gateway.nodeSelector.offload\.io/test-node=real`,
	} {
		out = append(out, "--set", v)
	}
	return out
}

// PairOptions configures the peered-pair fixture.
type PairOptions struct {
	// Bin is the directory holding the kubectl-offload binary
	// (BuildBinaries).
	Bin string
	// Install are more flags of install, on both clusters, after
	// AgentValues.
	Install []string
	// Generate are more flags of peer generate, on the provider.
	Generate []string
	// Log, when set, is told each command the fixture runs, the peering
	// token redacted.
	Log func(format string, args ...any)
}

func (o PairOptions) log(format string, args ...any) {
	if o.Log != nil {
		o.Log(format, args...)
	}
}

// PeeredPair is a consumer peered with a provider by the fixture.
type PeeredPair struct {
	Consumer, Provider *Cluster
	// Peer is the command peer generate printed.
	Peer PeerCommand
	// OutOfBand is how long peer out-of-band took, to the virtual node
	// Ready.
	OutOfBand time.Duration
}

// PeerCommand is the command peer generate prints, and its flags.
type PeerCommand struct {
	// Command is the whole command, as printed.
	Command string
	// Name is the provider's name on the consumer (its ForeignCluster,
	// its virtual node offload-NAME).
	Name                                      string
	AuthURL, ClusterID, AuthToken, CACertHash string
}

// parsePeerCommand reads what peer generate printed.
func parsePeerCommand(printed string) (PeerCommand, error) {
	pc := PeerCommand{Command: strings.TrimSpace(printed)}
	words := strings.Fields(pc.Command)
	if len(words) < 5 || strings.Join(words[:4], " ") != "kubectl offload peer out-of-band" {
		return pc, fmt.Errorf("peer generate printed %q, not a peer out-of-band command", redacted(pc.Command))
	}
	pc.Name = words[4]
	flags := map[string]*string{"--auth-url": &pc.AuthURL, "--cluster-id": &pc.ClusterID, "--auth-token": &pc.AuthToken, "--ca-cert-hash": &pc.CACertHash}
	for i := 5; i+1 < len(words); i += 2 {
		if v, ok := flags[words[i]]; ok {
			*v = words[i+1]
		}
	}
	return pc, nil
}

// StartPeeredPair installs kubectl-offload on consumer and provider, each
// advertising the API server URL its peer reaches, waits until the agents
// are Ready and the provider's auth CA exists, and peers the consumer with
// the provider as a user does: peer generate on the provider, the printed
// command on the consumer, which waits for the virtual node to be Ready.
// The demo, the conformance runner, the e2e tests and the benchmarks start
// their peered clusters with it.
func StartPeeredPair(ctx context.Context, consumer, provider *Cluster, o PairOptions) (*PeeredPair, error) {
	if err := InstallPair(ctx, consumer, provider, o); err != nil {
		return nil, err
	}
	return PeerPair(ctx, consumer, provider, o)
}

// InstallPair installs kubectl-offload on both clusters at once and waits
// until the agents' pods are Ready and the provider's auth CA exists.
func InstallPair(ctx context.Context, consumer, provider *Cluster, o PairOptions) error {
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, c := range []*Cluster{consumer, provider} {
		wg.Go(func() {
			args := append([]string{"install", "--cluster-name", c.Name, "--timeout", "3m", "--api-server-url", c.PeerAPIServerURL()}, AgentValues()...)
			if _, errs[i] = Offload(ctx, o.Bin, c, append(args, o.Install...)...); errs[i] == nil {
				o.log("kubectl offload install on %s", c.Name)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, c := range []*Cluster{consumer, provider} {
		for _, component := range []string{"auth", "controller-manager"} {
			if err := waitComponentReady(ctx, c, component); err != nil {
				return err
			}
		}
	}
	if _, err := framework.Poll(ctx, 250*time.Millisecond, 2*time.Minute, func(ctx context.Context) (bool, string) {
		_, err := provider.Kube.CoreV1().Secrets(InstallNamespace).Get(ctx, offloadv1alpha1.AuthCASecret, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	}); err != nil {
		return fmt.Errorf("waiting for the auth CA of %s: %w", provider.Name, err)
	}
	return nil
}

// PeerPair runs peer generate on the provider and the command it prints on
// the consumer, which returns once the virtual node is Ready.
func PeerPair(ctx context.Context, consumer, provider *Cluster, o PairOptions) (*PeeredPair, error) {
	printed, err := Offload(ctx, o.Bin, provider, append([]string{"peer", "generate"}, o.Generate...)...)
	if err != nil {
		return nil, err
	}
	pc, err := parsePeerCommand(printed)
	if err != nil {
		return nil, err
	}
	p := &PeeredPair{Consumer: consumer, Provider: provider, Peer: pc}
	o.log("on %s: %s", consumer.Name, redacted(pc.Command))
	start := time.Now()
	// The printed command, verbatim.
	if _, err := Offload(ctx, o.Bin, consumer, append(strings.Fields(strings.TrimPrefix(pc.Command, "kubectl offload ")), "--timeout", "3m")...); err != nil {
		return nil, err
	}
	p.OutOfBand = time.Since(start)
	return p, nil
}

// tokenFlag matches the peering token in a peer command.
var tokenFlag = regexp.MustCompile(`(--auth-token[ =])\S+`)

// redacted is command with its peering token hidden.
func redacted(command string) string { return tokenFlag.ReplaceAllString(command, "${1}<redacted>") }

// Offload runs the kubectl-offload binary of bin against c and returns its
// standard output; an error carries its standard error.
func Offload(ctx context.Context, bin string, c *Cluster, args ...string) (string, error) {
	out, errOut, err := RunOffload(ctx, filepath.Join(bin, "kubectl-offload"), c, args...)
	if err != nil {
		return out, fmt.Errorf("%s on %s: %w\n%s", redacted("kubectl offload "+strings.Join(args, " ")), c.Name, err, errOut)
	}
	return out, nil
}

// RunOffload runs the kubectl-offload binary binary, against c unless it
// is nil, for at most 5 minutes, and returns what it printed.
func RunOffload(ctx context.Context, binary string, c *Cluster, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if c != nil {
		args = append([]string{"--kubeconfig", c.Kubeconfig}, args...)
	}
	cmd := exec.CommandContext(ctx, binary, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// waitComponentReady waits until one pod of the agent's component
// (app.kubernetes.io/component) is Ready on c.
func waitComponentReady(ctx context.Context, c *Cluster, component string) error {
	if _, err := framework.Poll(ctx, 250*time.Millisecond, 3*time.Minute, func(ctx context.Context) (bool, string) {
		pods, err := c.Kube.CoreV1().Pods(InstallNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=" + component})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%d pods, none Ready", len(pods.Items))
	}); err != nil {
		return fmt.Errorf("waiting for the %s of %s: %w", component, c.Name, err)
	}
	return nil
}
