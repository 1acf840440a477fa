package node

import (
	"fmt"
	"time"

	metricscompat "github.com/hashicorp/go-metrics/compat"

	"github.com/hashicorp/raft"
)

// stopOnWriteError is the Raft log store (raft-boltdb's raft.db) with one
// change: a write that fails for any reason but a full file system stops
// the member with a panic instead of returning the error.
//
// hashicorp/raft answers a failed append by stepping down and a failed
// compaction by logging it, and goes on with the same bbolt handle. After
// a commit whose write or fsync failed, that handle cannot be trusted:
// bbolt rebuilds its free-page list from what the file shows, and after a
// failed fsync the kernel may show pages that are not on the disk
// (fsyncgate). The consistency suite's disk-eio-leader fault saw a member
// go on after EIO and panic later in bbolt itself ("page N already freed",
// during a compaction). Stopping at the first failed write is what etcd
// does with its WAL; the restart opens the file afresh, and Raft treats
// the member as down meanwhile.
//
// ENOSPC and EDQUOT are returned as errors: a full file system refuses the
// write before anything reaches the file, Raft steps down, and the member
// goes on once space is freed (the state machine and the stable store wait
// for space the same way: fsm.ApplyBatch, stallingStable).
//
// During shutdown (stopping closed) errors are returned: a write that
// waited for space (stallingFiler) is ended by the shutdown itself.
type stopOnWriteError struct {
	raft.LogStore
	stopping <-chan struct{}
}

// StoreLog and StoreLogs time every append, fsync included, whatever the
// store (metastore_raft_log_append_seconds).
func (s stopOnWriteError) StoreLog(l *raft.Log) error {
	defer metricscompat.MeasureSince(logAppendMetric, time.Now())
	return s.check("append", s.LogStore.StoreLog(l))
}

func (s stopOnWriteError) StoreLogs(logs []*raft.Log) error {
	defer metricscompat.MeasureSince(logAppendMetric, time.Now())
	return s.check("append", s.LogStore.StoreLogs(logs))
}

// logAppendMetric is the go-metrics key of an append's duration.
var logAppendMetric = []string{"raft", "log", "append"}

func (s stopOnWriteError) DeleteRange(lo, hi uint64) error {
	return s.check(fmt.Sprintf("delete of entries %d to %d", lo, hi), s.LogStore.DeleteRange(lo, hi))
}

func (s stopOnWriteError) check(op string, err error) error {
	if err == nil || isNoSpace(err) {
		return err
	}
	select {
	case <-s.stopping:
		return err
	default:
	}
	panic(fmt.Sprintf("node: Raft log %s failed; stopping rather than going on with a log file in an unknown state: %v", op, err))
}

// IsMonotonic forwards the store's answer: a store that refuses gaps
// (raft-wal) must be told apart, so Raft removes its old entries after a
// snapshot install or restore instead of appending past a gap.
func (s stopOnWriteError) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}
