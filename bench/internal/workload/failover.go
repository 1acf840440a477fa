package workload

import (
	"context"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/metastore/metastore/bench/internal/report"
	"github.com/metastore/metastore/bench/internal/sut"
)

// Bounds of a failover round.
const (
	// failoverAckTimeout bounds the time from a kill to the first
	// successful ack.
	failoverAckTimeout = 2 * time.Minute
	// failoverRestartTimeout bounds the restart of the killed member and
	// the wait for a leader after it.
	failoverRestartTimeout = 3 * time.Minute
	// failoverRetryPause is the pause between failed attempts.
	failoverRetryPause = 10 * time.Millisecond
)

// MeasureFailover kills the leader p.FailoverKills times. Each round begins
// an epoch of a one-task job (and fetches its keys) while the cluster is
// whole, kills the leader, and times from the kill to the first successful
// ack of that epoch: the worker retries the Ack with calls bounded by
// p.FailoverCallTimeout. An attempt that fails after an earlier one may
// have committed is checked with a linearizable read of the manifest. The
// killed member is then restarted and a leader awaited before the next
// round. It returns the rounds measured (also on error; a round whose ack
// succeeded but whose restart failed is counted).
func MeasureFailover(ctx context.Context, sys sut.System, p Params, logger *log.Logger) (*report.Failover, error) {
	pre := &Preloaded{Job: "failover", Task: "t0", Next: 1}
	if err := sys.CreateJob(ctx, pre.Job, []string{pre.Task}); err != nil {
		return nil, fmt.Errorf("create job %s: %w", pre.Job, err)
	}
	w := newWorker(sys, pre.Job, pre.Task, p.KeyBatch, time.Now())
	f := &report.Failover{Kills: p.FailoverKills, CallTimeoutSeconds: p.FailoverCallTimeout.Seconds()}
	for round := range p.FailoverKills {
		r, err := failoverRound(ctx, sys, p, pre, w)
		if r.took > 0 {
			f.Samples = append(f.Samples, r.took.Seconds())
			f.Attempts = append(f.Attempts, r.attempts)
			f.KillSeconds = append(f.KillSeconds, r.kill.Seconds())
			if logger != nil {
				logger.Printf("%s: failover round %d: first ack %.3f s after the kill (%d attempts; the kill took %.3f s)",
					sys.Name(), round+1, r.took.Seconds(), r.attempts, r.kill.Seconds())
			}
		}
		if err != nil {
			summarizeFailover(f)
			return f, fmt.Errorf("round %d: %w", round+1, err)
		}
	}
	summarizeFailover(f)
	return f, nil
}

func summarizeFailover(f *report.Failover) {
	if len(f.Samples) == 0 {
		return
	}
	sorted := slices.Sorted(slices.Values(f.Samples))
	f.MedianSeconds = report.Percentile(sorted, 50)
	f.P90Seconds = report.Percentile(sorted, 90)
	f.MaxSeconds = sorted[len(sorted)-1]
}

// round is what one failover round measured: the time from the kill to
// the first successful ack (zero when there was none), the Ack attempts,
// and the time Kill took.
type round struct {
	took, kill time.Duration
	attempts   int
}

// failoverRound is one kill, the acks until one succeeds, and the restart
// of the killed member.
func failoverRound(ctx context.Context, sys sut.System, p Params, pre *Preloaded, w *worker) (round, error) {
	var r round
	epoch := pre.Next
	if err := sys.BeginEpoch(ctx, pre.Job, epoch); err != nil {
		return r, fmt.Errorf("begin epoch %d of %s: %w", epoch, pre.Job, err)
	}
	segs, err := w.delta(ctx, p.SegmentsPerAck)
	if err != nil {
		return r, err
	}
	want := pre.Segments + len(segs)
	leader, err := sys.Leader(ctx)
	if err != nil {
		return r, fmt.Errorf("find the leader: %w", err)
	}

	killed := time.Now()
	if err := sys.Kill(leader); err != nil {
		return r, fmt.Errorf("kill leader %s: %w", leader.ID, err)
	}
	r.kill = time.Since(killed)
	roundCtx, cancel := context.WithTimeout(ctx, failoverAckTimeout)
	defer cancel()
	var last error
	for {
		r.attempts++
		last = callWithin(roundCtx, p.FailoverCallTimeout, func(ctx context.Context) error {
			return sys.Ack(ctx, pre.Job, pre.Task, epoch, segs)
		})
		if last != nil && r.attempts > 1 {
			// An earlier attempt may have committed: then this one fails
			// (the epoch is complete) and the manifest has the segments.
			if callWithin(roundCtx, p.FailoverCallTimeout, func(ctx context.Context) error {
				n, err := sys.ReadManifest(ctx, pre.Job, pre.Task, false)
				if err == nil && n < want {
					return fmt.Errorf("%d segments, want %d", n, want)
				}
				return err
			}) == nil {
				last = nil
			}
		}
		if last == nil {
			break
		}
		if !sleepUntil(roundCtx, time.Now().Add(failoverRetryPause)) {
			if ctx.Err() != nil {
				return r, ctx.Err()
			}
			return r, fmt.Errorf("no successful ack within %s of killing leader %s (%d attempts, last: %v)", failoverAckTimeout, leader.ID, r.attempts, last)
		}
	}
	r.took = time.Since(killed)
	pre.Next++
	pre.Segments = want

	restartCtx, cancelRestart := context.WithTimeout(ctx, failoverRestartTimeout)
	defer cancelRestart()
	if err := sys.Restart(restartCtx, leader); err != nil {
		return r, fmt.Errorf("restart member %s: %w", leader.ID, err)
	}
	err = sut.WaitFor(restartCtx, 50*time.Millisecond, func() (bool, error) {
		_, err := sys.Leader(restartCtx)
		return err == nil, nil
	})
	if err != nil {
		return r, fmt.Errorf("no leader after restarting member %s: %w", leader.ID, err)
	}
	return r, nil
}

// callWithin calls f with a context that ends after timeout.
func callWithin(ctx context.Context, timeout time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return f(ctx)
}
