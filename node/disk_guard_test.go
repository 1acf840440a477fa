package node

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
)

// TestDiskFullRefusesBeforeProposing: while the data directory has less
// than the minimum free, Propose refuses with a *DiskFullError (no cause:
// refused before writing) and proposes nothing; once space is freed,
// writes are accepted again.
func TestDiskFullRefusesBeforeProposing(t *testing.T) {
	n := startLeader(t, func(*config.Config) {})
	var free atomic.Uint64
	free.Store(1 << 20)
	n.disk.mu.Lock()
	n.disk.minFree = 1 << 30
	n.disk.statfs = func(string) (uint64, error) { return free.Load(), nil }
	n.disk.checked = time.Time{}
	n.disk.mu.Unlock()
	before := n.raft.LastIndex()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := n.Propose(ctx, fsm.CmdMemberUpsert, memberUpsert("full"))
	var dfe *DiskFullError
	if !errors.As(err, &dfe) || dfe.Cause != nil || dfe.Free != 1<<20 || errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("Propose with the disk nearly full: %v, want a *DiskFullError without cause", err)
	}
	if after := n.raft.LastIndex(); after != before || memberApplied(t, n, "full") {
		t.Fatalf("last log index %d -> %d: a refused write was proposed", before, after)
	}
	free.Store(2 << 30)
	pollUntil(t, 2*time.Second, "writes accepted once space is freed", func() bool {
		_, _, err := n.Propose(ctx, fsm.CmdMemberUpsert, memberUpsert("freed"))
		if err != nil && !errors.Is(err, ErrDiskFull) {
			t.Fatalf("Propose after space was freed: %v", err)
		}
		return err == nil
	})
}

// TestMapRaftErrorNoSpace: a Raft write that failed for want of space (the
// leader's log append) is reported as a *DiskFullError carrying the cause,
// and the guard then refuses further writes.
func TestMapRaftErrorNoSpace(t *testing.T) {
	n := &Node{disk: &DiskGuard{dir: "/data", minFree: 100, statfs: func(string) (uint64, error) { return 10, nil }, now: time.Now}}
	cause := fmt.Errorf("store logs: %w", syscall.ENOSPC)
	err := n.mapRaftError(cause)
	var dfe *DiskFullError
	if !errors.As(err, &dfe) || !errors.Is(dfe.Cause, syscall.ENOSPC) || errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("mapRaftError(%v) = %v, want a *DiskFullError with the cause", cause, err)
	}
	if err := n.disk.Check(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("the guard after a write failed for space: %v, want ErrDiskFull", err)
	}
}
