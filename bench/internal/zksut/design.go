package zksut

import (
	"context"

	"github.com/go-zookeeper/zk"

	"github.com/metastore/metastore/bench/internal/sut"
)

// The operations of sut.System, each done by the design the System was
// made with (lean.go or records.go).

// CreateJob registers the job.
func (s *System) CreateJob(ctx context.Context, job string, tasks []string) error {
	if s.lean {
		return s.leanCreateJob(ctx, job, tasks)
	}
	return s.casCreateJob(ctx, job, tasks)
}

// BeginEpoch begins epoch of job.
func (s *System) BeginEpoch(ctx context.Context, job string, epoch uint64) error {
	if s.lean {
		return s.leanBeginEpoch(ctx, job, epoch)
	}
	return s.casBeginEpoch(ctx, job, epoch)
}

// Ack acknowledges epoch for task, adding segments to its manifest.
func (s *System) Ack(ctx context.Context, job, task string, epoch uint64, add []sut.Segment) error {
	if s.lean {
		return s.leanAck(ctx, job, task, epoch, add)
	}
	return s.casAck(ctx, job, task, epoch, add)
}

// nextEpoch returns the epoch Preload begins first.
func (s *System) nextEpoch(ctx context.Context, c *zk.Conn, job string) (uint64, error) {
	if s.lean {
		return s.leanNextEpoch(ctx, c, job)
	}
	return s.casNextEpoch(ctx, c, job)
}

// epochState returns an epoch's acks and whether it is complete.
func (s *System) epochState(ctx context.Context, job string, epoch uint64) (int, bool, error) {
	if s.lean {
		return s.leanEpochState(ctx, job, epoch)
	}
	ep, err := s.casEpochState(ctx, job, epoch)
	return ep.Acks, ep.Completed, err
}
