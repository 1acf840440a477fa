// Package workload drives the benchmark's workloads against a system under
// test, through sut.System only (and sut.Extras for the metastore's own):
//
//   - throughput: W workers, one task each, over max(1, W/TasksPerJob)
//     jobs; per job a coordinator begins the next epoch as soon as all its
//     tasks acknowledged the last. Acks/s, epochs/s, ack latency
//     percentiles over a measured window after a warmup, and the members'
//     CPU time per 1,000 acks.
//   - manifest: per manifest size, a one-task job preloaded to that size,
//     then acks one after the other: time per ack and bytes written per ack.
//   - restore: reads of the largest manifest, from the leader and stale
//     from a follower.
//   - failover: kill the leader, time to the first successful ack.
//   - gc, resume, footprint: the metastore's sut.Extras, called and
//     recorded.
//
// Results are recorded in the report package's types.
package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/metastore/metastore/bench/internal/report"
	"github.com/metastore/metastore/bench/internal/sut"
)

// Workload names.
const (
	Throughput = "throughput"
	Manifest   = "manifest"
	Restore    = "restore"
	Failover   = "failover"
	GC         = "gc"
	Resume     = "resume"
	Footprint  = "footprint"
)

// All lists every workload in the order Run runs them.
var All = []string{Throughput, Manifest, Restore, Failover, GC, Resume, Footprint}

// Params are the parameters of the workloads.
type Params struct {
	// Workloads are the workloads to run (names from All).
	Workloads []string

	// Concurrency lists the worker counts of the throughput sweep.
	Concurrency []int
	// TasksPerJob sets the jobs of a throughput point: max(1, W/TasksPerJob).
	TasksPerJob int
	// Duration is the measured window of a throughput point; Warmup runs
	// before it, unmeasured.
	Duration time.Duration
	Warmup   time.Duration
	// SegmentsPerAck is the size of each ack's delta.
	SegmentsPerAck int
	// KeyBatch is how many keys a worker fetches with one Keys call.
	KeyBatch int

	// ManifestSizes are the manifest sizes (segments) of the manifest
	// workload; the largest is read by the restore workload.
	ManifestSizes []int
	// ManifestAcks are the acks measured at each size.
	ManifestAcks int
	// RestoreReads are the measured reads per consistency.
	RestoreReads int

	// FailoverKills are the leader kills.
	FailoverKills int
	// FailoverCallTimeout bounds each Ack attempt after a kill.
	FailoverCallTimeout time.Duration

	// Arguments of the metastore's Extras.
	GCObjects      int
	ResumeTasks    int
	ResumeStateful int
	FootprintBlobs int
	FootprintJobs  int
}

// DefaultParams are the parameters of a full run.
func DefaultParams() Params {
	return Params{
		Workloads:           slices.Clone(All),
		Concurrency:         []int{1, 4, 16, 64},
		TasksPerJob:         4,
		Duration:            20 * time.Second,
		Warmup:              5 * time.Second,
		SegmentsPerAck:      3,
		KeyBatch:            300,
		ManifestSizes:       []int{1000, 100000},
		ManifestAcks:        200,
		RestoreReads:        20,
		FailoverKills:       10,
		FailoverCallTimeout: 500 * time.Millisecond,
		GCObjects:           20000,
		ResumeTasks:         100,
		ResumeStateful:      10,
		FootprintBlobs:      1000000,
		FootprintJobs:       1000,
	}
}

// SmokeParams are the parameters of a smoke run: every workload, tiny
// sizes, seconds in all per system.
func SmokeParams() Params {
	p := DefaultParams()
	p.Concurrency = []int{1, 4}
	p.Duration = 2 * time.Second
	p.Warmup = 500 * time.Millisecond
	p.ManifestSizes = []int{100, 1000}
	p.ManifestAcks = 20
	p.RestoreReads = 5
	p.FailoverKills = 2
	p.GCObjects = 200
	p.ResumeTasks = 20
	p.ResumeStateful = 4
	p.FootprintBlobs = 2000
	p.FootprintJobs = 10
	return p
}

