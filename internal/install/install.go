// Package install installs, upgrades and uninstalls kubectl-offload: the
// embedded Helm chart through the Helm v3 SDK, the CRDs, and the
// cluster-specific settings it detects (distribution, CIDRs, API server URL).
package install

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/charts"
	"github.com/kubectl-offload/kubectl-offload/internal/buildinfo"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// ManagedByLabel marks the objects the CLI creates outside the chart, such as
// the install namespace, so uninstall --purge removes only what it created.
const ManagedByLabel = "app.kubernetes.io/managed-by"

// ManagedByValue is the value of ManagedByLabel on objects the CLI created.
const ManagedByValue = "kubectl-offload"

// Options are the options of `kubectl offload install` and `upgrade`.
type Options struct {
	genericiooptions.IOStreams

	ClusterName  string
	Provider     string
	PodCIDR      string
	ServiceCIDR  string
	APIServerURL string
	// Network runs the network fabric; by default it runs when the pod
	// CIDR is known. NetworkSet says --network was given.
	Network    bool
	NetworkSet bool
	// GatewayServiceType and GatewayAddress publish this cluster's gateways
	// to its consumers; empty keeps the chart's default.
	GatewayServiceType string
	GatewayAddress     string
	Set                []string
	ValueFiles         []string
	Timeout            time.Duration
	Wait               bool
	DryRun             bool
	Output             output.Format
	// UpgradeOnly refuses to install a release that does not exist (`kubectl offload upgrade`).
	UpgradeOnly bool

	clients
	contextName string
	version     string
	restHost    string
	provider    Provider
}

// NewOptions returns install Options with defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{IOStreams: streams, Timeout: 5 * time.Minute, Wait: true, Output: output.Table, Network: true}
}

// Complete builds the clients from the factory.
func (o *Options) Complete(f factory.Factory) error {
	o.version = buildinfo.Version
	o.contextName = f.ContextName()
	cfg, err := f.RESTConfig()
	if err != nil {
		return err
	}
	o.restHost = cfg.Host
	o.clients, err = newClients(f)
	return err
}

// Validate checks every flag before anything touches the cluster.
func (o *Options) Validate() error {
	if o.ClusterName != "" {
		if errs := validation.IsDNS1123Label(o.ClusterName); len(errs) > 0 {
			return fmt.Errorf("invalid --cluster-name %q: %s", o.ClusterName, errs[0])
		}
	}
	if o.Provider != "" {
		p, err := ParseProvider(o.Provider)
		if err != nil {
			return err
		}
		o.provider = p
	}
	for flag, v := range map[string]string{"--pod-cidr": o.PodCIDR, "--service-cidr": o.ServiceCIDR} {
		if v == "" {
			continue
		}
		if _, _, err := net.ParseCIDR(v); err != nil {
			return fmt.Errorf("invalid %s %q: want a CIDR such as 10.244.0.0/16", flag, v)
		}
	}
	if o.APIServerURL != "" && !peering.IsHTTPSURL(o.APIServerURL) {
		return fmt.Errorf("invalid --api-server-url %q: want https://HOST:PORT", o.APIServerURL)
	}
	switch o.GatewayServiceType {
	case "", "NodePort", "LoadBalancer":
	default:
		return fmt.Errorf("invalid --gateway-service-type %q: want NodePort or LoadBalancer", o.GatewayServiceType)
	}
	if o.GatewayAddress != "" {
		if err := validGatewayAddress(o.GatewayAddress); err != nil {
			return err
		}
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", o.Timeout)
	}
	switch {
	case o.DryRun && o.Output != output.YAML && o.Output != output.Table:
		return fmt.Errorf("--dry-run prints YAML manifests: use -o yaml")
	case !o.DryRun && o.Output != output.Table:
		return fmt.Errorf("-o %s is only valid with --dry-run", o.Output)
	}
	return nil
}

