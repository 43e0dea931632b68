package install

import (
	"context"
	"errors"
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
)

// Helm is the part of the Helm SDK that install, upgrade and uninstall use.
// Keeping it this small keeps a move to Helm 4 to one file.
type Helm interface {
	// Release returns the deployed release called name, or nil when there is none.
	Release(name string) (*release.Release, error)
	// Install installs ch as release name; with dryRun it only renders.
	Install(ctx context.Context, name string, ch *chart.Chart, vals map[string]any, dryRun bool) (*release.Release, error)
	// Upgrade upgrades release name to ch; with dryRun it only renders.
	Upgrade(ctx context.Context, name string, ch *chart.Chart, vals map[string]any, dryRun bool) (*release.Release, error)
	// Uninstall removes release name and waits up to timeout for its objects to go.
	Uninstall(name string, timeout time.Duration) error
}

type sdkHelm struct {
	cfg       *action.Configuration
	namespace string
}

// NewHelm returns a Helm backed by the Helm v3 SDK for releases in namespace.
func NewHelm(cfg *action.Configuration, namespace string) Helm {
	return &sdkHelm{cfg: cfg, namespace: namespace}
}

func (h *sdkHelm) Release(name string) (*release.Release, error) {
	rel, err := action.NewGet(h.cfg).Run(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading release %s: %w", name, err)
	}
	return rel, nil
}

func (h *sdkHelm) Install(ctx context.Context, name string, ch *chart.Chart, vals map[string]any, dryRun bool) (*release.Release, error) {
	a := action.NewInstall(h.cfg)
	a.ReleaseName, a.Namespace = name, h.namespace
	// The CLI applies the CRDs itself, on install and on upgrade alike.
	a.SkipCRDs = true
	if dryRun {
		// "server" lets templates look up the cluster (the existing identity) without writing.
		a.DryRun, a.DryRunOption = true, "server"
	}
	return a.RunWithContext(ctx, ch, vals)
}

func (h *sdkHelm) Upgrade(ctx context.Context, name string, ch *chart.Chart, vals map[string]any, dryRun bool) (*release.Release, error) {
	a := action.NewUpgrade(h.cfg)
	a.Namespace = h.namespace
	a.SkipCRDs = true
	a.MaxHistory = 5
	if dryRun {
		a.DryRun, a.DryRunOption = true, "server"
	}
	return a.RunWithContext(ctx, name, ch, vals)
}

func (h *sdkHelm) Uninstall(name string, timeout time.Duration) error {
	a := action.NewUninstall(h.cfg)
	a.Wait, a.Timeout = true, timeout
	a.DeletionPropagation = "foreground"
	_, err := a.Run(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil
	}
	return err
}
