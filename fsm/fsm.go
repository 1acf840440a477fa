package fsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/metastore/metastore/internal/boltcheck"
	"github.com/metastore/metastore/wire"
)

// FSM is the replicated state machine: a bbolt file holding the checkpoint
// model, its own last applied Raft index written in the same transaction as
// the data.
//
// It implements raft.BatchingFSM. Apply and Restore run on Raft's FSM
// goroutine; reads run concurrently and take the read side of mu, which
// Restore takes exclusively while it swaps the file.
type FSM struct {
	path   string
	logger *slog.Logger

	mu sync.RWMutex // guards db against Restore's swap
	db *bolt.DB
	// noSync: commits are not fsynced; the Raft log is the durable record
	// (durability.go).
	noSync bool

	applied atomic.Uint64
	// members are the member records as of the last applied entry, read
	// by Members without a lock (members.go).
	members atomic.Pointer[memberList]

	// stop ends a wait for disk space (StopWaiting); aborted is set when a
	// batch was left unapplied at shutdown: nothing more is applied or
	// snapshotted by this process. stalled is true while ApplyBatch waits
	// for space.
	stop     chan struct{}
	stopOnce sync.Once
	aborted  atomic.Bool
	stalled  atomic.Bool

	// changed is closed and replaced after every applied batch, waking
	// blocking queries.
	changedMu sync.Mutex
	changed   chan struct{}

	// usage: every job's usage of the blob table (quota.go).
	usage usageCounts
	// unobserved: the blobs awaiting the leader's observation
	// (unobserved.go).
	unobserved unobservedIndex

	// The open write transaction and its entries (commit.go), guarded by
	// txMu; lock order f.mu, then txMu. committed is the applied index
	// of the last commit.
	txMu sync.Mutex
	wt   *txn
	// recHints and awaitingHint size the next write transaction's caches
	// (txn.recHints, txn.awaitingHint).
	recHints     map[string]int
	awaitingHint int
	// blobKeys is the filter of blob keys (blob_filter.go) that the write
	// transactions use; filterBuilds counts its builds from the file.
	blobKeys     *blobFilter
	filterBuilds atomic.Uint64
	// blobFilterOff: the write transactions search the file for every
	// blob key (a benchmark's comparison; DisableBlobFilter).
	blobFilterOff bool
	pending       []*raft.Log
	pendingLast   uint64
	openedAt      time.Time
	policy        CommitPolicy
	leading       atomic.Bool // SetLeading
	commitErr     error
	timer         *time.Timer
	timerAt       time.Time // when timer fires; zero: not armed
	stats         CommitStats
	committed     atomic.Uint64
	// observeCommit is told of each commit (SetCommitObserver).
	observeCommit func(CommitReason, time.Duration)
}

var _ raft.BatchingFSM = (*FSM)(nil)

func boltOptions() *bolt.Options {
	return &bolt.Options{
		// A snapshot holds a read transaction while Apply keeps writing; a
		// generous initial map avoids the remap that would block on it.
		InitialMmapSize: 256 << 20,
		Timeout:         2 * time.Second,
		NoFreelistSync:  true,
		FreelistType:    bolt.FreelistMapType,
	}
}

// Open opens (or creates) the state machine file at path.
func Open(path string, logger *slog.Logger) (*FSM, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f := &FSM{path: path, logger: logger, changed: make(chan struct{}), stop: make(chan struct{}), policy: DefaultCommitPolicy}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("fsm: %w", err)
	}
	noSync, err := checkMarker(path, logger)
	if err != nil {
		return nil, err
	}
	f.noSync = noSync
	if err := boltcheck.Check(path, nil); err != nil {
		return nil, fmt.Errorf("fsm: state machine file %w; %s", err, RebuildHint)
	}
	db, err := f.openDB(path)
	if err != nil {
		return nil, err
	}
	// A restore writes its file beside the state machine's and renames it
	// over it; one left here (now that this process holds the file's lock)
	// was cut short by a crash before the rename and is garbage: Raft
	// restores again whatever is still needed.
	if info, err := os.Stat(path + restoreSuffix); err == nil {
		logger.Warn("removing a partly restored state machine file left by a crash during a restore",
			"file", path+restoreSuffix, "bytes", info.Size())
		if err := os.Remove(path + restoreSuffix); err != nil {
			db.Close()
			return nil, fmt.Errorf("fsm: %w", err)
		}
	}
	if noSync {
		if err := setMarker(path, markerOpen); err != nil {
			db.Close()
			return nil, err
		}
	}
	if err := f.rebuildCounts(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("fsm: %s: counting the jobs' blobs: %w", path, err)
	}
	_ = db.View(func(tx *bolt.Tx) error { f.publishMembers(&txn{tx: tx}); return nil })
	f.db = db
	f.applied.Store(readApplied(db))
	f.committed.Store(f.applied.Load())
	return f, nil
}

