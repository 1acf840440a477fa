package node

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"

	metricscompat "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	bolt "go.etcd.io/bbolt"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/boltcheck"
)

// The Raft log store.
//
// A member keeps its Raft log and its term and vote (the stable store) in
// one of two stores, in RaftDir:
//
//   - wal: hashicorp/raft-wal, in raft/wal/. Entries are appended to
//     preallocated segment files (64 MiB), one write and one fsync per
//     append; a small bbolt file (wal-meta.db) records which segments exist
//     and holds the term and vote. Compaction deletes whole segments. This
//     is what Consul runs, and what new data directories get.
//   - boltdb: hashicorp/raft-boltdb, raft/raft.db. Every append is a bbolt
//     transaction: the leaf and branch pages it touches are copied and
//     written, then a meta page, with two fdatasyncs. Directories created
//     before format 2 have it, and keep it.
//
// Measured outside the store with 600-byte entries (docs/benchmarks.md),
// an append of one entry costs raft-wal a third of the latency and CPU of
// raft-boltdb and an eighth of the bytes written.
//
// A data directory keeps the store it was created with: the files decide,
// not the setting, which applies only where there are none. A member is
// moved to the other store by rebuilding it from the cluster (metastore
// rebuild), which starts it with an empty Raft directory.

// raftStore is the Raft log and stable store of a member.
type raftStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

const (
	// walDir is the raft-wal directory in RaftDir.
	walDir = "wal"
)

// RaftLogStoreIn returns which Raft log store the data directory dir holds
// (config.RaftLogStoreWAL or config.RaftLogStoreBoltDB), or "" when it
// holds neither. Both at once is an error: one of them was put there by
// hand.
func RaftLogStoreIn(dataDir string) (string, error) {
	raftDir := filepath.Join(dataDir, "raft")
	hasBolt, err := exists(filepath.Join(raftDir, raftDBFile))
	if err != nil {
		return "", err
	}
	hasWAL, err := exists(filepath.Join(raftDir, walDir))
	if err != nil {
		return "", err
	}
	switch {
	case hasBolt && hasWAL:
		return "", fmt.Errorf("node: %s holds two Raft logs, %s and %s/: move aside the one this member did not write last (metastore rebuild moves both)",
			raftDir, raftDBFile, walDir)
	case hasBolt:
		return config.RaftLogStoreBoltDB, nil
	case hasWAL:
		return config.RaftLogStoreWAL, nil
	}
	return "", nil
}

func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return false, fmt.Errorf("node: %w", err)
}

// openRaftStore opens the Raft log store the data directory holds, or
// creates the configured one in an empty Raft directory, after checking
// its files (integrity.go). It returns the store and its file or directory.
func openRaftStore(cfg config.Config, log *slog.Logger, raftLog *slog.Logger, space spaceWait) (raftStore, string, error) {
	kind, err := RaftLogStoreIn(cfg.DataDir)
	if err != nil {
		return nil, "", err
	}
	if kind == "" {
		kind = cfg.RaftLogStore
		if kind == "" {
			kind = config.DefaultConfig().RaftLogStore
		}
	} else if cfg.RaftLogStore != "" && cfg.RaftLogStore != kind {
		log.Info("the data directory keeps the Raft log store it was created with; rebuild this member from the cluster (metastore rebuild) to move it to the configured one",
			"raft_log_store", kind, "configured", cfg.RaftLogStore)
	}
	switch kind {
	case config.RaftLogStoreBoltDB:
		path := filepath.Join(cfg.RaftDir(), raftDBFile)
		s, err := openBoltStore(path)
		return s, path, err
	case config.RaftLogStoreWAL:
		size := cfg.RaftWALSegmentSize
		if size <= 0 {
			size = config.DefaultConfig().RaftWALSegmentSize
		}
		path := filepath.Join(cfg.RaftDir(), walDir)
		s, err := openWAL(path, int(size), raftLog, space)
		return s, path, err
	}
	return nil, "", fmt.Errorf("node: unknown Raft log store %q", kind)
}

