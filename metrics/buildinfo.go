package metrics

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// modulePath is the anarchon module, whose version build_info reports.
const modulePath = "github.com/anarchon/anarchon"

// newBuildInfo is the build_info gauge: always 1, with the anarchon module's
// version and the Go version as labels.
func newBuildInfo(ns string) prometheus.Gauge {
	version := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = moduleVersion(bi)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Name: "build_info",
		Help:        "Always 1; its labels are the version of the anarchon module this program was built with, and the Go version.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

// moduleVersion is the anarchon module's version in bi: the version the
// program requires ("v1.2.0", a pseudo-version), the replacement's, or
// "(devel)" for a module built from a directory (a replace to a local clone, or
// anarchon's own programs and tests); "unknown" when bi does not list it.
func moduleVersion(bi *debug.BuildInfo) string {
	if bi.Main.Path == modulePath {
		return orDevel(bi.Main.Version)
	}
	for _, d := range bi.Deps {
		if d.Path != modulePath {
			continue
		}
		if d.Replace != nil {
			return orDevel(d.Replace.Version)
		}
		return orDevel(d.Version)
	}
	return "unknown"
}

func orDevel(v string) string {
	if v == "" {
		return "(devel)"
	}
	return v
}
