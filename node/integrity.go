package node

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/boltcheck"
)

// Integrity checks at start.
//
// Before Raft opens anything, the member checks the files of its data
// directory and refuses to start, with one error naming the file and the
// problem, if one is damaged:
//
//   - raft/raft.db (the Raft log and the term and vote): whole (not shorter
//     than its meta page says), every page reachable from its root
//     readable, every log key an 8-byte index with a non-empty entry;
//   - every snapshot in snapshots/snapshots: its meta.json readable and
//     its state.bin matching the CRC-64 recorded in it (the whole file is
//     read);
//   - fsm.db, the state machine (fsm.Open): whole and readable.
//
// Without these checks a truncated bbolt file faults (SIGBUS) or panics
// inside bbolt, a snapshot whose meta.json is unreadable is silently
// skipped by Raft's snapshot store (so an older one would be used), and a
// corrupt state.bin is found only when a follower needs it.
//
// A member whose files are damaged is rebuilt from the others; see
// Rebuild and docs/operations.md.

// raftLogsBucket is raft-boltdb's bucket of log entries, keyed by index
// (8 bytes, big-endian).
var raftLogsBucket = []byte("logs")

// checkRaftDB checks the raft-boltdb file at path.
func checkRaftDB(path string) error {
	return boltcheck.Check(path, func(name []byte, b *bolt.Bucket) error {
		if string(name) != string(raftLogsBucket) {
			return nil
		}
		// The indexes need not be contiguous: a restore from a backup
		// (raft.Restore) leaves a gap at the index of its snapshot.
		return b.ForEach(func(k, v []byte) error {
			if len(k) != 8 {
				return fmt.Errorf("log key %x is not an 8-byte index", k)
			}
			if len(v) == 0 {
				return fmt.Errorf("log entry %d is empty", binary.BigEndian.Uint64(k))
			}
			return nil
		})
	})
}

// CorruptError is a damaged file of the data directory found at start.
type CorruptError struct {
	Path    string
	Problem string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("node: %s is corrupt: %s; %s", e.Path, e.Problem, fsm.RebuildHint)
}

// Unwrap lets errors.Is(err, boltcheck.ErrCorrupt) match.
func (e *CorruptError) Unwrap() error { return boltcheck.ErrCorrupt }

func corruptFrom(err error) error {
	var be *boltcheck.Error
	if errors.As(err, &be) {
		return &CorruptError{Path: be.Path, Problem: be.Problem}
	}
	return err
}

// checkLogCoversState refuses a Raft log that ends before the entries
// the state machine file has applied (and no snapshot covers them): the
// log lost acknowledged entries (a truncated or damaged segment or file),
// and a member that went on would vote and lead as if it never had them.
// Every entry the state machine applied was in this member's log first,
// or in the snapshot it was restored from.
func checkLogCoversState(path string, logs raft.LogStore, snapIndex, applied uint64) error {
	last, err := logs.LastIndex()
	if err != nil {
		return &CorruptError{Path: path, Problem: fmt.Sprintf("its last index cannot be read: %v", err)}
	}
	if applied > max(last, snapIndex) {
		return &CorruptError{Path: path, Problem: fmt.Sprintf(
			"the log ends at index %d and the newest snapshot at %d, but the state machine has applied entries up to %d: the log lost entries",
			last, snapIndex, applied)}
	}
	return nil
}

// checkSnapshots checks every snapshot of the store in dir (the store's
// own directory, SnapshotDir()/snapshots).
func checkSnapshots(dir string, store *raft.FileSnapshotStore) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("node: list snapshots: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		metaPath := filepath.Join(dir, e.Name(), "meta.json")
		raw, err := os.ReadFile(metaPath)
		if err != nil {
			return &CorruptError{Path: metaPath, Problem: fmt.Sprintf("unreadable: %v", err)}
		}
		var meta raft.SnapshotMeta
		if err := json.Unmarshal(raw, &meta); err != nil || meta.ID != e.Name() {
			return &CorruptError{Path: metaPath, Problem: fmt.Sprintf("not the metadata of snapshot %s (%v)", e.Name(), err)}
		}
		statePath := filepath.Join(dir, e.Name(), "state.bin")
		info, err := os.Stat(statePath)
		if err != nil {
			return &CorruptError{Path: statePath, Problem: fmt.Sprintf("unreadable: %v", err)}
		}
		if info.Size() != meta.Size {
			return &CorruptError{Path: statePath, Problem: fmt.Sprintf("%d bytes, its meta.json says %d (truncated or extended)", info.Size(), meta.Size)}
		}
		// Open reads the whole file and compares its CRC-64 with meta.json's.
		_, rc, err := store.Open(e.Name())
		if err != nil {
			return &CorruptError{Path: statePath, Problem: fmt.Sprintf("does not match its checksum in meta.json: %v", err)}
		}
		rc.Close()
	}
	return nil
}

// checkedSnapshots is the snapshot store Raft is given. Opening a snapshot
// reads it whole and compares its CRC-64 with meta.json's; a mismatch found
// while the member runs (the leader sending the snapshot to a follower, a
// backup) is recorded with record, so /v1/status and the metrics show it,
// besides the error Raft logs.
type checkedSnapshots struct {
	*raft.FileSnapshotStore
	dir    string // the store's own directory
	record func(path, problem string)
}

func (s checkedSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.FileSnapshotStore.Open(id)
	if err != nil && strings.Contains(err.Error(), "CRC mismatch") {
		s.record(filepath.Join(s.dir, id, "state.bin"), "does not match its checksum in meta.json: "+err.Error())
	}
	return meta, rc, err
}

// integrity holds the problems found in the data directory while the
// member runs.
type integrity struct {
	mu    sync.Mutex
	last  string
	count uint64
}

func (i *integrity) record(log interface{ Error(string, ...any) }, path, problem string) {
	i.mu.Lock()
	i.last = fmt.Sprintf("%s is corrupt: %s", path, problem)
	i.count++
	i.mu.Unlock()
	log.Error("a data file is corrupt; rebuild this member from the others (docs/operations.md, \"Corrupted files and rebuilding a member\")",
		"file", path, "problem", problem)
}

func (i *integrity) status() (string, uint64) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.last, i.count
}
