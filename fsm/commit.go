package fsm

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Group commits of the state machine file.
//
// Raft hands the state machine batches of committed entries. Each batch is
// applied to one bbolt read-write transaction that stays open across
// batches; the transaction is committed when it is due (CommitPolicy: it
// has been open for Interval, holds MaxEntries entries or MaxWrites
// writes), when a reader
// needs what it holds, before a snapshot is taken or restored, and at
// close. A bbolt commit writes every page the transaction dirtied (copy on
// write, pages of about ten buckets per ack) plus a meta page, so many
// batches in one commit write the pages they share once: it is etcd's
// backend batching (batch interval and limit), for the same reason.
//
// Nothing is less durable for it. The state machine file is never the
// durable record (durability.go): the Raft log is, and the file's applied
// index, committed in the same transaction as the data, tells Raft where to
// resume. A process that dies with a transaction open loses what the
// transaction held; at restart Raft replays those entries from its log.
//
// Reads see everything applied: a read transaction only sees committed
// data, so view commits the open transaction first when it holds entries
// (flush). Reads that may lag, the API's early checks of an ack that the
// state machine repeats at apply, use viewCommitted instead and cost no
// commit; the leader loops' bounded scans read inside the open
// transaction (viewLatest) and cost none either. Blocking queries are
// woken after every applied batch, as before; their read then commits.
//
// A commit that fails (a full file system) is rolled back by bbolt; the
// entries of the transaction are applied again, in order, to a new one
// (the state machine is deterministic: the same entries give the same
// state), so nothing applied is lost: the commit is retried until it
// succeeds, and reads fail meanwhile rather than miss an applied write.

// CommitPolicy says when the open transaction is committed.
type CommitPolicy struct {
	// Interval: commit once the transaction has been open this long. 0
	// commits after every batch (as the state machine did before group
	// commits).
	Interval time.Duration
	// MaxEntries: commit once the transaction holds this many entries.
	MaxEntries int
	// MaxWrites: commit once the transaction holds this many writes (puts
	// and deletes of keys; a key written again while its put is deferred
	// counts once); 0: no bound. bbolt keeps every node a transaction
	// dirtied in memory until it commits, so this bounds the memory of a
	// long interval under a load that writes many distinct keys (loading
	// blobs), while a load that writes few (serial acks) keeps the
	// interval, and the pages it dirties again are written once.
	MaxWrites int
	// FollowerInterval replaces Interval while the member follows
	// (SetLeading); 0 keeps Interval. A follower's apply is on no
	// client's path (an ack waits for the leader's apply, never for a
	// follower's), so it can commit less often: pages its batches dirty
	// again within the longer interval are written once, and the longer
	// stall of a bigger commit holds up nobody.
	FollowerInterval time.Duration
}

// DefaultCommitPolicy: what etcd's backend does, a commit every 100 ms or
// 10,000 operations. Readers do not wait for it: a read commits what was
// applied before it reads. At 64 acking workers, 100 ms instead of 20 ms
// gave 12-15% more acks per second for 13-19% less CPU per ack
// (docs/benchmarks.md): pages a batch dirties again within the interval are
// written once.
var DefaultCommitPolicy = CommitPolicy{Interval: 100 * time.Millisecond, MaxEntries: 10_000}

// SetCommitPolicy sets when the open transaction is committed. Call it
// before Raft starts applying.
func (f *FSM) SetCommitPolicy(p CommitPolicy) {
	f.txMu.Lock()
	defer f.txMu.Unlock()
	f.policy = p
}

// SetLeading tells the state machine whether its member leads, which
// chooses the commit interval (CommitPolicy.FollowerInterval). A member
// starts as a follower.
func (f *FSM) SetLeading(leading bool) {
	if f.leading.Swap(leading) == leading {
		return
	}
	f.txMu.Lock()
	defer f.txMu.Unlock()
	f.armTimer() // a leader's shorter interval may end sooner
}

// Leading reports what SetLeading last said.
func (f *FSM) Leading() bool { return f.leading.Load() }

