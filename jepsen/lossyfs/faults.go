package lossyfs

// Disk faults: a mount can be told, at run time, to fail writes or fsyncs
// of some of its files with EIO or ENOSPC, or to stall their fsyncs, until
// the fault is cleared (SetFault, ClearFault). The errors are returned to
// the writing process by its own system call, as a failing or full disk
// returns them; nothing of a failed write reaches the backing file.
//
// A failed fsync is what Linux makes of a failed write-back (the
// "fsyncgate" semantics): the pages it should have made durable are not,
// and a later fsync that succeeds does not make them so. Such a page keeps
// its pre-image through every later fsync until it is written again, and
// appended pages whose sync failed come back as zeros; a Crash drops them
// like any unsynced page. The process reads what it wrote meanwhile (the
// page cache keeps it), which is also what Linux does until it evicts the
// page.
//
// Limits: directory operations (create, rename, unlink, and fsync of a
// directory) never fail or stall; reads never fail; ENOSPC hits only writes
// that need new space (past the end of the file or into a hole), fallocate
// and truncations that grow a file, as on a file system that allocates
// space at write time; while an ENOSPC fault is set the file system reports
// no free space (statfs), whatever its PathMatch. The data of a failed write
// may be seen for a moment through a shared mapping of the file (forget).
// The kernel holds a file's
// lock while a FUSE fsync of it runs, so writes to a file whose fsync is
// stalled wait too (a local file system would let most of them through).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Kind is what a Fault does to the operations it hits.
type Kind int

// Kinds of faults.
const (
	// EIO fails the operation with EIO (an I/O error of the device).
	EIO Kind = iota + 1
	// ENOSPC fails the operation with ENOSPC (the file system is full).
	ENOSPC
	// FsyncStall delays fsync and fdatasync by Delay, or until the fault
	// is cleared, then lets them proceed.
	FsyncStall
)