// openDB opens a state machine file, unsynced when the FSM writes without
// sync (see durability.go).
func (f *FSM) openDB(path string) (*bolt.DB, error) {
	db, err := openDB(path, f.logger)
	if err == nil {
		db.NoSync = f.noSync
	}
	return db, err
}

// openDB opens a state machine file, creating its buckets and rewriting
// the records of an older schema version (migrateRecords). logger may be
// nil.
func openDB(path string, logger *slog.Logger) (*bolt.DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("fsm: %w", err)
	}
	db, err := bolt.Open(path, 0o600, boltOptions())
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("fsm: %s is locked by another process (is another metastore using this data directory?)", path)
		}
		return nil, fmt.Errorf("fsm: open %s: %w", path, err)
	}
	if err := db.Update(initSchema); err != nil {
		db.Close()
		return nil, err
	}
	start := time.Now()
	n, from, err := migrateRecords(db)
	if err != nil {
		db.Close()
		return nil, err
	}
	switch {
	case logger == nil || from >= SchemaVersion:
	case n > 0:
		logger.Info(fmt.Sprintf("state machine records rewritten in the binary encoding of schema version %d", SchemaVersion),
			"file", path, "records", n, "from_version", from, "took", time.Since(start).Round(time.Millisecond))
	default:
		logger.Info(fmt.Sprintf("state machine file upgraded to schema version %d", SchemaVersion),
			"file", path, "from_version", from, "took", time.Since(start).Round(time.Millisecond))
	}
	return db, nil
}

func readApplied(db *bolt.DB) uint64 {
	var idx uint64
	_ = db.View(func(tx *bolt.Tx) error {
		idx = (&txn{tx: tx}).appliedIndex()
		return nil
	})
	return idx
}

