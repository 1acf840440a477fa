package node

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// stallingStable is the Raft stable store (the current term and the vote,
// in raft.db or raft-wal's wal-meta.db) with one change: a write that fails because the file system
// is full is retried, with backoff, until it succeeds or the node shuts
// down. hashicorp/raft panics when it cannot record a new term
// (setCurrentTerm), which on a full disk would kill the process at every
// election and again at every restart. Waiting instead stalls Raft's main
// goroutine: the member neither votes nor stands for election nor answers
// its peers until space is freed, then goes on where it was. That is safe:
// a member that does not answer is, to the others, a member that is down.
type stallingStable struct {
	raft.StableStore
	spaceWait
}

// spaceWait is what a store needs to wait for disk space: where to log,
// what ends the wait (the node's shutdown), and the flag that is true
// meanwhile (disk.raft_stalled; the transport sends nothing while it is).
type spaceWait struct {
	log     *slog.Logger
	stop    <-chan struct{}
	stalled *atomic.Bool
}

func (s stallingStable) Set(key, val []byte) error {
	return s.retry(string(key), func() error { return s.StableStore.Set(key, val) })
}

func (s stallingStable) SetUint64(key []byte, val uint64) error {
	return s.retry(string(key), func() error { return s.StableStore.SetUint64(key, val) })
}

func (s stallingStable) retry(key string, write func() error) error {
	return s.wait(write,
		"cannot record Raft's term or vote: the file system is full; retrying until space is freed (this member takes no part in Raft meanwhile)",
		"Raft's term and vote record written again after the file system was full", "key", key)
}

// wait runs write until it succeeds or fails for another reason than a
// full file system, with backoff, or until stop is closed. While it waits,
// stalled is true and failing is logged every 10 s; recovered is logged
// once it succeeds again. attrs are added to both.
func (w spaceWait) wait(write func() error, failing, recovered string, attrs ...any) error {
	backoff := 50 * time.Millisecond
	var since, logged time.Time
	for {
		err := write()
		if err == nil || !isNoSpace(err) {
			if !since.IsZero() {
				w.stalled.Store(false)
				w.log.Info(recovered, append(attrs, "stalled_for", time.Since(since).Round(time.Millisecond), "err", err)...)
			}
			return err
		}
		now := time.Now()
		if since.IsZero() {
			since = now
			w.stalled.Store(true)
		}
		if now.Sub(logged) >= 10*time.Second {
			logged = now
			w.log.Error(failing, append(attrs, "stalled_for", now.Sub(since).Round(time.Millisecond), "err", err)...)
		}
		select {
		case <-time.After(backoff):
		case <-w.stop:
			return err // shutting down
		}
		backoff = min(2*backoff, time.Second)
	}
}