func openBoltStore(path string) (raftStore, error) {
	if err := checkRaftDB(path); err != nil {
		return nil, corruptFrom(err) // integrity.go
	}
	s, err := raftboltdb.New(raftboltdb.Options{
		Path: path,
		BoltOptions: &bolt.Options{
			Timeout: boltOpenTimeout,
			// The log appends at its tail and deletes at its head after
			// every snapshot, so its freelist is long: rebuilding it at
			// open (a scan) beats writing it out at every commit.
			NoFreelistSync: true,
			FreelistType:   bolt.FreelistMapType,
		},
		NoSync: false, // an unsynced log forgets acknowledged entries and votes
	})
	if err != nil {
		return nil, fmt.Errorf("node: open raft log store: %w", err)
	}
	return s, nil
}

func openWAL(dir string, segmentSize int, raftLog *slog.Logger, space spaceWait) (raftStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("node: create %s: %w", dir, err)
	}
	meta := filepath.Join(dir, metadb.FileName)
	// raft-wal opens it without a timeout: a file in use would hang the
	// start instead of failing it.
	if err := boltcheck.NotInUse(meta); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if err := boltcheck.Check(meta, nil); err != nil {
		return nil, corruptFrom(err)
	}
	filer := &stallingFiler{SegmentFiler: segment.NewFiler(dir, walfs.New()), dir: dir, space: space}
	w, err := wal.Open(dir, wal.WithSegmentFiler(filer), wal.WithSegmentSize(segmentSize), wal.WithMetricsCollector(walMetrics{}), wal.WithLogger(newHCLogger(raftLog, "wal")))
	if err != nil {
		if errors.Is(err, wal.ErrCorrupt) {
			return nil, &CorruptError{Path: dir, Problem: err.Error()}
		}
		return nil, fmt.Errorf("node: open raft log store %s: %w", dir, err)
	}
	if err := checkWAL(w); err != nil {
		_ = w.Close()
		return nil, &CorruptError{Path: dir, Problem: err.Error()}
	}
	filer.running.Store(true)
	return walStore{w}, nil
}

// stallingFiler is raft-wal's segment files with one change: once the WAL
// is open, creating a segment on a full file system is retried, with
// backoff, until space is freed or the node shuts down.
//
// raft-wal creates the next segment (preallocated whole) when the current
// one is full, in the background, after recording it in wal-meta.db. If
// that fails it logs the error and every later append fails with "segment
// is sealed" until the WAL is opened again. On a full disk the member
// would have to stop, and could not start again until space was freed
// (raft-wal creates the missing segment at open). Waiting instead holds
// the appends until the segment exists, as the stable store and the state
// machine wait for space (stallingStable, fsm.ApplyBatch); the member goes
// on where it was once space is freed. At open, a full file system is an
// error: nothing is serving yet, and the operator sees why it cannot
// start.
type stallingFiler struct {
	types.SegmentFiler
	dir     string
	space   spaceWait
	running atomic.Bool
}

func (f *stallingFiler) Create(info types.SegmentInfo) (types.SegmentWriter, error) {
	var sw types.SegmentWriter
	create := func() error {
		var err error
		sw, err = f.SegmentFiler.Create(info)
		if err != nil && isNoSpace(err) {
			// The file exists (created exclusively by this call) when its
			// preallocation failed; the next attempt creates it again.
			if rmErr := os.Remove(filepath.Join(f.dir, segment.FileName(info))); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
				return errors.Join(err, rmErr)
			}
		}
		return err
	}
	if !f.running.Load() {
		return sw, create()
	}
	err := f.space.wait(create,
		"cannot create the Raft log's next segment: the file system is full; retrying until space is freed (this member appends nothing to its log meanwhile)",
		"the Raft log's next segment created after the file system was full",
		"segment", segment.FileName(info), "bytes", info.SizeLimit)
	return sw, err
}

