package node

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/clock"
)

// Now is the clock this member stamps into the commands it proposes, and
// the one its leader tasks compare the state with (upload leases, ack
// deadlines, GC grace): internal/clock, the wall clock (skewed at run time
// in faultinject builds).
func (n *Node) Now() time.Time { return clock.Now() }

// Propose is the one way a member changes the state. It encodes payload
// as a command of type t stamped with Now, proposes it, waits until the
// leader has applied it (for at most cfg.ApplyTimeout or until ctx is
// done) and returns the command's value and the index it was applied at.
//
// A rule violation is returned as a *wire.RuleError (the same on every
// member; the command changed nothing), with the index it was applied at.
// The other errors leave the index 0:
//   - an error from fsm.Encode: the payload cannot be encoded; nothing was
//     proposed.
//   - ErrNotLeader: this node is not the leader; nothing was proposed.
//   - ErrTryAgain (wrapped): nothing was applied; retry shortly.
//   - ErrShutdown: the node is shutting down; nothing was proposed.
//   - ErrDiskFull (a *DiskFullError): the data directory is (nearly) full;
//     nothing was proposed, or the leader could not append the entry.
//   - ErrUnknownOutcome (wrapped): the command was handed to Raft but its
//     fate is unknown (leadership lost, shutdown, deadline or ctx
//     cancellation after it was enqueued).
//   - ctx.Err() if ctx was done before anything was proposed.
//   - an error from the FSM that is fatal (corrupt or unknown command).
func (n *Node) Propose(ctx context.Context, t fsm.CommandType, payload any) (any, uint64, error) {
	cmd, err := fsm.Encode(t, n.Now(), payload)
	if err != nil {
		return nil, 0, err
	}
	res, err := n.applyCommand(ctx, cmd)
	if err != nil {
		return nil, 0, err
	}
	if res.Err != nil {
		return nil, res.Index, res.Err
	}
	return res.Value, res.Index, nil
}

// applyCommand proposes an encoded command and waits for its result
// (Propose's errors; a rule violation is in Result.Err), counting the
// outcome in the node's metrics.
func (n *Node) applyCommand(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	start := time.Now()
	res, err := n.apply(ctx, cmd)
	n.metrics.observeApply(start, applyOutcome(res, err))
	return res, err
}

func (n *Node) apply(ctx context.Context, cmd []byte) (*fsm.Result, error) {
	if n.closing.Load() {
		return nil, ErrShutdown
	}
	switch n.raft.State() {
	case raft.Leader:
	case raft.Shutdown:
		return nil, ErrShutdown
	default:
		return nil, ErrNotLeader
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := n.disk.Check(); err != nil {
		return nil, err // nothing proposed: the data directory is nearly full
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()

	return n.propose(ctx, cmd)
}

// waitFuture waits for f, or for ctx. It prefers f's result when both are
// ready.
func waitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }() // Raft answers every future, at the latest on shutdown
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done:
			return err
		default:
			return ctx.Err()
		}
	}
}

// mapRaftError maps a future's error like mapRaftError, and a write that
// failed for want of disk space to a *DiskFullError.
func (n *Node) mapRaftError(err error) error {
	if isNoSpace(err) {
		return n.disk.Full(err)
	}
	return mapRaftError(err)
}

// mapRaftError maps the error of a future that was handed to Raft (commands,
// Barrier, membership changes) to the node's sentinels.
func mapRaftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		// Returned when the entry was never appended (drained by a follower
		// loop, or refused before enqueueing).
		return ErrNotLeader
	case errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrLeadershipTransferInProgress),
		errors.Is(err, raft.ErrAbortedByRestore):
		return fmt.Errorf("%w: %v", ErrTryAgain, err)
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %v", ErrUnknownOutcome, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		// Raft does not say whether the entry was enqueued before shutdown:
		// report the conservative answer.
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, ErrShutdown)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: gave up waiting: %w", ErrUnknownOutcome, err)
	}
	return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
}

