package workload

import (
	"bytes"
	"context"
	"errors"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/bench/internal/report"
	"github.com/metastore/metastore/bench/internal/sut"
)

// testParams are tiny parameters: the whole of Run takes about a second
// per system.
func testParams() Params {
	p := SmokeParams()
	p.Concurrency = []int{1, 4, 9}
	p.Duration = 500 * time.Millisecond
	p.Warmup = 100 * time.Millisecond
	p.KeyBatch = 10
	p.ManifestSizes = []int{10, 100}
	p.ManifestAcks = 10
	p.RestoreReads = 3
	p.FailoverKills = 3
	p.FailoverCallTimeout = 50 * time.Millisecond
	return p
}

func started(t *testing.T, s sut.System) {
	t.Helper()
	if err := s.Start(context.Background(), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
}

// TestRunAgainstFakes runs every workload against three fake systems and
// writes the report, as a run of the command does.
func TestRunAgainstFakes(t *testing.T) {
	p := testParams()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var logs bytes.Buffer
	logger := log.New(&logs, "", 0)
	res := &report.Results{Started: time.Now(), Params: p.Record(), Machine: report.DetectMachine()}
	fakes := map[string]*fake{}
	for _, name := range []string{report.Metastore, report.Etcd, report.ZooKeeper} {
		f := newFake(name)
		fakes[name] = f
		var sys sut.System = f
		if name == report.Metastore {
			sys = fakeMetastore{f}
		}
		started(t, sys)
		res.Systems = append(res.Systems, Run(ctx, sys, p, logger))
	}
	res.Finished = time.Now()
	report.Finalize(res)

	for _, s := range res.Systems {
		if len(s.Errors) > 0 {
			t.Errorf("%s: errors %+v", s.Name, s.Errors)
		}
		if len(s.Throughput) != len(p.Concurrency) {
			t.Fatalf("%s: %d throughput points", s.Name, len(s.Throughput))
		}
		acks := 0
		for i, pt := range s.Throughput {
			w := p.Concurrency[i]
			if pt.Workers != w || pt.Jobs != max(1, w/4) {
				t.Errorf("%s: point %d has W=%d J=%d", s.Name, i, pt.Workers, pt.Jobs)
			}
			// A loaded machine may starve a short window entirely; the
			// figures of a window must agree with each other.
			acks += pt.Acks
			if pt.AckLatency.Count != pt.Acks || (pt.Acks > 0) != (pt.AcksPerSecond > 0) {
				t.Errorf("%s W=%d: %+v", s.Name, w, pt)
			}
			// Every ack costs at least the fake's write latency.
			if pt.Acks > 0 && (pt.AckLatency.P50MS < 0.2 || pt.AckLatency.P50MS > pt.AckLatency.P99MS || pt.AckLatency.P99MS > pt.AckLatency.P999MS) {
				t.Errorf("%s W=%d: latency %+v", s.Name, w, pt.AckLatency)
			}
			if !pt.CPUMeasured || pt.RSSBytes <= 0 {
				t.Errorf("%s W=%d: CPU or RSS of this process not read: %+v", s.Name, w, pt)
			}
		}
		if acks == 0 {
			t.Errorf("%s: no ack in any window", s.Name)
		}
		m := s.Manifest
		if m == nil || len(m.Points) != 2 || m.Points[0].Size != 10 || m.Points[1].Size != 100 {
			t.Fatalf("%s: manifest %+v", s.Name, m)
		}
		if m.BytesMethod != report.BytesProcIO {
			t.Errorf("%s: bytes method %s (this process's /proc/self/io should be readable)", s.Name, m.BytesMethod)
		}
		for _, pt := range m.Points {
			if pt.AckTime.Count != p.ManifestAcks {
				t.Errorf("%s: manifest point %+v", s.Name, pt)
			}
		}
		if s.Restore == nil || s.Restore.Segments != 100+p.ManifestAcks*p.SegmentsPerAck || s.Restore.Leader.Count != p.RestoreReads || s.Restore.Follower.Count != p.RestoreReads {
			t.Errorf("%s: restore %+v", s.Name, s.Restore)
		}
		f := s.Failover
		if f == nil || len(f.Samples) != p.FailoverKills || len(f.Attempts) != p.FailoverKills || len(f.KillSeconds) != p.FailoverKills {
			t.Fatalf("%s: failover %+v", s.Name, f)
		}
		for _, x := range f.Samples {
			// No ack succeeds before the fake elects a new leader.
			if x < fakes[s.Name].electionDelay.Seconds() || x > 10 {
				t.Errorf("%s: failover sample %v s", s.Name, x)
			}
		}
		if f.MedianSeconds > f.P90Seconds || f.P90Seconds > f.MaxSeconds {
			t.Errorf("%s: failover summary %+v", s.Name, f)
		}
		if k := fakes[s.Name].kills; k != p.FailoverKills {
			t.Errorf("%s: %d kills", s.Name, k)
		}
		for _, mb := range fakes[s.Name].members {
			if !mb.alive {
				t.Errorf("%s: member %s left down", s.Name, mb.ID)
			}
		}
		// Coordinators wait for every ack of an epoch: the acks the fake
		// took are whole epochs (one-task jobs' preloads aside).
		if fk := fakes[s.Name]; fk.acks == 0 || fk.complete == 0 {
			t.Errorf("%s: fake saw %d acks, %d epochs", s.Name, fk.acks, fk.complete)
		}
	}

	ms := res.System(report.Metastore)
	if ms.Extras == nil || ms.Extras.GC == nil || ms.Extras.GC.Deleted != p.GCObjects || ms.Extras.Resume == nil || ms.Extras.Footprint == nil {
		t.Errorf("metastore extras %+v", ms.Extras)
	}
	if ms.Version != "fake-1" {
		t.Errorf("version %q", ms.Version)
	}
	if res.System(report.Etcd).Extras != nil {
		t.Error("extras recorded for a system without them")
	}
	if len(res.Ratios) == 0 || len(res.Goals) != 10 {
		t.Errorf("%d ratios, %d goals", len(res.Ratios), len(res.Goals))
	}

	dir := t.TempDir()
	if _, err := report.WriteAll(dir, res); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{report.JSONFile, report.TableFile, "throughput.svg", "latency_p99.svg", "manifest.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s not written: %v", name, err)
		}
	}
	if !strings.Contains(logs.String(), "zookeeper: failover round 3") {
		t.Errorf("progress log lacks the failover rounds:\n%s", logs.String())
	}
	if testing.Verbose() {
		b, _ := os.ReadFile(filepath.Join(dir, report.TableFile))
		t.Logf("\n%s", b)
	}
}

