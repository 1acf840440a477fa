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

// TestDiskGuard: the guard refuses below the minimum only (exactly the
// minimum free is enough), re-reads the free space every
// diskCheckIntervalNear near the minimum and at once after a write failed
// for want of space, never refuses when the free space cannot be measured
// or the minimum is 0.
func TestDiskGuard(t *testing.T) {
	var (
		free uint64 = 100
		fail error
		now  = time.Unix(1_000_000, 0)
	)
	g := &DiskGuard{dir: "/data", minFree: 100,
		statfs: func(string) (uint64, error) { return free, fail },
		now:    func() time.Time { return now }}
	if err := g.Check(); err != nil {
		t.Fatalf("exactly the minimum free: %v, want nil", err)
	}
	free = 99
	now = now.Add(diskCheckIntervalNear) // near the minimum: re-read this often
	var dfe *DiskFullError
	if err := g.Check(); !errors.As(err, &dfe) || dfe.Free != 99 || dfe.MinFree != 100 || dfe.Cause != nil {
		t.Fatalf("one byte below the minimum, %s later: %v, want a *DiskFullError with 99 bytes free", diskCheckIntervalNear, err)
	}
	free = 150
	now = now.Add(diskCheckIntervalNear)
	if err := g.Check(); err != nil {
		t.Fatalf("space freed, %s later: %v, want nil", diskCheckIntervalNear, err)
	}
	free = 40 // a write fails for want of space: re-read at once
	cause := fmt.Errorf("write: %w", syscall.ENOSPC)
	if e := g.Full(cause); e.Free != 40 || !errors.Is(e.Cause, syscall.ENOSPC) {
		t.Fatalf("Full: %+v, want 40 bytes free (re-read at once) and the cause", e)
	}
	if err := g.Check(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("after a write failed for space: %v, want ErrDiskFull", err)
	}
	fail = errors.New("statfs failed")
	now = now.Add(diskCheckIntervalNear)
	if err := g.Check(); err != nil {
		t.Fatalf("free space cannot be measured: %v, want nil (a statfs failure must not stop writes)", err)
	}
	fail = nil
	off := &DiskGuard{dir: "/data", statfs: func(string) (uint64, error) { return 0, nil }, now: time.Now}
	if err := off.Check(); err != nil {
		t.Fatalf("minimum 0 with nothing free: %v, want nil (refusing disabled)", err)
	}
	if st := off.Status(); st.WritesRefused {
		t.Fatalf("minimum 0: status %+v says writes are refused", st)
	}
}