// interval is the commit interval of the member's role. The caller holds
// f.txMu.
func (f *FSM) interval() time.Duration {
	if !f.leading.Load() && f.policy.FollowerInterval > 0 {
		return f.policy.FollowerInterval
	}
	return f.policy.Interval
}

// CommitReason says why the open transaction was committed.
type CommitReason string

// The reasons of a commit (SetCommitObserver).
const (
	// CommitDue: the policy's interval passed or the transaction holds
	// its most entries.
	CommitDue CommitReason = "due"
	// CommitRead: a reader needed what the transaction holds (view,
	// Flush).
	CommitRead CommitReason = "read"
	// CommitSnapshot: Raft takes a snapshot.
	CommitSnapshot CommitReason = "snapshot"
	// CommitRestore: a snapshot is restored over the state.
	CommitRestore CommitReason = "restore"
	// CommitClose: the state machine closes.
	CommitClose CommitReason = "close"
)

// CommitReasons lists every CommitReason.
var CommitReasons = []CommitReason{CommitDue, CommitRead, CommitSnapshot, CommitRestore, CommitClose}

// SetCommitObserver has fn told, after each successful commit of the
// state machine file, why it was made and how long it took (the deferred
// puts written, bbolt's commit); CommitStats counts the commits and their
// entries. Raft's apply waits for a commit, so the time is also how long
// the apply stalled. fn runs under the lock the apply and the readers
// take: it must be quick (a histogram's Observe).
func (f *FSM) SetCommitObserver(fn func(reason CommitReason, took time.Duration)) {
	f.txMu.Lock()
	defer f.txMu.Unlock()
	f.observeCommit = fn
}

// CommitStats counts the state machine's commits and the Raft entries
// they held.
type CommitStats struct {
	Commits uint64 // transactions committed
	Entries uint64 // Raft entries in them
	Failed  uint64 // commits that failed and were applied again
	// Ops counts the file operations of the entries committed.
	Ops FileOps
	// FilterBuilds counts the builds of the filter of blob keys from the
	// file (blob_filter.go): at open and at each restore.
	FilterBuilds uint64
	// FilterKeys is how many blob keys the filter counts (the open write
	// transaction's included): the blobs bucket's keys.
	FilterKeys uint64
}

// CommittedIndex is the applied index of the file's last commit: what a
// process that died now would restart from.
func (f *FSM) CommittedIndex() uint64 { return f.committed.Load() }

// CommitStats returns the counts since the FSM was opened.
func (f *FSM) CommitStats() CommitStats {
	f.txMu.Lock()
	defer f.txMu.Unlock()
	s := f.stats
	s.FilterBuilds = f.filterBuilds.Load()
	if f.blobKeys != nil {
		s.FilterKeys = f.blobKeys.keys()
	}
	return s
}

// applyPending applies logs to the open transaction (beginning one), the
// caller holding f.mu (read) and f.txMu. It returns one response per log
// and the new applied index. A fatal apply error panics (applyOne).
func (f *FSM) applyPending(logs []*raft.Log, last uint64) ([]any, uint64, error) {
	resp := make([]any, len(logs))
	for i, l := range logs {
		if l.Index <= last {
			continue
		}
		if f.wt == nil {
			if err := f.begin(); err != nil {
				return resp, last, err
			}
		}
		last = l.Index
		f.pending = append(f.pending, l)
		f.pendingLast = last
		if l.Type != raft.LogCommand {
			continue
		}
		f.wt.index = l.Index
		resp[i] = f.applyOne(f.wt, l)
	}
	if f.wt != nil {
		if err := f.wt.tx.Bucket(bucketMeta).Put(metaAppliedIndex, u64(last)); err != nil {
			return resp, last, err
		}
	}
	return resp, last, nil
}

