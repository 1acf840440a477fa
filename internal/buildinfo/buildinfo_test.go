package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "-trimpath", Value: "true"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-11-30T10:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}
	for _, tc := range []struct {
		name    string
		bi      *debug.BuildInfo
		version string
		want    Info
	}{
		{"no build info", nil, "", Info{Version: "devel", GoVersion: runtime.Version()}},
		{"no build info, link-time version", nil, "v1.2.3", Info{Version: "v1.2.3", GoVersion: runtime.Version()}},
		{"devel module, vcs", &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "(devel)"}, Settings: vcs}, "",
			Info{Version: "devel", Revision: "0123456789abcdef0123456789abcdef01234567", Time: "2026-11-30T10:00:00Z", Modified: true, GoVersion: "go1.99"}},
		{"module version", &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v0.4.0"}}, "",
			Info{Version: "v0.4.0", GoVersion: "go1.99"}},
		{"link-time version wins", &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v0.4.0"}, Settings: vcs[:3]}, "v9.9.9",
			Info{Version: "v9.9.9", Revision: "0123456789abcdef0123456789abcdef01234567", GoVersion: "go1.99"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fromBuildInfo(tc.bi, tc.version); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(Collector(Info{Version: "v1.0.0", Revision: "abc", GoVersion: "go1.99"}))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 1 || families[0].GetName() != "metastore_build_info" || len(families[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, want one metastore_build_info series", families)
	}
	m := families[0].GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "v1.0.0", "revision": "abc", "go_version": "go1.99"}
	if len(labels) != len(want) {
		t.Errorf("labels %v, want %v", labels, want)
	}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, labels[k], v)
		}
	}
	if v := m.GetGauge().GetValue(); v != 1 {
		t.Errorf("value %v, want 1", v)
	}
}
