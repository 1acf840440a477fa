package workload

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/metastore/metastore/bench/internal/report"
	"github.com/metastore/metastore/bench/internal/sut"
)

// Preloaded is a one-task job whose manifest was preloaded, and the
// segments it holds now.
type Preloaded struct {
	Job, Task string
	Segments  int
	// Next is the next epoch to begin.
	Next uint64
}

// NewPreloaded creates a one-task job and preloads its manifest to size
// segments.
func NewPreloaded(ctx context.Context, sys sut.System, job string, size int) (*Preloaded, error) {
	const task = "t0"
	if err := sys.CreateJob(ctx, job, []string{task}); err != nil {
		return nil, fmt.Errorf("create job %s: %w", job, err)
	}
	next, err := sys.Preload(ctx, job, task, size)
	if err != nil {
		return nil, fmt.Errorf("preload %s/%s to %d segments: %w", job, task, size, err)
	}
	return &Preloaded{Job: job, Task: task, Segments: size, Next: next}, nil
}

// MeasureManifestCost measures, per size of p.ManifestSizes, p.ManifestAcks
// acks of p.SegmentsPerAck segments done one after the other on a task
// whose manifest was preloaded to that size: the duration of each Ack call,
// and the bytes the members wrote over all the cycles (epoch begins and
// key fetches included) per ack. It returns the results of the sizes
// measured (also on error) and the job of the largest size.
func MeasureManifestCost(ctx context.Context, sys sut.System, p Params) (*report.ManifestCost, *Preloaded, error) {
	sizes := slices.Sorted(slices.Values(p.ManifestSizes))
	sizes = slices.Compact(sizes)
	meter := newByteMeter(sys.Members())
	mc := &report.ManifestCost{Acks: p.ManifestAcks, SegmentsPerAck: p.SegmentsPerAck, BytesMethod: meter.method}
	dev := newDeviceMeter(sys.Members())
	var last *Preloaded
	for _, size := range sizes {
		pre, err := NewPreloaded(ctx, sys, fmt.Sprintf("manifest-%d", size), size)
		if err != nil {
			return mc, last, err
		}
		pt, err := manifestPoint(ctx, sys, p, pre, meter, dev)
		if err != nil {
			return mc, last, fmt.Errorf("%d segments: %w", size, err)
		}
		mc.Points = append(mc.Points, pt)
		last = pre
	}
	return mc, last, nil
}

// manifestPoint does the acks of one size, advancing pre. dev, when not
// nil, also counts what reached the devices.
func manifestPoint(ctx context.Context, sys sut.System, p Params, pre *Preloaded, meter *byteMeter, dev *deviceMeter) (report.ManifestPoint, error) {
	size := pre.Segments
	w := newWorker(sys, pre.Job, pre.Task, p.KeyBatch, time.Now())
	// Followers may still be applying the preload (a member acknowledges
	// once a majority has the entries, not once all applied them), or
	// hold it applied and not yet written (StateSettler): start counting
	// once every member's writes have settled.
	if err := settleState(ctx, sys); err != nil {
		return report.ManifestPoint{}, err
	}
	before, err := meter.settled(ctx)
	if err != nil {
		return report.ManifestPoint{}, err
	}
	var devBefore int64
	if dev != nil {
		if devBefore, err = dev.written(); err != nil {
			return report.ManifestPoint{}, err
		}
	}
	took := make([]time.Duration, 0, p.ManifestAcks)
	for range p.ManifestAcks {
		if err := sys.BeginEpoch(ctx, pre.Job, pre.Next); err != nil {
			return report.ManifestPoint{}, fmt.Errorf("begin epoch %d of %s: %w", pre.Next, pre.Job, err)
		}
		segs, err := w.delta(ctx, p.SegmentsPerAck)
		if err != nil {
			return report.ManifestPoint{}, err
		}
		t0 := time.Now()
		if err := sys.Ack(ctx, pre.Job, pre.Task, pre.Next, segs); err != nil {
			return report.ManifestPoint{}, fmt.Errorf("ack of %s/%s epoch %d: %w", pre.Job, pre.Task, pre.Next, err)
		}
		took = append(took, time.Since(t0))
		pre.Next++
		pre.Segments += len(segs)
	}
	// And stop once the followers have applied the measured acks too,
	// and every member has written them.
	if err := settleState(ctx, sys); err != nil {
		return report.ManifestPoint{}, err
	}
	after, err := meter.settled(ctx)
	if err != nil {
		return report.ManifestPoint{}, err
	}
	written := max(0, after-before)
	pt := report.ManifestPoint{
		Size:         size,
		AckTime:      report.Summarize(took),
		BytesWritten: written,
		BytesPerAck:  float64(written) / float64(len(took)),
	}
	if dev != nil {
		devAfter, err := dev.written()
		if err != nil {
			return report.ManifestPoint{}, err
		}
		pt.DeviceBytesWritten = max(0, devAfter-devBefore)
		pt.DeviceBytesPerAck = float64(pt.DeviceBytesWritten) / float64(len(took))
	}
	return pt, nil
}

// MeasureRestore reads pre's manifest reads times from the leader
// (linearizable) and reads times stale from a follower, after one unmeasured
// read of each. A leader read must return every segment.
func MeasureRestore(ctx context.Context, sys sut.System, pre Preloaded, reads int) (*report.Restore, error) {
	r := &report.Restore{Segments: pre.Segments, Reads: reads}
	for _, stale := range []bool{false, true} {
		took := make([]time.Duration, 0, reads)
		var n int
		for i := range reads + 1 {
			t0 := time.Now()
			var err error
			n, err = sys.ReadManifest(ctx, pre.Job, pre.Task, stale)
			if err != nil {
				return nil, fmt.Errorf("read manifest of %s/%s (stale %v): %w", pre.Job, pre.Task, stale, err)
			}
			if i > 0 {
				took = append(took, time.Since(t0))
			}
		}
		if stale {
			r.Follower, r.FollowerSegments = report.Summarize(took), n
		} else {
			if n != pre.Segments {
				return nil, fmt.Errorf("read manifest of %s/%s from the leader: %d segments, want %d", pre.Job, pre.Task, n, pre.Segments)
			}
			r.Leader = report.Summarize(took)
		}
	}
	return r, nil
}

// settleState waits for sys's members to write what they applied, when
// sys holds applied writes in memory (sut.StateSettler).
func settleState(ctx context.Context, sys sut.System) error {
	st, ok := sys.(sut.StateSettler)
	if !ok {
		return nil
	}
	if err := st.SettleState(ctx); err != nil {
		return fmt.Errorf("%s: waiting for the members to write what they applied: %w", sys.Name(), err)
	}
	return nil
}
