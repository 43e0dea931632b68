// Package charts embeds the offload Helm chart into the plugin, so the
// plugin always installs the chart of its own version.
package charts

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
)

//go:embed all:offload
var embedded embed.FS

// Offload returns the files of the offload chart, rooted at the chart directory.
func Offload() fs.FS {
	sub, err := fs.Sub(embedded, "offload")
	if err != nil {
		panic(err) // the directory is embedded at build time
	}
	return sub
}

// loadFiles reads every file of a chart file system for Helm's loader.
func loadFiles(fsys fs.FS) ([]*loader.BufferedFile, error) {
	var files []*loader.BufferedFile
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		files = append(files, &loader.BufferedFile{Name: path, Data: data})
		return nil
	})
	return files, err
}

// Load returns the embedded offload chart, stamped with version: the chart's
// version (without a leading v) and appVersion, which is also the default
// agent image tag.
func Load(version string) (*chart.Chart, error) {
	files, err := loadFiles(Offload())
	if err != nil {
		return nil, fmt.Errorf("reading the embedded chart: %w", err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("loading the embedded chart: %w", err)
	}
	c.Metadata.Version = strings.TrimPrefix(version, "v")
	c.Metadata.AppVersion = version
	return c, nil
}