// Close closes the file.
func (f *FSM) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.db == nil {
		return nil
	}
	var errs []error
	f.txMu.Lock()
	if err := f.commitLocked(CommitClose); err != nil {
		// Raft replays the entries at the next start.
		f.discardLocked()
		errs = append(errs, fmt.Errorf("fsm: commit %s: %w", f.path, err))
	}
	f.txMu.Unlock()
	if f.noSync {
		if err := f.db.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("fsm: sync %s: %w", f.path, err))
		}
	}
	if err := f.db.Close(); err != nil {
		errs = append(errs, err)
	}
	f.db = nil
	f.members.Store(&memberList{err: errClosed})
	if f.noSync && len(errs) == 0 {
		if err := setMarker(f.path, markerClosed); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// AppliedIndex is the index of the last Raft entry applied to the file.
func (f *FSM) AppliedIndex() uint64 { return f.applied.Load() }

// Changes returns a channel closed when the next batch is applied (or a
// snapshot restored). Take it before reading, then wait on it.
func (f *FSM) Changes() <-chan struct{} {
	f.changedMu.Lock()
	defer f.changedMu.Unlock()
	return f.changed
}

func (f *FSM) notify() {
	f.changedMu.Lock()
	close(f.changed)
	f.changed = make(chan struct{})
	f.changedMu.Unlock()
}

// WaitApplied returns once the state machine has applied index, or with
// ctx's error.
func (f *FSM) WaitApplied(ctx context.Context, index uint64) error {
	for {
		ch := f.Changes()
		if f.AppliedIndex() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitChange returns when a batch is applied after the call, or when ctx
// ends (with no error: a blocking query answers with what it has).
func (f *FSM) WaitChange(ctx context.Context) {
	select {
	case <-f.Changes():
	case <-ctx.Done():
	}
}

// view runs fn in a read transaction; the txn's index is the applied index
// the read reflects.
func (f *FSM) view(fn func(t *txn) error) (uint64, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return 0, errors.New("fsm: closed")
	}
	if err := f.flush(CommitRead); err != nil {
		if idx, ok, err := f.readOpen(fn); ok {
			return idx, err
		}
	}
	return f.readCommitted(fn)
}

// readCommitted runs fn in a read transaction of the last commit; the
// caller holds f.mu (read) and checked the file is open.
func (f *FSM) readCommitted(fn func(t *txn) error) (uint64, error) {
	var idx uint64
	err := f.db.View(func(tx *bolt.Tx) error {
		t := &txn{tx: tx}
		idx = t.appliedIndex()
		t.index = idx
		return fn(t)
	})
	return idx, err
}

// Apply applies one log entry. See ApplyBatch.
func (f *FSM) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch applies a batch of entries in one bbolt transaction and returns
// one response per entry, in order: a *Result for each command entry, nil
// for other entries. Entries at or below the stored applied index were
// applied before a restart and are skipped.
//
// A rule violation is a Result with Err set and no writes. An entry that
// cannot be decoded, or a failed write, panics: the node stops rather than
// diverge from its peers. The exception is a file system that is full
// (ENOSPC): the transaction was rolled back, nothing of the batch is in the
// file, so the batch is tried again, with backoff, until it commits. The
// member stalls (Raft's FSM goroutine waits here) but skips nothing; it
// resumes as soon as space is freed. StopWaiting ends the wait at shutdown.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	if f.aborted.Load() {
		return abortedResponses(logs)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.txMu.Lock()
	defer f.txMu.Unlock()
	defer func() {
		// An entry that cannot be applied stops the member: nothing of the
		// open transaction reaches the file, whose applied index makes the
		// member meet the entry again at restart.
		if r := recover(); r != nil {
			f.discardLocked()
			panic(r)
		}
	}()
	resp, last, err := f.applyPending(logs, f.applied.Load())
	if err != nil {
		panic(fmt.Sprintf("fsm: apply batch ending at index %d: %v", last, err))
	}
	f.noteOpenUsage()
	if f.wt != nil && len(f.wt.members) > 0 {
		f.updateMembers(f.wt, f.wt.members)
		f.wt.members = nil
	}
	// A batch whose commit is due counts as applied once it is committed:
	// while the file system is full, it is the entry the member waits on.
	if f.due() {
		if !f.commitStalling(logs) {
			return abortedResponses(logs)
		}
	} else {
		f.armTimer()
	}
	f.applied.Store(last)
	f.notify()
	return resp
}

// commitStalling commits the open transaction, retrying with backoff while
// the file system is full (the member stalls: Raft's FSM goroutine waits
// here, and reads are refused). The caller holds f.mu (read) and f.txMu;
// txMu is released while it waits. It returns false when StopWaiting ended
// the wait: the open transaction is discarded, nothing more is applied or
// snapshotted by this process, and Raft replays the entries after the
// file's applied index at restart.
func (f *FSM) commitStalling(logs []*raft.Log) bool {
	backoff := noSpaceMinBackoff
	var since, lastLog time.Time
	for {
		err := f.commitLocked(CommitDue)
		if err == nil {
			if !since.IsZero() {
				f.stalled.Store(false)
				f.logger.Info("state machine write succeeded again after the file system was full",
					"file", f.path, "stalled_for", time.Since(since).Round(time.Millisecond), "applied_index", f.applied.Load())
			}
			return true
		}
		if !IsNoSpace(err) {
			panic(fmt.Sprintf("fsm: commit of the batch ending at index %d: %v", logs[len(logs)-1].Index, err))
		}
		now := time.Now()
		if since.IsZero() {
			since = now
			f.stalled.Store(true)
		}
		if now.Sub(lastLog) >= noSpaceLogEvery {
			lastLog = now
			f.logger.Error("state machine write failed: the file system is full; retrying until space is freed (this member applies nothing meanwhile)",
				"file", f.path, "first_index", logs[0].Index, "last_index", logs[len(logs)-1].Index,
				"stalled_for", now.Sub(since).Round(time.Millisecond), "err", err)
		}
		f.txMu.Unlock()
		select {
		case <-time.After(backoff):
			f.txMu.Lock()
		case <-f.stop:
			f.txMu.Lock()
			// Shutting down with entries the full file system kept out of
			// the file. The file holds everything before them, and its
			// applied index says so: a restart replays them from the Raft
			// log. Until then nothing more is applied (or snapshotted),
			// so this process never exposes a state with a gap.
			f.aborted.Store(true)
			f.discardLocked()
			f.logger.Warn("shutting down with entries the full file system kept from being written; they are applied again from the Raft log at restart",
				"first_index", logs[0].Index, "last_index", logs[len(logs)-1].Index)
			return false
		}
		backoff = min(2*backoff, noSpaceMaxBackoff)
	}
}

// Waiting for space: the retry backoff of a batch that failed with ENOSPC,
// and how often the failure is logged while it lasts.
const (
	noSpaceMinBackoff = 50 * time.Millisecond
	noSpaceMaxBackoff = time.Second
	noSpaceLogEvery   = 10 * time.Second
)

// ErrApplyAborted answers the entries of a batch the state machine did not
// apply because it was shutting down while its file system was full.
var ErrApplyAborted = errors.New("fsm: not applied: the node shut down while the file system was full; the entry is applied again at restart")

func abortedResponses(logs []*raft.Log) []any {
	resp := make([]any, len(logs))
	for i := range resp {
		resp[i] = ErrApplyAborted
	}
	return resp
}

// StopWaiting ends ApplyBatch's wait for disk space: the node calls it
// before shutting Raft down, which waits for the FSM goroutine. After it,
// a batch that cannot be written is left unapplied (see ApplyBatch).
func (f *FSM) StopWaiting() { f.stopOnce.Do(func() { close(f.stop) }) }

// Stalled reports whether ApplyBatch is waiting for disk space now.
func (f *FSM) Stalled() bool { return f.stalled.Load() }

// IsNoSpace reports whether err is a write that failed because the file
// system is full (ENOSPC) or over quota (EDQUOT). bbolt formats some of its
// errors (file growth) with %s, so the message is checked too.
func IsNoSpace(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, syscall.ENOSPC.Error()) || strings.Contains(msg, syscall.EDQUOT.Error())
}

