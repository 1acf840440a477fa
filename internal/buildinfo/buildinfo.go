// Package buildinfo says which build of metastore is running: its version
// and the version control revision it was built from, as the go command
// records them in the binary (runtime/debug.ReadBuildInfo), and the
// metastore_build_info metric that exports them.
package buildinfo

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Info describes the running build.
type Info struct {
	// Version is the release: set at link time, else the module version
	// the go command recorded, else "devel".
	Version string `json:"version"`
	// Revision is the version control commit the binary was built from
	// (vcs.revision); empty when the go command recorded none (go test,
	// go run outside a repository, -buildvcs=false).
	Revision string `json:"revision,omitempty"`
	// Time is the commit time of Revision, RFC 3339 (vcs.time).
	Time string `json:"time,omitempty"`
	// Modified is true when the work tree had uncommitted changes at
	// build time (vcs.modified).
	Modified bool `json:"modified"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"go_version"`
}

// Read returns the running build's Info. version, when not empty, is the
// release set at link time and takes precedence over the module version.
func Read(version string) Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return fromBuildInfo(bi, version)
}

func fromBuildInfo(bi *debug.BuildInfo, version string) Info {
	info := Info{Version: version, GoVersion: runtime.Version()}
	if bi == nil {
		if info.Version == "" {
			info.Version = "devel"
		}
		return info
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// Collector returns the metastore_build_info gauge: always 1, with the
// build's version, revision and Go version as labels.
func Collector(info Info) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "metastore_build_info",
		Help: "Always 1; the labels name the running build: version, vcs revision (empty if not recorded) and Go version.",
	}, []string{"version", "revision", "go_version"})
	g.WithLabelValues(info.Version, info.Revision, info.GoVersion).Set(1)
	return g
}
