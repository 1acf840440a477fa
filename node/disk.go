package node

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/metastore/metastore/fsm"
)

// Disk full.
//
// Every write a member makes goes to its data directory: the Raft log
// (raft.db, fsynced before a write is acknowledged), the state machine file
// and snapshots. What happens when that file system fills up depends on
// where the first write fails:
//
//   - the leader's log append (raft-boltdb): hashicorp/raft answers the
//     entries of that append with the error and steps down to follower; an
//     election follows;
//   - a term or vote write (the stable store in raft.db): hashicorp/raft
//     would panic (setCurrentTerm) and the process die at every election;
//     the node's stable store waits and retries instead (stable.go), so
//     the member stalls until space is freed;
//   - the state machine's commit: fsm.ApplyBatch waits and retries until the
//     write succeeds (fsm/fsm.go), so the member stalls but never skips an
//     entry;
//   - a snapshot: the snapshot store removes the partial snapshot, Raft logs
//     the error and tries again at the next interval.
//
// None of that loses an acknowledged write, but a member that stalls is
// unavailable. So the node refuses new writes EARLY: DiskGuard
// checks the free space of the data directory's file system before every
// proposal and refuses it with a *DiskFullError (HTTP 507
// insufficient_storage) while fewer than MinFreeDisk bytes are free. The
// margin leaves room for what is already in flight (queued entries, their
// application, a snapshot, term and vote writes) to finish, and reads go on
// being served. Once space is freed, writes are accepted again within a
// second (the free space is re-read at most once per diskCheckInterval, more
// often near the minimum, and at once after a write failed for want of
// space).

// ErrDiskFull means a write was refused because the data directory's file
// system has too little free space; nothing was proposed (or, for a
// failure reported by the log store, nothing was appended). Retry once
// space is freed. Errors wrapping it are *DiskFullError.
var ErrDiskFull = errors.New("node: insufficient disk space")

// DiskFullError names the data directory and its free space.
type DiskFullError struct {
	Dir     string
	Free    uint64
	MinFree uint64
	// Cause is the write error that reported the file system full (ENOSPC),
	// nil when the free-space guard refused the write before it was made.
	Cause error
}

func (e *DiskFullError) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("node: data directory %s is full (%d bytes free): %v", e.Dir, e.Free, e.Cause)
	}
	return fmt.Sprintf("node: data directory %s has %d bytes free, below the minimum of %d (--min-free-disk); writes are refused until space is freed",
		e.Dir, e.Free, e.MinFree)
}

func (e *DiskFullError) Unwrap() error { return ErrDiskFull }

// diskCheckInterval bounds how often the guard reads the file system's free
// space (a statfs system call, about a microsecond); diskCheckIntervalNear
// applies once less than twice the minimum is free, so a burst of writes
// cannot run far past the minimum before it is noticed. A member acking
// 16 KiB payloads writes about 20 MB/s (log and state file), and its Raft
// log takes a whole segment's space at once when it starts a new one.
const (
	diskCheckInterval     = 100 * time.Millisecond
	diskCheckIntervalNear = 10 * time.Millisecond
)

// DiskGuard refuses writes while the data directory's file system has less
// than a minimum of free bytes. It is safe for concurrent use.
type DiskGuard struct {
	dir     string
	minFree uint64
	statfs  func(dir string) (free uint64, err error)
	now     func() time.Time

	mu      sync.Mutex
	free    uint64
	checked time.Time
	err     error // the last statfs error

	refused atomic.Uint64
}

// NewDiskGuard guards dir; minFree 0 disables refusing (free space is still
// measured and reported).
func NewDiskGuard(dir string, minFree uint64) *DiskGuard {
	return &DiskGuard{dir: dir, minFree: minFree, statfs: statfsFree, now: time.Now}
}

func statfsFree(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	// Bavail: the blocks an unprivileged process may use. The node may run
	// as root, but the reserved blocks are the operator's emergency room.
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}

// refresh re-reads the free space if it is older than diskCheckInterval or
// force is set. The caller holds g.mu.
func (g *DiskGuard) refresh(force bool) {
	now := g.now()
	every := diskCheckInterval
	if g.free < 2*g.minFree {
		// Close to the minimum, a second of writes could overshoot it.
		every = diskCheckIntervalNear
	}
	if !force && !g.checked.IsZero() && now.Sub(g.checked) < every {
		return
	}
	g.checked = now
	free, err := g.statfs(g.dir)
	g.err = err
	if err == nil {
		g.free = free
	}
}

// Check returns a *DiskFullError when fewer than the minimum bytes are
// free, and nil otherwise (also when free space cannot be measured: a
// statfs failure must not stop a healthy member from writing).
func (g *DiskGuard) Check() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	g.refresh(false)
	free, err, minFree := g.free, g.err, g.minFree
	g.mu.Unlock()
	if err != nil || minFree == 0 || free >= minFree {
		return nil
	}
	g.refused.Add(1)
	return &DiskFullError{Dir: g.dir, Free: free, MinFree: minFree}
}

// Full records a write that failed for want of space (cause) and returns
// the error to report: the free space is re-read at once, and the guard
// keeps refusing until the minimum is free again.
func (g *DiskGuard) Full(cause error) *DiskFullError {
	g.mu.Lock()
	g.refresh(true)
	free, minFree := g.free, g.minFree
	g.mu.Unlock()
	g.refused.Add(1)
	return &DiskFullError{Dir: g.dir, Free: free, MinFree: minFree, Cause: cause}
}

// Room reads the free space now and returns a *DiskFullError (its Cause
// saying what) when fewer than need bytes beyond the minimum are free;
// it does not count as a refused write.
func (g *DiskGuard) Room(need uint64, what string) error {
	g.mu.Lock()
	g.refresh(true)
	free, err, minFree := g.free, g.err, g.minFree
	g.mu.Unlock()
	if err != nil || free >= need+minFree {
		return nil
	}
	return &DiskFullError{Dir: g.dir, Free: free, MinFree: minFree,
		Cause: fmt.Errorf("%s needs %d bytes free beyond the minimum of %d (--min-free-disk)", what, need, minFree)}
}

// Status reads the free space (at most once per diskCheckInterval).
func (g *DiskGuard) Status() DiskStatus {
	g.mu.Lock()
	g.refresh(false)
	st := DiskStatus{Dir: g.dir, FreeBytes: g.free, MinFreeBytes: g.minFree, RefusedTotal: g.refused.Load()}
	if g.err != nil {
		st.Error = g.err.Error()
	} else {
		st.WritesRefused = g.minFree > 0 && g.free < g.minFree
	}
	g.mu.Unlock()
	return st
}

// isNoSpace reports whether err says the file system is full. The log
// cache in front of raft-boltdb formats the store's error with %q, and
// Raft the snapshot store's with %v, so fsm.IsNoSpace checks the message as
// well as the chain.
func isNoSpace(err error) bool { return fsm.IsNoSpace(err) }