func (f *FSM) begin() error {
	tx, err := f.db.Begin(true)
	if err != nil {
		return fmt.Errorf("fsm: begin a write transaction: %w", err)
	}
	fillAppended(tx)
	t := &txn{tx: tx, recs: recCache{}, recHints: f.recHints, awaitingHint: f.awaitingHint, dirty: map[string]map[string]struct{}{},
		objs: map[string]map[string]msgRecord{}, deferBlobs: !f.leading.Load()}
	if f.blobFilterOff {
		f.blobKeys = nil
	} else if f.blobKeys == nil {
		keys, err := buildBlobFilter(&txn{tx: tx})
		if err != nil {
			tx.Rollback()
			return fmt.Errorf("fsm: reading the keys of the blobs: %w", err)
		}
		f.blobKeys = keys
		f.filterBuilds.Add(1)
	}
	t.blobKeys = f.blobKeys
	f.wt = t
	f.openedAt = time.Now()
	return nil
}

// due reports whether the open transaction must be committed now.
func (f *FSM) due() bool {
	interval := f.interval()
	return f.wt != nil && (interval <= 0 || f.commitErr != nil ||
		len(f.pending) >= max(1, f.policy.MaxEntries) || time.Since(f.openedAt) >= interval ||
		(f.policy.MaxWrites > 0 && f.wt.writesHeld() >= f.policy.MaxWrites))
}

// commitLocked commits the open transaction, the caller holding f.mu
// (read) and f.txMu. On failure the transaction was rolled back: its
// entries are applied again to a new one, which stays open, and the error
// is returned (and kept in f.commitErr until a commit succeeds).
func (f *FSM) commitLocked(reason CommitReason) error {
	if f.wt == nil {
		return nil
	}
	start := time.Now()
	wt, n := f.wt, len(f.pending)
	last := f.pendingLast
	f.wt = nil
	err := wt.flushAll()
	if err == nil {
		err = wt.tx.Commit()
	} else {
		_ = wt.tx.Rollback()
	}
	f.recHints, f.awaitingHint = wt.recs.sizes(), len(wt.awaiting)
	if f.blobKeys != nil {
		f.blobKeys.ended(wt, err == nil)
	}
	if err == nil {
		f.committed.Store(last)
		f.usage.apply(wt.usage, last)
		f.unobserved.apply(wt.awaiting, last)
		f.pending = f.pending[:0]
		f.commitErr = nil
		f.stats.Commits++
		f.stats.Entries += uint64(n)
		f.stats.Ops.add(wt.ops)
		if f.observeCommit != nil {
			f.observeCommit(reason, time.Since(start))
		}
		return nil
	}
	f.stats.Failed++
	f.commitErr = err
	// bbolt rolled the transaction back; apply its entries again to a new
	// one. Their responses were handed to Raft already; the new ones are
	// the same and are dropped.
	logs := f.pending
	f.pending = nil
	if _, _, rerr := f.applyPending(logs, f.committed.Load()); rerr != nil {
		panic(fmt.Sprintf("fsm: applying entries %d to %d again after a failed commit (%v): %v",
			logs[0].Index, last, err, rerr))
	}
	f.noteOpenUsage()
	return err
}

// noteOpenUsage hands the usage changes of the open transaction to the
// counts (quota.go), the caller holding f.txMu.
func (f *FSM) noteOpenUsage() {
	if f.wt == nil {
		f.usage.setOpen(nil)
		return
	}
	f.usage.setOpen(f.wt.usage)
}

// flush commits the open transaction if it holds entries (readers call it
// before they read). It fails, without waiting, while commits fail: view
// then reads inside the open transaction (readOpen).
func (f *FSM) flush(reason CommitReason) error {
	f.txMu.Lock()
	defer f.txMu.Unlock()
	if f.wt == nil {
		return nil
	}
	if err := f.commitLocked(reason); err != nil {
		return fmt.Errorf("%w: %v", ErrStateNotWritable, err)
	}
	return nil
}

// ErrStateNotWritable answers a read while the state machine cannot commit
// what it applied (a full file system): the state a read would see lacks
// acknowledged writes, so the read is refused until the commit succeeds.
var ErrStateNotWritable = errors.New("fsm: the state machine cannot write its file")