// TestThroughputWholeEpochs checks the coordination: with several jobs of
// several tasks, every epoch the fake saw begun completed, and the acks it
// took are whole epochs.
func TestThroughputWholeEpochs(t *testing.T) {
	p := testParams()
	f := newFake(report.Etcd)
	started(t, f)
	pt, err := MeasureThroughput(context.Background(), f, p, 12)
	if err != nil {
		t.Fatal(err)
	}
	if pt.Jobs != 3 {
		t.Errorf("%d jobs, want 3", pt.Jobs)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.acks != 4*f.complete {
		t.Errorf("fake took %d acks for %d complete epochs of 4 tasks", f.acks, f.complete)
	}
	for name, j := range f.jobs {
		if !j.complete {
			t.Errorf("job %s left epoch %d open", name, j.epoch)
		}
	}
	// Epochs and acks of the window: at most one partial epoch per job at
	// each edge.
	if d := pt.Acks - 4*pt.Epochs; d < -4*pt.Jobs || d > 4*pt.Jobs {
		t.Errorf("%d acks but %d epochs in the window", pt.Acks, pt.Epochs)
	}
}

// TestWorkloadFailureRecorded checks that a failing workload is recorded
// and the next ones still run.
func TestWorkloadFailureRecorded(t *testing.T) {
	p := testParams()
	p.Workloads = []string{Throughput, Restore}
	p.Concurrency = []int{4}
	f := newFake(report.Etcd)
	f.failAckAfter = 20
	started(t, f)
	res := Run(context.Background(), f, p, nil)
	if len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error, "injected ack failure") || res.Errors[0].Workload != "throughput W=4" {
		t.Fatalf("errors %+v", res.Errors)
	}
	if len(res.Throughput) != 0 {
		t.Errorf("a failed point was recorded: %+v", res.Throughput)
	}
	// Restore preloads its own job (the manifest workload did not run).
	if res.Restore == nil || res.Restore.Segments != 100 {
		t.Errorf("restore %+v", res.Restore)
	}
	if res.Manifest != nil || res.Failover != nil {
		t.Error("workloads that were not selected ran")
	}
}