// Validate reports the first parameter that makes no sense.
func (p Params) Validate() error {
	for _, w := range p.Workloads {
		if !slices.Contains(All, w) {
			return fmt.Errorf("unknown workload %q (known: %s)", w, strings.Join(All, ","))
		}
	}
	positive := func(name string, v int) error {
		if v < 1 {
			return fmt.Errorf("%s must be at least 1, not %d", name, v)
		}
		return nil
	}
	if len(p.Concurrency) == 0 {
		return errors.New("no concurrency to measure")
	}
	for _, w := range p.Concurrency {
		if err := positive("concurrency", w); err != nil {
			return err
		}
	}
	if len(p.ManifestSizes) == 0 {
		return errors.New("no manifest size to measure")
	}
	for _, n := range p.ManifestSizes {
		if err := positive("manifest size", n); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		name string
		v    int
	}{
		{"tasks per job", p.TasksPerJob}, {"segments per ack", p.SegmentsPerAck}, {"key batch", p.KeyBatch},
		{"manifest acks", p.ManifestAcks}, {"restore reads", p.RestoreReads}, {"failover kills", p.FailoverKills},
		{"GC objects", p.GCObjects}, {"resume tasks", p.ResumeTasks}, {"footprint blobs", p.FootprintBlobs},
		{"footprint jobs", p.FootprintJobs},
	} {
		if err := positive(c.name, c.v); err != nil {
			return err
		}
	}
	if p.ResumeStateful < 0 || p.ResumeStateful > p.ResumeTasks {
		return fmt.Errorf("resume stateful tasks must be within 0..%d, not %d", p.ResumeTasks, p.ResumeStateful)
	}
	if p.Duration <= 0 || p.Warmup < 0 || p.FailoverCallTimeout <= 0 {
		return errors.New("duration and failover call timeout must be positive, warmup not negative")
	}
	return nil
}

// Record returns the parameters as results.json records them.
func (p Params) Record() report.Params {
	return report.Params{
		Workloads:                  slices.Clone(p.Workloads),
		DurationSeconds:            p.Duration.Seconds(),
		WarmupSeconds:              p.Warmup.Seconds(),
		Concurrency:                slices.Clone(p.Concurrency),
		TasksPerJob:                p.TasksPerJob,
		SegmentsPerAck:             p.SegmentsPerAck,
		KeyBatch:                   p.KeyBatch,
		ManifestSizes:              slices.Clone(p.ManifestSizes),
		ManifestAcks:               p.ManifestAcks,
		RestoreReads:               p.RestoreReads,
		FailoverKills:              p.FailoverKills,
		FailoverCallTimeoutSeconds: p.FailoverCallTimeout.Seconds(),
		GCObjects:                  p.GCObjects,
		ResumeTasks:                p.ResumeTasks,
		ResumeStateful:             p.ResumeStateful,
		FootprintBlobs:             p.FootprintBlobs,
		FootprintJobs:              p.FootprintJobs,
	}
}

func (p Params) runs(w string) bool { return slices.Contains(p.Workloads, w) }

// Versioned is implemented by systems that report the version of the
// server they run (read after Start).
type Versioned interface {
	PeerVersion() string
}

// Counted is implemented by systems that count events of their own over
// the run (conflict retries, re-reads), recorded with the results.
type Counted interface {
	Counters() map[string]uint64
}