// walStore is raft-wal with one change: GetLog answers only for the
// entries between FirstIndex and LastIndex, as raft-boltdb does.
//
// raft-wal removes entries from disk a whole segment at a time, and goes on
// returning those of its tail segment after they were deleted. Raft asks
// for entries it has deleted in two places, and expects "not found":
//
//   - a leader replicating to a member behind its compacted log sends a
//     snapshot when the entries are not found; it would send the member
//     thousands of old entries instead;
//   - a follower checking an append's previous entry after it installed a
//     snapshot (which deletes its whole log when the store is monotonic):
//     finding a deleted entry there, it would accept appends after it, and
//     raft-wal would start its log past a gap that Raft then fails to
//     apply across.
type walStore struct {
	*wal.WAL
}

func (s walStore) GetLog(index uint64, l *raft.Log) error {
	first, last, err := logBounds(s.WAL)
	if err != nil {
		return err
	}
	if first == 0 || index < first || index > last {
		return raft.ErrLogNotFound
	}
	return s.WAL.GetLog(index, l)
}

// logBounds returns the first and last index of a log.
func logBounds(l raft.LogStore) (first, last uint64, err error) {
	if first, err = l.FirstIndex(); err != nil {
		return 0, 0, err
	}
	last, err = l.LastIndex()
	return first, last, err
}

// checkWAL reads every entry of the log once: raft-wal checks a segment's
// frames as it reads them, and only the last batch's checksum at open.
// (The WAL's GetLog is used directly: between the first and last index it
// answers as walStore does.) raft-wal's decoder panics on some damaged
// entries (a slice out of range); that panic is the damage reported.
func checkWAL(w *wal.WAL) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("an entry cannot be decoded: %v", r)
		}
	}()
	first, last, err := logBounds(w)
	if err != nil {
		return err
	}
	if first == 0 {
		return nil
	}
	var l raft.Log
	for i := first; i <= last; i++ {
		if err = w.GetLog(i, &l); err != nil {
			return fmt.Errorf("entry %d of %d to %d: %w", i, first, last, err)
		}
	}
	return nil
}

// walMetrics reports raft-wal's counters and gauges through go-metrics
// under raft.wal (metastore_raft_wal_*), like Raft's own. It looks up the
// global go-metrics instance at every call: the WAL opens before
// installRaftMetrics sets it up.
type walMetrics struct{}

func (walMetrics) IncrementCounter(name string, delta uint64) {
	metricscompat.IncrCounter([]string{"raft", "wal", name}, float32(delta))
}

func (walMetrics) SetGauge(name string, val uint64) {
	metricscompat.SetGauge([]string{"raft", "wal", name}, float32(val))
}

// dropLogBehindSnapshot deletes a log that ends before the newest
// snapshot (at snapIndex) from a monotonic store (one that refuses gaps, as
// raft-wal does). Raft deletes the whole log of such a store after it
// installs a snapshot from the leader or restores a backup; a crash
// between saving the snapshot and that deletion leaves a log ending before
// the snapshot, and the first append after it (at the snapshot's index +
// 1) would be refused as a gap, every time, stopping the member
// (stopOnWriteError). Every entry of such a log is covered by the
// snapshot. A store that takes gaps (raft-boltdb) is left as it is.
func dropLogBehindSnapshot(store raftStore, snapIndex uint64, log *slog.Logger) error {
	if m, ok := store.(raft.MonotonicLogStore); !ok || !m.IsMonotonic() || snapIndex == 0 {
		return nil
	}
	first, last, err := logBounds(store)
	if err != nil {
		return err
	}
	if last == 0 || last >= snapIndex {
		return nil
	}
	log.Warn("the Raft log ends before the newest snapshot (a crash cut short its replacement by the snapshot); deleting it, the snapshot covers it",
		"first_index", first, "last_index", last, "snapshot_index", snapIndex)
	if err := store.DeleteRange(first, last); err != nil {
		return fmt.Errorf("node: delete the Raft log behind snapshot %d: %w", snapIndex, err)
	}
	return nil
}
