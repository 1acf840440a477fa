package leader

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/fsm"
)

// maxTimeoutBatch bounds the epochs aborted by one command.
const maxTimeoutBatch = 256

// EpochsTimedOut counts the epochs this member aborted, as leader, because
// their ack timeout passed. The task runs before the API exists; the API
// registers the counter with its registry.
var EpochsTimedOut = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "metastore_epochs_timed_out_total",
	Help: "Epochs aborted by this member, as leader, because their ack timeout passed.",
})

// EpochTimeouts returns the leader task that aborts epochs whose ack
// timeout has passed. It reads deadlines from the local state machine (the
// leader's is current) by p's clock and proposes one command per batch; the
// state machine re-checks each deadline against the command's time, so an
// epoch that completed meanwhile is left alone.
func EpochTimeouts(p Proposer, f *fsm.FSM, logger *slog.Logger) func(ctx context.Context) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context) {
		const idle = time.Second
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			expired, err := f.ExpiredEpochs(p.Now(), maxTimeoutBatch)
			if err != nil {
				logger.Error("reading ack deadlines", "err", err)
			}
			if len(expired) > 0 {
				v, _, err := p.Propose(ctx, fsm.CmdEpochsTimeout, &fsm.EpochsTimeout{Epochs: expired})
				if err == nil {
					aborted, _ := v.([]fsm.EpochRef)
					for _, ref := range aborted {
						logger.Info("epoch aborted: ack timeout", "job", ref.Job, "epoch", ref.Epoch)
					}
					EpochsTimedOut.Add(float64(len(aborted)))
				}
				if err != nil && ctx.Err() == nil {
					logger.Warn("proposing ack-timeout aborts", "epochs", len(expired), "err", err)
				}
			}
			next := idle
			if len(expired) == maxTimeoutBatch {
				next = 0
			} else if at, ok := f.NextDeadline(); ok {
				next = min(max(at.Sub(p.Now()), 10*time.Millisecond), idle)
			}
			timer.Reset(next)
		}
	}
}
