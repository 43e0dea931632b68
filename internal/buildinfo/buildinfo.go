// Package buildinfo holds the build information of kubectl-offload and
// offload-agent, set at link time. It is a leaf that both binaries import.
package buildinfo

import (
	"fmt"
	"runtime"
)

// These are set at build time with -ldflags "-X ...".
var (
	// Version is the semantic version of the build, such as v0.1.0.
	Version = "v0.0.0-dev"
	// Commit is the git commit the build was made from.
	Commit = "unknown"
	// BuildDate is the RFC 3339 time of the build.
	BuildDate = "unknown"
)

// Info describes one binary build.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the build information of the running binary.
func Get() Info {
	return Info{
		Version:   Version,
		Commit:    Commit,
		BuildDate: BuildDate,
		GoVersion: runtime.Version(),
		Platform:  fmt.Sprintf("%s/%s", runtime.GOOS, runtime.GOARCH),
	}
}

// String returns the one-line form of the build information.
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s %s)", i.Version, i.Commit, i.BuildDate, i.GoVersion, i.Platform)
}
