package etcdsut

import (
	"context"

	"github.com/metastore/metastore/bench/internal/sut"
)

// Test hooks for peertest.Peer and its optional interfaces.

func (s *System) SetBeforeCommit(fn func(job, task string)) { s.beforeCommit = fn }

func (s *System) EpochState(ctx context.Context, job string, epoch uint64) (int, bool, error) {
	return s.epochState(ctx, job, epoch)
}

func (s *System) Segments(ctx context.Context, job, task string) ([]sut.Segment, error) {
	return s.segments(ctx, job, task)
}

func (s *System) NewGeneration(ctx context.Context, job string) (uint64, uint64, error) {
	return s.newGeneration(ctx, job)
}

func (s *System) AckAs(ctx context.Context, generation uint64, job, task string, epoch uint64, add []sut.Segment) error {
	cli, err := s.client()
	if err != nil {
		return err
	}
	return s.ackAs(ctx, cli, job, task, generation, epoch, add)
}

func (s *System) BeginEpochAs(ctx context.Context, generation uint64, job string, epoch uint64) error {
	cli, err := s.client()
	if err != nil {
		return err
	}
	co, err := s.coordinatorOf(ctx, cli, job)
	if err != nil {
		return err
	}
	return s.beginAs(ctx, cli, co, job, generation, epoch)
}