// Run runs the selected workloads against sys, which must be started, and
// returns what they measured. A workload that fails is recorded in the
// result's Errors and the next one runs; Run returns early only when ctx
// ends. Progress goes to logger (nil: none).
func Run(ctx context.Context, sys sut.System, p Params, logger *log.Logger) (res report.System) {
	if logger == nil {
		logger = log.New(io.Discard, "", 0)
	}
	name := sys.Name()
	res = report.System{Name: name}
	if v, ok := sys.(Versioned); ok {
		res.Version = v.PeerVersion()
	}
	if c, ok := sys.(Counted); ok {
		defer func() {
			res.Counters = c.Counters()
			logger.Printf("%s: counters %v", name, res.Counters)
		}()
	}
	fail := func(workload string, err error) {
		res.Errors = append(res.Errors, report.WorkloadError{Workload: workload, Error: err.Error()})
		logger.Printf("%s: %s failed: %v", name, workload, err)
	}

	if p.runs(Throughput) {
		for _, w := range p.Concurrency {
			if ctx.Err() != nil {
				return res
			}
			logger.Printf("%s: throughput with %d workers over %d jobs, %s after %s warmup", name, w, jobsFor(w, p.TasksPerJob), p.Duration, p.Warmup)
			pt, err := MeasureThroughput(ctx, sys, p, w)
			if err != nil {
				fail(fmt.Sprintf("%s W=%d", Throughput, w), err)
				continue
			}
			res.Throughput = append(res.Throughput, pt)
			logger.Printf("%s: W=%d: %.0f acks/s, %.1f epochs/s, ack p50 %.2f ms p99 %.2f ms", name, w, pt.AcksPerSecond, pt.EpochsPerSecond, pt.AckLatency.P50MS, pt.AckLatency.P99MS)
		}
	}

	var large *Preloaded
	if p.runs(Manifest) && ctx.Err() == nil {
		logger.Printf("%s: manifest cost at sizes %v, %d acks each", name, p.ManifestSizes, p.ManifestAcks)
		mc, pre, err := MeasureManifestCost(ctx, sys, p)
		if mc != nil && len(mc.Points) > 0 {
			res.Manifest = mc
			for _, pt := range mc.Points {
				logger.Printf("%s: %d segments: mean %.2f ms per ack, %.0f bytes per ack", name, pt.Size, pt.AckTime.MeanMS, pt.BytesPerAck)
			}
		}
		if err != nil {
			fail(Manifest, err)
		}
		large = pre
	}

	if p.runs(Restore) && ctx.Err() == nil {
		size := slices.Max(p.ManifestSizes)
		if large == nil || large.Segments < size {
			logger.Printf("%s: restore: preloading a manifest of %d segments", name, size)
			pre, err := NewPreloaded(ctx, sys, "restore", size)
			if err != nil {
				fail(Restore, err)
			}
			large = pre
		}
		if large != nil {
			logger.Printf("%s: restore: %d reads of %d segments per consistency", name, p.RestoreReads, large.Segments)
			r, err := MeasureRestore(ctx, sys, *large, p.RestoreReads)
			if err != nil {
				fail(Restore, err)
			} else {
				res.Restore = r
				logger.Printf("%s: restore: leader p50 %.2f ms, follower p50 %.2f ms", name, r.Leader.P50MS, r.Follower.P50MS)
			}
		}
	}

	if p.runs(Failover) && ctx.Err() == nil {
		logger.Printf("%s: failover: %d leader kills", name, p.FailoverKills)
		f, err := MeasureFailover(ctx, sys, p, logger)
		if f != nil && len(f.Samples) > 0 {
			res.Failover = f
			logger.Printf("%s: failover: median %.3f s, p90 %.3f s, max %.3f s", name, f.MedianSeconds, f.P90Seconds, f.MaxSeconds)
		}
		if err != nil {
			fail(Failover, err)
		}
	}

	if x, ok := sys.(sut.Extras); ok {
		extras := &report.Extras{}
		if p.runs(GC) && ctx.Err() == nil {
			logger.Printf("%s: gc of %d objects", name, p.GCObjects)
			if r, err := x.GC(ctx, p.GCObjects); err != nil {
				fail(GC, err)
			} else {
				extras.GC = &r
			}
		}
		if p.runs(Resume) && ctx.Err() == nil {
			logger.Printf("%s: resume of %d tasks (%d stateful)", name, p.ResumeTasks, p.ResumeStateful)
			if r, err := x.Resume(ctx, p.ResumeTasks, p.ResumeStateful); err != nil {
				fail(Resume, err)
			} else {
				extras.Resume = &r
			}
		}
		if p.runs(Footprint) && ctx.Err() == nil {
			logger.Printf("%s: footprint of %d blobs over %d jobs", name, p.FootprintBlobs, p.FootprintJobs)
			// A footprint that failed after measuring the load keeps its
			// figures (the error is in the result too).
			r, err := x.Footprint(ctx, p.FootprintBlobs, p.FootprintJobs)
			if err != nil {
				fail(Footprint, err)
			}
			if err == nil || r.Measured() {
				extras.Footprint = &r
			}
			if r.RestartSecs > 0 {
				logger.Printf("%s: footprint: member %s restarted, serving after %.2f s, caught up to index %d after %.2f s",
					name, r.RestartMember, r.RestartServeSecs, r.RestartIndex, r.RestartSecs)
			}
		}
		if extras.GC != nil || extras.Resume != nil || extras.Footprint != nil {
			res.Extras = extras
		}
	}
	return res
}
