package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/bench/internal/report"
	"github.com/metastore/metastore/bench/internal/workload"
)

func TestParseFlagsDefaults(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.systems, []string{"metastore", "etcd", "etcd-batched", "etcd-cas", "zookeeper", "zookeeper-cas"}) || cfg.smoke || cfg.keep {
		t.Errorf("config %+v", cfg)
	}
	if !reflect.DeepEqual(cfg.params, workload.DefaultParams()) {
		t.Errorf("params %+v, want the defaults", cfg.params)
	}
}

func TestParseFlagsSmoke(t *testing.T) {
	cfg, err := parseFlags([]string{"--concurrency", "2,8", "--smoke", "--systems", "etcd", "--gc-objects=50"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := workload.SmokeParams()
	want.Concurrency = []int{2, 8}
	want.GCObjects = 50
	if !reflect.DeepEqual(cfg.params, want) {
		t.Errorf("params %+v\nwant %+v", cfg.params, want)
	}
	if !cfg.smoke || !reflect.DeepEqual(cfg.systems, []string{"etcd"}) {
		t.Errorf("config %+v", cfg)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--systems", "metastore,postgres"},
		{"--systems", "etcd,etcd"},
		{"--systems", ""},
		{"--concurrency", "1,x"},
		{"--concurrency", "0"},
		{"--workloads", "throughput,nope"},
		{"--manifest-acks", "0"},
		{"--duration", "0s"},
		{"extra"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

// TestMetastoreAlone: the metastore whose client sends every ack alone
// is a system of its own name, asked for by name, never by default.
func TestMetastoreAlone(t *testing.T) {
	cfg, err := parseFlags([]string{"--systems", "metastore,metastore-alone"}, io.Discard)
	if err != nil || !reflect.DeepEqual(cfg.systems, []string{"metastore", "metastore-alone"}) {
		t.Fatalf("--systems metastore,metastore-alone: %+v %v", cfg.systems, err)
	}
	systems, err := newSystems(context.Background(), cfg.systems, systemOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if systems[0].Name() != "metastore" || systems[1].Name() != "metastore-alone" {
		t.Errorf("names %q and %q", systems[0].Name(), systems[1].Name())
	}
}

func TestNewSystemsUnknown(t *testing.T) {
	if _, err := newSystems(context.Background(), []string{"postgres"}, systemOptions{}); err == nil {
		t.Error("unknown system accepted")
	}
}

// TestSmoke runs the command in smoke mode against the real systems. It
// needs their servers (installed when missing, as root) and minutes, so
// it runs only with METASTORE_BENCH_SMOKE=1; METASTORE_BENCH_SYSTEMS
// narrows the systems (comma-separated).
func TestSmoke(t *testing.T) {
	if os.Getenv("METASTORE_BENCH_SMOKE") != "1" {
		t.Skip("set METASTORE_BENCH_SMOKE=1 to run the benchmark in smoke mode against the real systems")
	}
	out := t.TempDir()
	args := []string{"--smoke", "--out", out}
	if s := os.Getenv("METASTORE_BENCH_SYSTEMS"); s != "" {
		args = append(args, "--systems", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	status := run(ctx, args, &stdout, &stderr)
	t.Logf("stdout:\n%s", stdout.String())
	if status != exitOK {
		t.Fatalf("exit status %d; stderr:\n%s", status, stderr.String())
	}
	res, err := report.ReadJSON(filepath.Join(out, report.JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Systems) == 0 || len(res.Goals) == 0 {
		t.Errorf("results %+v", res)
	}
	for _, s := range res.Systems {
		if len(s.Throughput) == 0 || s.Manifest == nil || s.Restore == nil || s.Failover == nil {
			t.Errorf("%s: a workload is missing from the results", s.Name)
		}
	}
	for _, name := range []string{report.TableFile, "throughput.svg", "latency_p99.svg", "manifest.svg"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Error(err)
		}
	}
}

func TestEnsureInstalled(t *testing.T) {
	missing := errors.New("etcd server binary not found: install the Debian package etcd-server")
	installed := false
	spec := systemSpec{
		debianPackage: "etcd-server",
		find: func() error {
			if installed {
				return nil
			}
			return missing
		},
		install: func(context.Context) error { installed = true; return nil },
	}
	names := []string{"metastore", "etcd", "zookeeper"}
	err := ensureInstalled(context.Background(), "etcd", spec, names, systemOptions{})
	if os.Geteuid() != 0 {
		// Not root: no install, and the message says what to do.
		if err == nil || installed || !strings.Contains(err.Error(), "etcd-server") || !strings.Contains(err.Error(), "--systems metastore,zookeeper") {
			t.Errorf("not root: %v (installed %v)", err, installed)
		}
		return
	}
	if err != nil || !installed {
		t.Errorf("root: %v (installed %v)", err, installed)
	}
	spec.install = func(context.Context) error { return errors.New("apt-get: no network") }
	installed = false
	err = ensureInstalled(context.Background(), "etcd", spec, names, systemOptions{})
	if err == nil || !strings.Contains(err.Error(), "etcd-server") || !strings.Contains(err.Error(), "--systems metastore,zookeeper") {
		t.Errorf("failed install: %v", err)
	}
}

// TestReportRerenders: --report writes an earlier run's report again,
// goals judged by this build, and runs nothing.
func TestReportRerenders(t *testing.T) {
	dir := t.TempDir()
	res := &report.Results{Systems: []report.System{{Name: report.Metastore,
		Restore: &report.Restore{Segments: 100600, Reads: 20, Leader: report.Latency{Count: 20, P50MS: 90}}}, {Name: report.Etcd,
		Restore: &report.Restore{Segments: 100600, Reads: 20, Leader: report.Latency{Count: 20, P50MS: 100}}}}}
	report.Finalize(res)
	res.Goals = nil // as an earlier build that lacked a goal wrote it
	raw, err := report.MarshalJSON(res)
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "results.json")
	if err := os.WriteFile(in, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "again")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"--report", in, "--out", out}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	txt, err := os.ReadFile(filepath.Join(out, "results.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(txt), "PASS  restore read") || !strings.Contains(stdout.String(), "results: "+out) {
		t.Fatalf("re-rendered report lacks the restore goal:\n%s", txt)
	}
	if code := run(context.Background(), []string{"--report", filepath.Join(dir, "missing.json")}, &stdout, &stderr); code != exitUsage {
		t.Fatalf("missing file: exit %d, want %d", code, exitUsage)
	}
}