// Flush commits what the state machine applied to its file. Reads do it
// themselves; callers that read the file by other means, or want the
// counts of quota.go up to date, call it.
func (f *FSM) Flush() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return errors.New("fsm: closed")
	}
	return f.flush(CommitRead)
}

// armTimer makes sure the open transaction is committed once its interval
// has passed, even if no batch or reader comes. The caller holds f.txMu.
func (f *FSM) armTimer() {
	if f.wt == nil {
		return
	}
	at := f.openedAt.Add(f.interval())
	if !f.timerAt.IsZero() && !f.timerAt.After(at) {
		return // armed for that time or earlier
	}
	f.timerAt = at
	if f.timer == nil {
		f.timer = time.AfterFunc(time.Until(at), f.onTimer)
	} else {
		f.timer.Reset(time.Until(at))
	}
}

func (f *FSM) onTimer() {
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.txMu.Lock()
	defer f.txMu.Unlock()
	f.timerAt = time.Time{}
	if f.db == nil || f.wt == nil || f.aborted.Load() {
		return
	}
	if !f.due() {
		f.armTimer()
		return
	}
	if err := f.commitLocked(CommitDue); err != nil {
		// The next batch (ApplyBatch) retries with backoff, and stalls
		// until the commit succeeds; readers are refused meanwhile.
		f.logger.Error("state machine commit failed; its entries are applied again and the commit retried", "err", err)
	}
}

// discardLocked rolls the open transaction back (shutdown with a commit
// that cannot succeed): the file keeps its last committed state and
// applied index, and Raft replays the rest at restart.
func (f *FSM) discardLocked() {
	if f.wt != nil {
		_ = f.wt.tx.Rollback()
		if f.blobKeys != nil {
			f.blobKeys.ended(f.wt, false)
		}
		f.wt = nil
	}
	f.pending = nil
	f.pendingLast = f.committed.Load()
	f.applied.Store(f.committed.Load())
	f.usage.setOpen(nil)
}

// readOpen runs fn inside the open write transaction, which holds every
// applied entry: reads go on while commits fail (a full file system) and
// ApplyBatch waits for space. It reports false when no transaction is
// open.
func (f *FSM) readOpen(fn func(t *txn) error) (uint64, bool, error) {
	f.txMu.Lock()
	defer f.txMu.Unlock()
	if f.wt == nil {
		return 0, false, nil
	}
	// The reader sees the deferred puts through the write transaction's
	// cache, or makes them before it scans a bucket (txn.b).
	t := &txn{tx: f.wt.tx, recs: f.wt.recs, recHints: f.wt.recHints, dirty: f.wt.dirty, objs: f.wt.objs}
	idx := t.appliedIndex()
	t.index = idx
	return idx, true, fn(t)
}

// viewLatest runs fn on every applied entry without committing them:
// inside the open write transaction when there is one (Raft's apply waits
// for fn meanwhile), else in a read transaction of the last commit. It is
// for the bounded scans of the leader's loops (at most a batch of keys
// from one index bucket): before it, each of their passes committed the
// open transaction first (view), and those commits were half of the
// leader's commit cost at 64 acking workers; and for the point reads of
// a request's path (the token of an authenticated request, the slot and
// URL keys, an upload-slot call's job check), which would otherwise
// commit once per request.
func (f *FSM) viewLatest(fn func(t *txn) error) (uint64, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return 0, errors.New("fsm: closed")
	}
	if idx, ok, err := f.readOpen(fn); ok {
		return idx, err
	}
	return f.readCommitted(fn)
}

// viewCommitted runs fn in a read transaction of the last committed state,
// which may lack the entries applied since (at most the commit interval).
// For checks that the state machine repeats at apply.
func (f *FSM) viewCommitted(fn func(t *txn) error) (uint64, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return 0, errors.New("fsm: closed")
	}
	return f.readCommitted(fn)
}
