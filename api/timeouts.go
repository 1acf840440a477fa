package api

import (
	"context"
	"log/slog"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/clock"
)

// maxTimeoutBatch bounds the epochs aborted by one command.
const maxTimeoutBatch = 256

// EpochTimeoutTask returns the leader task that aborts epochs whose ack
// timeout has passed. It reads deadlines from the local state machine (the
// leader's is current) and proposes one command per batch, stamped with the
// leader's clock; the state machine re-checks each deadline against that
// stamp, so an epoch that completed meanwhile is left alone.
func EpochTimeoutTask(f *fsm.FSM, apply func(ctx context.Context, cmd []byte) (*fsm.Result, error), logger *slog.Logger) func(ctx context.Context) {
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
			now := clock.Now()
			expired, err := f.ExpiredEpochs(now, maxTimeoutBatch)
			if err != nil {
				logger.Error("reading ack deadlines", "err", err)
			}
			if len(expired) > 0 {
				cmd, err := fsm.Encode(fsm.CmdEpochsTimeout, now, &fsm.EpochsTimeout{Epochs: expired})
				if err == nil {
					var res *fsm.Result
					res, err = apply(ctx, cmd)
					if err == nil && res.Err == nil {
						aborted, _ := res.Value.([]fsm.EpochRef)
						for _, ref := range aborted {
							logger.Info("epoch aborted: ack timeout", "job", ref.Job, "epoch", ref.Epoch)
						}
						epochsTimedOut.Add(float64(len(aborted)))
					}
				}
				if err != nil && ctx.Err() == nil {
					logger.Warn("proposing ack-timeout aborts", "epochs", len(expired), "err", err)
				}
			}
			next := idle
			if len(expired) == maxTimeoutBatch {
				next = 0
			} else if at, ok := f.NextDeadline(); ok {
				next = min(max(time.Until(at), 10*time.Millisecond), idle)
			}
			timer.Reset(next)
		}
	}
}
