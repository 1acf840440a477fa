package zksut

import "context"

// Test hooks for peertest.Peer.

func (s *System) SetBeforeCommit(fn func(job, task string)) { s.beforeCommit = fn }

func (s *System) EpochState(ctx context.Context, job string, epoch uint64) (int, bool, error) {
	ep, err := s.epochState(ctx, job, epoch)
	return ep.Acks, ep.Completed, err
}