// Run installs or upgrades the release, showing each step.
func (o *Options) Run(ctx context.Context) error {
	progress := io.Writer(o.ErrOut)
	steps := output.NewSteps(progress)

	var serverVersion string
	if err := steps.Run("Connected to the cluster", func() error {
		v, err := o.kube.Discovery().ServerVersion()
		if err != nil {
			return fmt.Errorf("cannot reach the cluster at %s: %w (check --kubeconfig and --context)", o.restHost, err)
		}
		serverVersion = v.GitVersion
		// Before anything changes: the chart's kubeVersion says the same,
		// in Helm's words, only once the release is being made.
		if err := peering.CheckKubernetes("this cluster", serverVersion); err != nil {
			return fmt.Errorf("%v; nothing was installed", err)
		}
		return nil
	}); err != nil {
		return err
	}

	var det *Detection
	if err := steps.Run("Detected the cluster settings", func() error {
		var err error
		det, err = Detect(ctx, o.kube, o.restHost, o.provider)
		if apierrors.IsForbidden(err) {
			return fmt.Errorf("%w: installing needs cluster-admin rights on the cluster", err)
		}
		return err
	}); err != nil {
		return err
	}

	existing, err := o.helm.Release(offloadv1alpha1.ReleaseName)
	if err != nil {
		return err
	}
	if existing == nil && o.UpgradeOnly {
		return fmt.Errorf("kubectl-offload is not installed in namespace %s: run kubectl offload install", o.namespace)
	}
	identity, err := o.readIdentity(ctx)
	if err != nil {
		return err
	}
	user, err := o.userValues()
	if err != nil {
		return err
	}
	var installed map[string]any
	if existing != nil {
		installed = existing.Config
	}
	settings := o.settings(det, identity, user, installed)
	settings.show(steps, serverVersion)
	if err := settings.validate(); err != nil {
		return err
	}

	ch, err := charts.Load(o.version)
	if err != nil {
		return err
	}
	vals := o.values(settings, identity, user)
	// Validate the values before the first write, so bad input changes nothing.
	merged, err := chartutil.CoalesceValues(ch, vals)
	if err != nil {
		return fmt.Errorf("invalid chart values: %w", err)
	}
	if err := chartutil.ValidateAgainstSchema(ch, merged); err != nil {
		return fmt.Errorf("invalid chart values: %w", err)
	}
	warning, err := checkNetwork(merged, settings)
	if err != nil {
		return err
	}
	if warning != "" {
		steps.Warn("%s", warning)
	}

	if o.DryRun {
		return o.dryRun(ctx, ch, vals, existing != nil)
	}
	return o.apply(ctx, steps, ch, vals, existing)
}

// validGatewayAddress checks --gateway-address: a host name or IP, with or
// without a port.
func validGatewayAddress(a string) error {
	host, port := a, ""
	if h, p, err := net.SplitHostPort(a); err == nil {
		host, port = h, p
	}
	bad := func() error {
		return fmt.Errorf("invalid --gateway-address %q: want HOST or HOST:PORT, the address consumers dial this cluster's gateways at", a)
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || len(validation.IsValidPortNum(n)) > 0 {
			return bad()
		}
	}
	if net.ParseIP(host) == nil && len(validation.IsDNS1123Subdomain(host)) > 0 {
		return bad()
	}
	return nil
}

// readIdentity returns the installed cluster identity, or nil.
func (o *Options) readIdentity(ctx context.Context) (*corev1.ConfigMap, error) {
	cm, err := o.kube.CoreV1().ConfigMaps(o.namespace).Get(ctx, offloadv1alpha1.IdentityConfigMap, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the cluster identity: %w", err)
	}
	return cm, nil
}

func (o *Options) dryRun(ctx context.Context, ch *chart.Chart, vals map[string]any, upgrade bool) error {
	var rel *helmclient.Release
	var err error
	if upgrade {
		rel, err = o.helm.Upgrade(ctx, offloadv1alpha1.ReleaseName, ch, vals, true)
	} else {
		rel, err = o.helm.Install(ctx, offloadv1alpha1.ReleaseName, ch, vals, true)
	}
	if err != nil {
		return fmt.Errorf("rendering the chart: %w", err)
	}
	crds, err := crdManifest()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(o.Out, "%s%s", crds, rel.Manifest)
	return err
}