// TestFailoverWithoutLeaderForLong checks that the worker keeps retrying
// through a long election, with calls bounded by the call timeout.
func TestFailoverWithoutLeaderForLong(t *testing.T) {
	p := testParams()
	p.FailoverKills = 1
	f := newFake(report.ZooKeeper)
	f.electionDelay = 400 * time.Millisecond
	started(t, f)
	res, err := MeasureFailover(context.Background(), f, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Samples[0]; got < 0.4 || got > 10 {
		t.Errorf("failover took %v s with a 0.4 s election", got)
	}
	if res.Attempts[0] < 2 {
		t.Errorf("%d attempts in 0.4 s of retries every 10 ms", res.Attempts[0])
	}
}

// TestRunInterrupted checks that Run returns promptly once its context
// ends.
func TestRunInterrupted(t *testing.T) {
	p := testParams()
	p.Duration = time.Minute
	f := newFake(report.Metastore)
	started(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	res := Run(ctx, fakeMetastore{f}, p, nil)
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("Run took %s after its context ended", d)
	}
	if len(res.Throughput) != 0 || len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error, "context deadline exceeded") {
		t.Errorf("interrupted run: %+v", res)
	}
}

// TestRunFootprintFailed checks that a footprint that fails after
// measuring the load keeps its figures in the results, with its error
// recorded both in them and in the system's errors (which makes the
// command exit with a failure).
func TestRunFootprintFailed(t *testing.T) {
	p := testParams()
	p.Workloads = []string{Footprint}
	f := newFake(report.Metastore)
	f.failRestore = errors.New("snapshot restore: 503 outcome_unknown")
	started(t, f)
	res := Run(context.Background(), fakeMetastore{f}, p, nil)
	if len(res.Errors) != 1 || res.Errors[0].Workload != Footprint || !strings.Contains(res.Errors[0].Error, "outcome_unknown") {
		t.Errorf("errors %+v, want the footprint's", res.Errors)
	}
	if res.Extras == nil || res.Extras.Footprint == nil {
		t.Fatalf("the footprint's figures were dropped: extras %+v", res.Extras)
	}
	fp := res.Extras.Footprint
	if len(fp.RSSBytes) != 3 || fp.RestartSecs <= 0 || !strings.Contains(fp.RestoreError, "outcome_unknown") {
		t.Errorf("footprint %+v", fp)
	}
}

func TestParamsValidate(t *testing.T) {
	if err := DefaultParams().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if err := SmokeParams().Validate(); err != nil {
		t.Errorf("smoke: %v", err)
	}
	for name, mutate := range map[string]func(*Params){
		"unknown workload": func(p *Params) { p.Workloads = []string{"nope"} },
		"no concurrency":   func(p *Params) { p.Concurrency = nil },
		"zero workers":     func(p *Params) { p.Concurrency = []int{0} },
		"no sizes":         func(p *Params) { p.ManifestSizes = nil },
		"zero acks":        func(p *Params) { p.ManifestAcks = 0 },
		"stateful > tasks": func(p *Params) { p.ResumeStateful = p.ResumeTasks + 1 },
		"zero duration":    func(p *Params) { p.Duration = 0 },
	} {
		p := DefaultParams()
		mutate(&p)
		if p.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	r := DefaultParams().Record()
	if r.DurationSeconds != 20 || r.FailoverCallTimeoutSeconds != 0.5 || len(r.Concurrency) != 4 {
		t.Errorf("Record = %+v", r)
	}
}

func TestProcReaders(t *testing.T) {
	pid := os.Getpid()
	if _, err := cpuSeconds(pid); err != nil {
		t.Error(err)
	}
	if _, err := writeBytes(pid); err != nil {
		t.Error(err)
	}
	if r := membersRSS([]sut.Member{{ID: "self", PID: pid}}); r <= 0 {
		t.Errorf("members' rss %d, want the test process's", r)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, n := range map[string]int{"x": 100, "a/y": 20, "a/b/z": 3} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := dirSize(dir); err != nil || got != 123 {
		t.Errorf("dirSize = %d, %v", got, err)
	}
	// A member whose /proc cannot be read sends the meter to the data
	// directories.
	m := newByteMeter([]sut.Member{{ID: "gone", PID: 0, DataDir: dir}})
	if m.method != report.BytesDataDir {
		t.Errorf("method %s", m.method)
	}
	if got, err := m.total(); err != nil || got != 123 {
		t.Errorf("total = %d, %v", got, err)
	}
}

// counted is a fake that counts its acks, as the baselines count retries.
type counted struct{ *fake }

func (c counted) Counters() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return map[string]uint64{"acks_seen": uint64(c.acks)}
}

func TestCountersRecorded(t *testing.T) {
	p := testParams()
	p.Workloads = []string{Throughput}
	p.Concurrency = []int{4}
	f := newFake(report.Etcd)
	started(t, f)
	res := Run(context.Background(), counted{f}, p, nil)
	if len(res.Errors) != 0 {
		t.Fatalf("errors %+v", res.Errors)
	}
	if res.Counters["acks_seen"] == 0 {
		t.Fatalf("counters %v: the system's counters were not recorded after the run", res.Counters)
	}
}