func (f *FSM) applyOne(t *txn, l *raft.Log) *Result {
	r, err := applyEntry(t, l)
	if err != nil {
		panic(err.Error())
	}
	return r
}

// applyEntry decodes and applies one command entry in t: it returns the
// command's Result (a value or a rule violation, which wrote nothing), or
// a fatal error (an entry that cannot be decoded, a failed write) after
// which t must be rolled back.
func applyEntry(t *txn, l *raft.Log) (*Result, error) {
	c, err := Decode(l.Data)
	if err != nil {
		return nil, fmt.Errorf("fsm: entry %d: %w", l.Index, err)
	}
	v, err := applyCommand(t, c)
	r, err := result(l.Index, v, err)
	if err != nil {
		return nil, fmt.Errorf("fsm: entry %d (%s): %w", l.Index, c.Type, err)
	}
	return r, nil
}

// result turns a handler's answer into the command's result: its value, or
// its rule violation. Any other error is returned: it is fatal.
func result(index uint64, v any, err error) (*Result, error) {
	var rule *wire.RuleError
	switch {
	case err == nil:
		return &Result{Index: index, Value: shown(v)}, nil
	case errors.As(err, &rule):
		return &Result{Index: index, Err: rule}, nil
	default:
		return nil, err
	}
}

// RebuildHint tells the operator what to do about a data file found
// corrupt at start.
const RebuildHint = "the member cannot start: rebuild it from the other members with `metastore rebuild`, " +
	"its serve flags and --join (docs/operations.md, \"Corrupted files and rebuilding a member\")"

// restoreSuffix names the file a restore writes before renaming it over
// the state machine's path.
const restoreSuffix = ".restore"

// snapshotMagic starts every snapshot, followed by the schema version.
var snapshotMagic = []byte("METASTORE-SNAP\n")

// Snapshot captures the state: it opens a read transaction, which Persist
// streams while Apply goes on.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if f.aborted.Load() {
		return nil, ErrApplyAborted
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	// Raft takes the snapshot as of the last applied entry: commit it.
	if err := f.flush(CommitSnapshot); err != nil {
		return nil, fmt.Errorf("fsm: snapshot: %w", err)
	}
	tx, err := f.db.Begin(false)
	if err != nil {
		return nil, fmt.Errorf("fsm: snapshot: %w", err)
	}
	return &snapshot{tx: tx, logger: f.logger}, nil
}

type snapshot struct {
	tx     *bolt.Tx
	logger *slog.Logger
	once   sync.Once
}