func applyOutcome(res *fsm.Result, err error) string {
	switch {
	case err == nil && res != nil && res.Err != nil:
		return "rule_error"
	case err == nil:
		return "ok"
	case errors.Is(err, ErrUnknownOutcome):
		return "unknown"
	case errors.Is(err, ErrNotLeader):
		return "not_leader"
	case errors.Is(err, ErrTryAgain):
		return "try_again"
	case errors.Is(err, ErrShutdown):
		return "shutdown"
	case errors.Is(err, ErrDiskFull):
		return "disk_full"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}

// LinearizableRead confirms that this node is the leader and that its state
// machine reflects every write committed before the call, and returns the
// Raft index the read reflects: the FSM's applied index once it has caught
// up. Read the FSM after it returns; the state read is at that index or
// later. The index is at least that of every write acknowledged before the
// call, is comparable with the indexes fsm queries report, and is safe to
// pass to fsm.WaitApplied. (It can be below raft's commit index, whose last
// entries may be barriers or no-ops that never reach the FSM; right after a
// backup is restored it is the FSM's restarted index, below the indexes of
// writes made before the restore.)
//
// It requires the leader's barrier of the current term to have completed
// (else ErrTryAgain), takes the commit index, confirms leadership with a
// quorum (VerifyLeader), checks the term did not change, and waits until the
// FSM applied every command up to the commit index.
func (n *Node) LinearizableRead(ctx context.Context) (uint64, error) {
	if n.closing.Load() {
		return 0, ErrShutdown
	}
	switch n.raft.State() {
	case raft.Leader:
	case raft.Shutdown:
		return 0, ErrShutdown
	default:
		return 0, ErrNotLeader
	}
	term := n.raft.CurrentTerm()
	if n.readyTerm.Load() != term {
		return 0, fmt.Errorf("%w: the leader has not yet committed an entry in term %d", ErrTryAgain, term)
	}
	commit := n.raft.CommitIndex()
	if err := waitFuture(ctx, n.raft.VerifyLeader()); err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost):
			return 0, ErrNotLeader
		case errors.Is(err, raft.ErrRaftShutdown):
			return 0, ErrShutdown
		}
		return 0, fmt.Errorf("node: verify leadership: %w", err)
	}
	if n.raft.CurrentTerm() != term {
		return 0, ErrNotLeader
	}
	target, err := n.fsmTarget(commit)
	if err != nil {
		return 0, fmt.Errorf("node: linearizable read: %w", err)
	}
	if err := n.fsm.WaitApplied(ctx, target); err != nil {
		return 0, fmt.Errorf("node: wait for the state machine to apply index %d: %w", target, err)
	}
	return n.fsm.AppliedIndex(), nil
}

// fsmTarget returns the index the FSM's applied index must reach for every
// command at or below idx to be applied. It is idx itself or lower: Raft
// never hands barrier and no-op entries to the FSM, so after a barrier (the
// usual last entry after an election) the FSM's applied index stays below
// the commit index until the next command.
//
// A missing entry has been compacted into, or replaced by, a snapshot, which
// the FSM has already processed: the scan stops there. That includes the
// index of a restored backup, which has no log entry; the FSM's own index
// restarts low after such a restore while older commands stay in the log.
// As a second guard, commands at or below Raft's last snapshot index count
// as applied: Raft records a snapshot only after the FSM has processed it
// (taken, installed or restored), and at startup catchUpFromSnapshot brings
// the FSM up to the newest snapshot.
func (n *Node) fsmTarget(idx uint64) (uint64, error) {
	applied := n.fsm.AppliedIndex()
	for i := idx; i > applied; i-- {
		var l raft.Log
		if err := n.logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				return applied, nil
			}
			return 0, fmt.Errorf("read log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand {
			if i <= n.raftSnapshotIndex() {
				return applied, nil
			}
			return i, nil
		}
	}
	return min(applied, idx), nil
}

// raftSnapshotIndex is the index of the last snapshot Raft has taken,
// installed or restored (0 if unknown).
func (n *Node) raftSnapshotIndex() uint64 {
	v, err := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
	if err != nil {
		return 0
	}
	return v
}
