// Package helmclient is the CLI's one wrapper of the Helm v3 SDK: install,
// upgrade, uninstall and read the release, in the project's own types.
// Keeping the SDK behind it keeps a move to Helm 4 to one file, and lets
// tests substitute the Client.
package helmclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
)

// StatusDeployed is the Helm status of a release that installed or upgraded
// completely.
const StatusDeployed = string(release.StatusDeployed)

// Client is the part of the Helm SDK the CLI uses.
type Client interface {
	// Release returns the latest revision of the release called name, or
	// nil when there is none.
	Release(name string) (*Release, error)
	// Install installs ch as release name; with dryRun it only renders,
	// looking the cluster up but writing nothing.
	Install(ctx context.Context, name string, ch *chart.Chart, vals map[string]any, dryRun bool) (*Release, error)
	// Upgrade upgrades release name to ch; with dryRun it only renders.
	Upgrade(ctx context.Context, name string, ch *chart.Chart, vals map[string]any, dryRun bool) (*Release, error)
	// Uninstall removes release name and waits up to timeout for its
	// objects to go; a release that does not exist is no error.
	Uninstall(name string, timeout time.Duration) error
}

// Release is what the CLI reads of a Helm release.
type Release struct {
	// Name is the release name.
	Name string
	// Revision is the release revision.
	Revision int
	// Status is Helm's status of the release, such as deployed or failed.
	Status string
	// ChartVersion is the version of the installed chart.
	ChartVersion string
	// Config are the user-supplied values, as stored with the release.
	Config map[string]any
	// Values are the chart's default values merged with Config, as
	// `helm get values --all` shows them. Config and Values nest plain
	// maps, never Helm's chartutil.Values, so that their readers need not
	// know Helm.
	Values map[string]any
	// Manifest is the rendered manifest.
	Manifest string
	// CRDFiles are the chart's CRD files (crds/NAME.yaml), which tell the
	// CRDs the installed release knows of; nil when the release does not
	// say.
	CRDFiles []string
}

// Pending reports whether an install, upgrade or rollback of the release
// is in progress.
func (r *Release) Pending() bool {
	return release.Status(r.Status).IsPending()
}

type sdkClient struct {
	cfg       *action.Configuration
	namespace string
}

// New returns a Client backed by the Helm v3 SDK for releases in namespace.
func New(cfg *action.Configuration, namespace string) Client {
	return &sdkClient{cfg: cfg, namespace: namespace}
}

func (h *sdkClient) Release(name string) (*Release, error) {
	rel, err := action.NewGet(h.cfg).Run(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading helm release %s: %w", name, err)
	}
	return fromSDK(rel)
}

func (h *sdkClient) Install(ctx context.Context, name string, ch *chart.Chart, vals map[string]any, dryRun bool) (*Release, error) {
	a := action.NewInstall(h.cfg)
	a.ReleaseName, a.Namespace = name, h.namespace
	// The CLI applies the CRDs itself, on install and on upgrade alike.
	a.SkipCRDs = true
	if dryRun {
		// "server" lets templates look up the cluster (the existing identity) without writing.
		a.DryRun, a.DryRunOption = true, "server"
	}
	rel, err := a.RunWithContext(ctx, ch, vals)
	if err != nil {
		return nil, err
	}
	return fromSDK(rel)
}

func (h *sdkClient) Upgrade(ctx context.Context, name string, ch *chart.Chart, vals map[string]any, dryRun bool) (*Release, error) {
	a := action.NewUpgrade(h.cfg)
	a.Namespace = h.namespace
	a.SkipCRDs = true
	a.MaxHistory = 5
	if dryRun {
		a.DryRun, a.DryRunOption = true, "server"
	}
	rel, err := a.RunWithContext(ctx, name, ch, vals)
	if err != nil {
		return nil, err
	}
	return fromSDK(rel)
}

func (h *sdkClient) Uninstall(name string, timeout time.Duration) error {
	a := action.NewUninstall(h.cfg)
	a.Wait, a.Timeout = true, timeout
	a.DeletionPropagation = "foreground"
	_, err := a.Run(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil
	}
	return err
}

// fromSDK converts rel, merging its values the way `helm get values --all`
// does, without reading the release a second time.
func fromSDK(rel *release.Release) (*Release, error) {
	out := &Release{Name: rel.Name, Revision: rel.Version, Config: plainMap(rel.Config), Values: map[string]any{}, Manifest: rel.Manifest}
	if rel.Info != nil {
		out.Status = rel.Info.Status.String()
	}
	if rel.Chart != nil {
		if rel.Chart.Metadata != nil {
			out.ChartVersion = rel.Chart.Metadata.Version
		}
		for _, crd := range rel.Chart.CRDObjects() {
			out.CRDFiles = append(out.CRDFiles, crd.Name)
		}
		vals, err := chartutil.CoalesceValues(rel.Chart, rel.Config)
		if err != nil {
			return nil, fmt.Errorf("merging the values of helm release %s: %w", rel.Name, err)
		}
		out.Values = plainMap(vals)
	}
	return out, nil
}

// plainMap copies values, with every nested table as a map[string]any.
func plainMap(values map[string]any) map[string]any {
	if values == nil {
		return nil
	}
	out := make(map[string]any, len(values))
	for k, v := range values {
		out[k] = plain(v)
	}
	return out
}

// plain returns v with its tables, chartutil.Values among them, as
// map[string]any.
func plain(v any) any {
	switch v := v.(type) {
	case chartutil.Values:
		return plainMap(v)
	case map[string]any:
		return plainMap(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = plain(e)
		}
		return out
	}
	return v
}