func (k Kind) String() string {
	switch k {
	case EIO:
		return "EIO"
	case ENOSPC:
		return "ENOSPC"
	case FsyncStall:
		return "fsync stall"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Op is a set of operations a Fault hits.
type Op int

// Operations.
const (
	// OpWrite is write and pwrite, fallocate, and truncate (a truncation
	// that grows the file, for ENOSPC).
	OpWrite Op = 1 << iota
	// OpFsync is fsync and fdatasync of a file.
	OpFsync
)

func (o Op) String() string {
	switch o {
	case OpWrite:
		return "writes"
	case OpFsync:
		return "fsyncs"
	case OpWrite | OpFsync:
		return "writes and fsyncs"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Fault is a disk fault in force on a mount.
type Fault struct {
	Kind Kind
	// Ops are the operations hit; 0 means the kind's usual ones: writes
	// and fsyncs for EIO, writes for ENOSPC, fsyncs for FsyncStall
	// (which hits nothing else).
	Ops Op
	// PathMatch selects the files hit by their path relative to the
	// mount's root ("raft/wal/wal-meta.db"); nil hits every file.
	PathMatch *regexp.Regexp
	// Prob is the chance that an operation of a file that matches is hit;
	// 0 means 1 (every one).
	Prob float64
	// Delay is how long FsyncStall holds each fsync; 0 holds it until
	// the fault is cleared.
	Delay time.Duration
}

// Hits counts the operations a fault hit: failed, or stalled.
type Hits struct {
	Writes, Fsyncs int64
	// Stalled is the total time fsyncs were held (FsyncStall).
	Stalled time.Duration
}

func (h Hits) String() string {
	s := fmt.Sprintf("%d writes and %d fsyncs hit", h.Writes, h.Fsyncs)
	if h.Stalled > 0 {
		s += fmt.Sprintf(", %s of stalls", h.Stalled.Round(time.Millisecond))
	}
	return s
}

// activeFault is the fault in force and its counters.
type activeFault struct {
	Fault
	cleared        chan struct{} // closed by ClearFault: stalls end
	writes, fsyncs atomic.Int64
	stalled        atomic.Int64 // nanoseconds

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every hit (WaitHits)
}

// count adds one hit of op.
func (a *activeFault) count(op opKind) {
	if op == opFsync {
		a.fsyncs.Add(1)
	} else {
		a.writes.Add(1)
	}
	a.mu.Lock()
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
}

func (a *activeFault) hits() Hits {
	return Hits{Writes: a.writes.Load(), Fsyncs: a.fsyncs.Load(), Stalled: time.Duration(a.stalled.Load())}
}

// SetFault puts f in force on the mount, replacing the fault in force (whose
// stalled fsyncs proceed).
func (l *FS) SetFault(f Fault) error {
	if f.Ops == 0 {
		switch f.Kind {
		case EIO:
			f.Ops = OpWrite | OpFsync
		case ENOSPC:
			f.Ops = OpWrite
		case FsyncStall:
			f.Ops = OpFsync
		}
	}
	switch {
	case f.Kind < EIO || f.Kind > FsyncStall:
		return fmt.Errorf("lossyfs: unknown fault kind %d", int(f.Kind))
	case f.Ops&^(OpWrite|OpFsync) != 0:
		return fmt.Errorf("lossyfs: unknown operations %d", int(f.Ops))
	case f.Kind == FsyncStall && f.Ops != OpFsync:
		return errors.New("lossyfs: a fsync stall hits fsyncs only")
	case f.Prob < 0 || f.Prob > 1:
		return fmt.Errorf("lossyfs: probability %v out of [0, 1]", f.Prob)
	case f.Delay < 0:
		return fmt.Errorf("lossyfs: negative delay %s", f.Delay)
	}
	if old := l.fault.Swap(&activeFault{Fault: f, cleared: make(chan struct{}), changed: make(chan struct{})}); old != nil {
		close(old.cleared)
	}
	return nil
}

// ClearFault ends the fault in force, if any (stalled fsyncs proceed at
// once), and returns what it hit.
func (l *FS) ClearFault() Hits {
	old := l.fault.Swap(nil)
	if old == nil {
		return Hits{}
	}
	close(old.cleared)
	return old.hits()
}

// FaultHits returns what the fault in force has hit so far.
func (l *FS) FaultHits() Hits {
	if a := l.fault.Load(); a != nil {
		return a.hits()
	}
	return Hits{}
}

// WaitHits waits until cond holds for the hits of the fault in force (a
// stalled fsync counts from the moment it stalls), or ctx ends, or the
// fault is cleared or replaced.
func (l *FS) WaitHits(ctx context.Context, cond func(Hits) bool) error {
	a := l.fault.Load()
	if a == nil {
		return errors.New("lossyfs: no fault in force")
	}
	for {
		a.mu.Lock()
		changed := a.changed
		a.mu.Unlock()
		if cond(a.hits()) {
			return nil
		}
		select {
		case <-changed:
		case <-a.cleared:
			return errors.New("lossyfs: the fault was cleared")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// opKind is an operation a fault may hit.
type opKind int

const (
	opWrite    opKind = iota // write [off, off+n)
	opAllocate               // fallocate
	opTruncate               // truncate from size off by n bytes (n > 0: it grows)
	opFsync
)

// inject returns the error the fault in force makes the operation fail with
// (after a stall, for a fsync), or 0. fd is a descriptor of the backing
// file (for ENOSPC: does the write need new space?), path the file's path
// in the mount.
func (l *FS) inject(ctx context.Context, op opKind, path string, fd int, off, n int64) syscall.Errno {
	a := l.fault.Load()
	if a == nil {
		return 0
	}
	want := OpWrite
	if op == opFsync {
		want = OpFsync
	}
	if a.Ops&want == 0 || (a.PathMatch != nil && !a.PathMatch.MatchString(path)) {
		return 0
	}
	if a.Kind == ENOSPC && (op == opWrite && !needsSpace(fd, off, n) || op == opTruncate && n <= 0) {
		return 0 // needs no new space
	}
	if a.Prob > 0 && a.Prob < 1 && rand.Float64() >= a.Prob {
		return 0
	}
	a.count(op)
	switch a.Kind {
	case EIO:
		return syscall.EIO
	case ENOSPC:
		return syscall.ENOSPC
	}
	// FsyncStall.
	start := time.Now()
	var timeout <-chan time.Time
	if a.Delay > 0 {
		t := time.NewTimer(a.Delay)
		defer t.Stop()
		timeout = t.C
	}
	defer func() { a.stalled.Add(int64(time.Since(start))) }()
	select {
	case <-timeout:
	case <-a.cleared:
	case <-ctx.Done():
		// The kernel interrupted the request: the caller got a fatal
		// signal (the harness kills a stalled member).
		return syscall.EINTR
	}
	return 0
}

// needsSpace reports whether writing [off, off+n) of the file open as fd
// allocates space: it reaches past the end of the file or into a hole.
func needsSpace(fd int, off, n int64) bool {
	var s syscall.Stat_t
	if err := syscall.Fstat(fd, &s); err != nil || off+n > s.Size {
		return true
	}
	hole, err := unix.Seek(fd, off, unix.SEEK_HOLE)
	return err != nil || hole < off+n
}

// fsyncFailed records that a fsync of the file failed: the pages it was
// to make durable stay lossy through later fsyncs until they are written
// again, appended ones as zeros.
func (l *FS) fsyncFailed(fd int, st *fileState) {
	var s syscall.Stat_t
	if err := syscall.Fstat(fd, &s); err != nil {
		s.Size = st.syncedSize // keep what is known
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st.failed == nil {
		st.failed = map[int64]bool{}
	}
	for page := range st.pre {
		st.failed[page] = true
	}
	for page := st.syncedSize / pageSize; page*pageSize < s.Size; page++ {
		if _, ok := st.pre[page]; ok || page*pageSize < st.syncedSize {
			continue // the page's pre-image, or its synced head, is kept already
		}
		st.pre[page] = make([]byte, min(pageSize, s.Size-page*pageSize))
		st.failed[page] = true
	}
}

// forget drops the kernel's cached pages of [off, off+n) after a write of
// them failed. The kernel copies a write into its page cache before it asks
// the FUSE server, and on an error only marks the pages not up to date: a
// shared mapping of the file (bbolt reads through one) would go on showing
// the bytes that were never written, where a local file system refuses the
// write before it touches the page. The invalidation cannot run in the
// write's handler (the kernel holds the pages locked until the handler
// answers), so it runs right after, and a mapping may see the bytes for a
// moment.
func (f *file) forget(off, n int64) {
	go f.ino.NotifyContent(off, n)
}

// faultPath is the path of the open file in the mount, for PathMatch
// (computed only while a fault is in force).
func (f *file) faultPath() string {
	if f.l.fault.Load() == nil {
		return ""
	}
	return f.ino.Path(nil)
}

// statfsFull reports no free space while an ENOSPC fault is in force.
func (l *FS) statfsFull(out *fuse.StatfsOut) {
	if a := l.fault.Load(); a != nil && a.Kind == ENOSPC {
		out.Bfree, out.Bavail = 0, 0
	}
}
