package workload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/metastore/metastore/bench/internal/report"
	"github.com/metastore/metastore/bench/internal/sut"
)

// errOverrun ends a throughput run whose calls did not return long after
// its window closed.
var errOverrun = errors.New("the run did not end after its measured window (a call hangs)")

// minDrain is the least time a throughput run gets, after its window, to
// finish the epochs in flight.
const minDrain = 30 * time.Second

func jobsFor(workers, tasksPerJob int) int { return max(1, workers/tasksPerJob) }

// MeasureThroughput runs workers workers (one task each) spread over
// max(1, workers/p.TasksPerJob) new jobs. Each job's coordinator begins
// epoch 1, waits for all its tasks to acknowledge it, begins epoch 2, and
// so on; each task fetches blob keys (p.KeyBatch at a time, the calls part
// of its cycle) and acks every epoch with p.SegmentsPerAck segments. After
// p.Warmup, the window of p.Duration is measured: the acks and epochs
// completed in it, the duration of the Ack calls that ended in it, and the
// members' CPU time over it. No epoch is begun after the window; those in
// flight are finished.
func MeasureThroughput(ctx context.Context, sys sut.System, p Params, workers int) (report.ThroughputPoint, error) {
	nJobs := jobsFor(workers, p.TasksPerJob)
	jobs := make([]*jobRun, nJobs)
	for j := range jobs {
		jobs[j] = &jobRun{sys: sys, job: fmt.Sprintf("tput-w%d-j%d", workers, j), segments: p.SegmentsPerAck}
	}
	for i := range workers {
		jr := jobs[i%nJobs]
		jr.tasks = append(jr.tasks, fmt.Sprintf("t%d", len(jr.tasks)))
	}
	for _, jr := range jobs {
		if err := sys.CreateJob(ctx, jr.job, jr.tasks); err != nil {
			return report.ThroughputPoint{}, fmt.Errorf("create job %s: %w", jr.job, err)
		}
	}

	start := time.Now()
	winStart, winEnd := p.Warmup, p.Warmup+p.Duration
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	overrun := time.AfterFunc(winEnd+max(minDrain, p.Duration), func() { cancel(errOverrun) })
	defer overrun.Stop()

	cpu := make(chan cpuWindow, 1)
	go func() { cpu <- sampleCPU(runCtx, sys, start.Add(winStart), start.Add(winEnd)) }()

	var wg sync.WaitGroup
	for _, jr := range jobs {
		jr.start, jr.stopAt = start, start.Add(winEnd)
		for _, t := range jr.tasks {
			jr.workers = append(jr.workers, newWorker(sys, jr.job, t, p.KeyBatch, start))
		}
		wg.Go(func() {
			if err := jr.run(runCtx); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(runCtx); err != nil {
		if ctx.Err() != nil {
			return report.ThroughputPoint{}, ctx.Err()
		}
		return report.ThroughputPoint{}, err
	}
	cw := <-cpu

	in := func(s sample) bool { return s.end >= winStart && s.end <= winEnd }
	var acks, keys, begins []time.Duration
	epochs := 0
	for _, jr := range jobs {
		for _, s := range jr.begins {
			if in(s) {
				begins = append(begins, s.took)
			}
		}
		for _, end := range jr.epochs {
			if end >= winStart && end <= winEnd {
				epochs++
			}
		}
		for _, w := range jr.workers {
			for _, s := range w.calls {
				if in(s) {
					keys = append(keys, s.took)
				}
			}
		}
		for _, ss := range jr.acks {
			for _, s := range ss {
				if in(s) {
					acks = append(acks, s.took)
				}
			}
		}
	}
	pt := report.ThroughputPoint{
		Workers:         workers,
		Jobs:            nJobs,
		WindowSeconds:   p.Duration.Seconds(),
		Acks:            len(acks),
		AcksPerSecond:   report.PerSecond(len(acks), p.Duration),
		Epochs:          epochs,
		EpochsPerSecond: report.PerSecond(epochs, p.Duration),
		AckLatency:      report.Summarize(acks),
		KeysLatency:     report.Summarize(keys),
		BeginLatency:    report.Summarize(begins),
		CPUMeasured:     cw.ok,
		RSSBytes:        cw.rss,
	}
	if cw.ok {
		pt.CPUSeconds = cw.seconds
		if len(acks) > 0 {
			pt.CPUSecondsPer1000Acks = cw.seconds / float64(len(acks)) * 1000
		}
	}
	return pt, nil
}

// jobRun is one job of a throughput run: its coordinator and its tasks.
type jobRun struct {
	sys      sut.System
	job      string
	tasks    []string
	workers  []*worker
	segments int
	start    time.Time // origin of the samples
	stopAt   time.Time // no epoch is begun after it

	begins []sample
	epochs []time.Duration // completion of each epoch, from start
	acks   [][]sample      // per task
}

// run coordinates the job until stopAt: begin an epoch, hand it to every
// task, wait for all their acks, begin the next. It returns the first
// error of a call.
func (jr *jobRun) run(ctx context.Context) error {
	n := len(jr.workers)
	jr.acks = make([][]sample, n)
	epochs := make([]chan uint64, n)
	done := make(chan error, n)
	var tasks sync.WaitGroup
	for i, w := range jr.workers {
		epochs[i] = make(chan uint64, 1)
		tasks.Go(func() {
			for e := range epochs[i] {
				done <- jr.ack(ctx, w, e, &jr.acks[i])
			}
		})
	}
	defer func() {
		for _, ch := range epochs {
			close(ch)
		}
		tasks.Wait()
	}()

	for e := uint64(1); ; e++ {
		if ctx.Err() != nil || !time.Now().Before(jr.stopAt) {
			return nil
		}
		t0 := time.Now()
		if err := jr.sys.BeginEpoch(ctx, jr.job, e); err != nil {
			return fmt.Errorf("begin epoch %d of %s: %w", e, jr.job, err)
		}
		end := time.Now()
		jr.begins = append(jr.begins, sample{end: end.Sub(jr.start), took: end.Sub(t0)})
		for _, ch := range epochs {
			ch <- e
		}
		var first error
		for range n {
			if err := <-done; err != nil && first == nil {
				first = err
			}
		}
		if first != nil {
			return first
		}
		jr.epochs = append(jr.epochs, time.Since(jr.start))
	}
}

// ack is one task's turn in epoch e: the delta (fetching keys when
// needed), then the timed Ack call, recorded in samples.
func (jr *jobRun) ack(ctx context.Context, w *worker, e uint64, samples *[]sample) error {
	segs, err := w.delta(ctx, jr.segments)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := jr.sys.Ack(ctx, jr.job, w.task, e, segs); err != nil {
		return fmt.Errorf("ack of %s/%s epoch %d: %w", jr.job, w.task, e, err)
	}
	end := time.Now()
	*samples = append(*samples, sample{end: end.Sub(jr.start), took: end.Sub(t0)})
	return nil
}

// cpuWindow is the members' CPU time over a window and their resident
// memory at its end.
type cpuWindow struct {
	seconds float64
	ok      bool
	rss     int64
}

// sampleCPU reads the members' CPU time at from and at to (the same
// processes), and their resident memory at to.
func sampleCPU(ctx context.Context, sys sut.System, from, to time.Time) cpuWindow {
	if !sleepUntil(ctx, from) {
		return cpuWindow{}
	}
	members := sys.Members()
	before, ok := membersCPU(members)
	if !sleepUntil(ctx, to) || !ok {
		return cpuWindow{}
	}
	after, ok := membersCPU(members)
	return cpuWindow{seconds: after - before, ok: ok, rss: membersRSS(members)}
}

// sleepUntil waits until t, and reports false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
