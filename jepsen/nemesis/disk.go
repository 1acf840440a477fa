package nemesis

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/metastore/metastore/jepsen/cluster"
	"github.com/metastore/metastore/jepsen/lossyfs"
)

// raftLog matches the Raft log and stable store (the current term and
// vote), relative to the data directory: raft-wal's segments and
// wal-meta.db, or raft-boltdb's raft.db (node/raftstore.go).
var raftLog = regexp.MustCompile(`^raft/(raft\.db|wal/.+)$`)

// ioErrorPanic is the panic of a member that stops on an I/O error
// (hashicorp/raft's "failed to save current term: ...: input/output
// error", the state machine's "fsm: apply batch ending at
// index N: write .../fsm.db: input/output error").
var ioErrorPanic = regexp.MustCompile(`: input/output error$`)

// diskFault is a fault of a member's disk (lossyfs.FS.SetFault) for the
// hold.
type diskFault struct {
	name   string
	target Target
	fault  lossyfs.Fault
	what   string // what the fault does, for Describe
	panics []*regexp.Regexp

	victim   *cluster.Member
	isLeader bool
	starts   int // the victim's Starts at Inject: a restart since is not ours to redo
	detail   string
}

// DiskEIO returns the fault that makes half of the writes and fsyncs of
// the target member's Raft log and stable store (raft/wal/ or raft/raft.db) fail with
// EIO for the hold. The member must not go on as if what failed were
// durable: it stops with a panic at a failed append or compaction of its
// log (node: stopOnWriteError), and hashicorp/raft panics when it cannot
// record a term (expected panics: PanicExpecter). The state machine file is left alone:
// the state machine panics at its first failed write (fsm.ApplyBatch), so
// the member would stop before its log's fsyncs ever failed. Heal clears
// the fault and restarts the member if it exited.
func DiskEIO(t Target) Fault {
	return &diskFault{name: "disk-eio-" + string(t), target: t,
		fault:  lossyfs.Fault{Kind: lossyfs.EIO, Ops: lossyfs.OpWrite | lossyfs.OpFsync, PathMatch: raftLog, Prob: 0.5},
		what:   "EIO on half the writes and fsyncs of the Raft log (raft/)",
		panics: []*regexp.Regexp{ioErrorPanic}}
}

// DiskFull returns the fault that fills the target member's disk for the
// hold: every write that needs new space, fallocate and every truncation
// that grows a file fail with ENOSPC, and the file system reports no free
// space. Heal clears it and restarts the member if it exited.
func DiskFull(t Target) Fault {
	return &diskFault{name: "disk-full-" + string(t), target: t,
		fault: lossyfs.Fault{Kind: lossyfs.ENOSPC},
		what:  "ENOSPC on writes that need space (disk full)"}
}

// FsyncStall returns the fault that holds every fsync of the target
// member's files for delay (a slow or hung device), until the heal, which
// releases the fsyncs still held.
func FsyncStall(t Target, delay time.Duration) Fault {
	return &diskFault{name: "fsync-stall-" + string(t), target: t,
		fault: lossyfs.Fault{Kind: lossyfs.FsyncStall, Delay: delay},
		what:  fmt.Sprintf("every fsync stalled %s", delay)}
}

func (f *diskFault) Name() string         { return f.name }
func (f *diskFault) Describe() string     { return f.detail }
func (f *diskFault) NeedsLossyDisk() bool { return true }

func (f *diskFault) ExpectedPanics() []*regexp.Regexp { return f.panics }

func (f *diskFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	m, isLeader, err := pick(ctx, c, f.target)
	if err != nil {
		return err
	}
	disk := m.Disk()
	if disk == nil {
		return fmt.Errorf("%s needs Options.LossyDisk", f.name)
	}
	f.victim, f.isLeader, f.starts = m, isLeader, m.Starts()
	if err := disk.SetFault(f.fault); err != nil {
		return err
	}
	f.detail = fmt.Sprintf("%s of %s (%s)", f.what, m.ID, role(isLeader))
	return nil
}

func (f *diskFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	if f.victim == nil {
		return nil
	}
	hits := f.victim.Disk().ClearFault()
	f.detail += fmt.Sprintf(": %s", hits)
	if f.victim.Running() || f.victim.Starts() != f.starts {
		return nil
	}
	if st := f.victim.LastExit(); st != nil {
		f.detail += fmt.Sprintf("; %s exited (%s)", f.victim.ID, st)
	}
	return restartAll(ctx, []*cluster.Member{f.victim}, &f.detail)
}