// Persist writes the header and the bbolt file as of the read transaction.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	err := func() error {
		hdr := append(append([]byte{}, snapshotMagic...), u64(SchemaVersion)...)
		if _, err := sink.Write(hdr); err != nil {
			return err
		}
		_, err := s.tx.WriteTo(sink)
		return err
	}()
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("fsm: persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release ends the read transaction.
func (s *snapshot) Release() { s.once.Do(func() { _ = s.tx.Rollback() }) }

// Restore replaces the whole state with a snapshot.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	return f.RestoreFrom(rc)
}

// RestoreFrom replaces the whole state with the snapshot read from r: it
// writes the file beside the current one, syncs it, checks it opens, then
// swaps it in under the exclusive lock so no reader sees a mix.
func (f *FSM) RestoreFrom(r io.Reader) error {
	if _, err := readSnapshotHeader(r); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	tmp := f.path + restoreSuffix
	if err := writeSynced(tmp, r); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("fsm: restore: %w", err)
	}
	if err := checkSnapshotFile(tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("fsm: restore: snapshot content: %w", err)
	}
	check, err := openDB(tmp, f.logger)
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("fsm: restore: snapshot content: %w", err)
	}
	idx := readApplied(check)
	if err := check.Close(); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	if faultInject {
		faultRestore(faultRestoreWritten, tmp) // test builds only
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	// What was applied before the snapshot is committed first: if the swap
	// fails, the current file stays in use with everything Raft applied.
	f.txMu.Lock()
	err = f.commitLocked(CommitRestore)
	f.txMu.Unlock()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("fsm: restore: %w", err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("fsm: restore: %w", err) // the current file stays in use
	}
	if err := syncDir(filepath.Dir(f.path)); err != nil {
		f.logger.Warn("restore: syncing the data directory after the swap failed", "err", err)
	}
	if faultInject {
		faultRestore(faultRestoreRenamed, f.path) // test builds only
	}
	// The path now names the restored file; the current database still
	// has the old one open. It is closed in the background: bbolt's Close
	// waits for every read transaction, and a snapshot being persisted
	// holds one while Raft's snapshot goroutine waits for Raft's main
	// goroutine, which waits for this restore. Closing here would
	// deadlock the member.
	db, err := f.openDB(f.path)
	if err != nil {
		panic(fmt.Sprintf("fsm: restore: cannot open the restored state machine file %s: %v", f.path, err))
	}
	if old := f.db; old != nil {
		go func() {
			if err := old.Close(); err != nil {
				f.logger.Warn("restore: closing the replaced state machine file failed", "err", err)
			}
		}()
	}
	if err := f.rebuildCounts(db); err != nil {
		panic(fmt.Sprintf("fsm: restore: cannot read the restored state machine file %s: %v", f.path, err))
	}
	_ = db.View(func(tx *bolt.Tx) error { f.publishMembers(&txn{tx: tx}); return nil })
	f.db = db
	f.applied.Store(idx)
	f.committed.Store(idx)
	f.logger.Info("state restored from snapshot", "applied_index", idx)
	f.notify()
	return nil
}

// readSnapshotHeader reads and checks a snapshot's header: the magic and a
// schema version this build reads. It returns the header.
func readSnapshotHeader(r io.Reader) ([]byte, error) {
	hdr := make([]byte, len(snapshotMagic)+8)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	if string(hdr[:len(snapshotMagic)]) != string(snapshotMagic) {
		return nil, errors.New("not a metastore snapshot")
	}
	if v := binary.BigEndian.Uint64(hdr[len(snapshotMagic):]); v > SchemaVersion {
		return nil, fmt.Errorf("snapshot schema version %d; this build reads up to %d", v, SchemaVersion)
	}
	return hdr, nil
}

// checkSnapshotFile checks that path holds a whole state machine file
// before anything opens it for writing (boltcheck.Check: whole, its pages
// well formed, every bucket, key and value readable): bbolt turns an empty
// file into a new, empty database, faults (SIGBUS, fatal) on the missing
// pages of a truncated one, and panics in a goroutine of its own on a
// damaged page when it opens a file for writing. The file must also be a
// state machine's: its meta bucket records a schema version.
func checkSnapshotFile(path string) error {
	ours := false
	err := boltcheck.Check(path, func(name []byte, b *bolt.Bucket) error {
		if bytes.Equal(name, bucketMeta) && b.Get(metaSchema) != nil {
			ours = true
		}
		return nil
	})
	if err == nil && !ours {
		err = errors.New("not a metastore state machine file")
	}
	return err
}

func writeSynced(path string, r io.Reader) error {
	out, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
