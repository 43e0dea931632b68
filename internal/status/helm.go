package status

import (
	"errors"
	"fmt"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/storage/driver"
)

// Helm is the part of the Helm SDK that status uses. Keeping it this small
// lets tests substitute it and keeps a move to Helm 4 to one file.
type Helm interface {
	// Release returns the latest revision of the release called name, or
	// nil when there is none.
	Release(name string) (*Release, error)
}

// Release is what status reads of the installed Helm release.
type Release struct {
	// Name is the release name.
	Name string
	// Revision is the release revision.
	Revision int
	// Status is Helm's status of the release, such as deployed or failed.
	Status string
	// ChartVersion is the version of the installed chart.
	ChartVersion string
	// Values are the chart's default values merged with the user-supplied
	// ones, as `helm get values --all` shows them.
	Values map[string]any
}

type sdkHelm struct {
	cfg *action.Configuration
}

// NewHelm returns a Helm backed by the Helm v3 SDK.
func NewHelm(cfg *action.Configuration) Helm {
	return sdkHelm{cfg: cfg}
}

// Release reads the release once and merges its values the way
// `helm get values --all` does, without reading the release a second time.
func (h sdkHelm) Release(name string) (*Release, error) {
	rel, err := action.NewGet(h.cfg).Run(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading helm release %s: %w", name, err)
	}
	out := &Release{Name: rel.Name, Revision: rel.Version, Values: map[string]any{}}
	if rel.Info != nil {
		out.Status = rel.Info.Status.String()
	}
	if rel.Chart != nil {
		if rel.Chart.Metadata != nil {
			out.ChartVersion = rel.Chart.Metadata.Version
		}
		vals, err := chartutil.CoalesceValues(rel.Chart, rel.Config)
		if err != nil {
			return nil, fmt.Errorf("merging the values of helm release %s: %w", name, err)
		}
		out.Values = vals.AsMap()
	}
	return out, nil
}

// lookup returns the value at path in nested Helm values, or nil.
func lookup(values map[string]any, path ...string) any {
	var cur any = values
	for _, key := range path {
		switch m := cur.(type) {
		case map[string]any:
			cur = m[key]
		case chartutil.Values:
			cur = m[key]
		default:
			return nil
		}
	}
	return cur
}

// stringValue returns the string at path in nested Helm values, or "".
func stringValue(values map[string]any, path ...string) string {
	s, _ := lookup(values, path...).(string)
	return s
}
