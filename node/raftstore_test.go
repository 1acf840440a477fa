package node_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/node"
)

// startSingleOn starts a member alone with the given Raft log store.
func startSingleOn(t *testing.T, dir, store string) *testNode {
	t.Helper()
	var tn *testNode
	withFreePorts(t, 1, func(addrs []string) error {
		tn = newTestNode(t, testLogger(t), "n1", dir)
		tn.cfg.RaftAddr = addrs[0]
		tn.cfg.RaftLogStore = store
		return tn.start()
	})
	waitFor(t, 10*time.Second, "n1 to lead", tn.node.IsLeader)
	return tn
}

// TestDataDirectoryKeepsItsRaftLogStore: a new directory gets the
// configured store; a directory that holds one keeps it whatever the
// setting says, so a member upgraded with a raft.db goes on using it.
func TestDataDirectoryKeepsItsRaftLogStore(t *testing.T) {
	for _, tc := range []struct{ created, then, want string }{
		{config.RaftLogStoreWAL, config.RaftLogStoreBoltDB, config.RaftLogStoreWAL},
		{config.RaftLogStoreBoltDB, config.RaftLogStoreWAL, config.RaftLogStoreBoltDB},
	} {
		t.Run(tc.created, func(t *testing.T) {
			dir := t.TempDir()
			tn := startSingleOn(t, dir, tc.created)
			upsert(t, tn.node, "a")
			tn.stop()
			if got, err := node.RaftLogStoreIn(dir); err != nil || got != tc.created {
				t.Fatalf("created with %s: the directory holds %q (%v)", tc.created, got, err)
			}
			tn2 := tn.restarted()
			tn2.cfg.RaftLogStore = tc.then
			if err := tn2.start(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "leader after restart", tn2.node.IsLeader)
			if !hasMember(t, tn2.fsm, "a") {
				t.Fatal("the member record written before the restart is gone")
			}
			upsert(t, tn2.node, "b")
			tn2.stop()
			if got, err := node.RaftLogStoreIn(dir); err != nil || got != tc.want {
				t.Fatalf("restarted with %s: the directory holds %q (%v), want %s", tc.then, got, err, tc.want)
			}
		})
	}
}

func TestTwoRaftLogsRefused(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{filepath.Join(dir, "raft", "wal"), filepath.Join(dir, "raft", "raft.db")} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := node.RaftLogStoreIn(dir); err == nil || !strings.Contains(err.Error(), "two Raft logs") {
		t.Fatalf("raft.db and wal/ both present: %v, want an error naming both", err)
	}
}

// TestLogThatLostEntriesIsRefused: a Raft log that ends before the
// entries the state machine file has applied lost acknowledged entries (a
// segment zeroed or cut short, entries deleted); the member refuses to
// start with an error naming the log, instead of voting and leading as if
// it never had them.
func TestLogThatLostEntriesIsRefused(t *testing.T) {
	for _, tc := range []struct {
		store string
		lose  func(t *testing.T, raftDir string)
	}{
		{config.RaftLogStoreWAL, func(t *testing.T, raftDir string) {
			// Zero the second half of the segment's data: raft-wal takes
			// the zeros for the end of the log.
			segs, _ := filepath.Glob(filepath.Join(raftDir, "wal", "*.wal"))
			if len(segs) != 1 {
				t.Fatalf("want one segment, found %v", segs)
			}
			raw, err := os.ReadFile(segs[0])
			if err != nil {
				t.Fatal(err)
			}
			end := len(bytes.TrimRight(raw, "\x00"))
			clear(raw[end/2 : end])
			if err := os.WriteFile(segs[0], raw, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{config.RaftLogStoreBoltDB, func(t *testing.T, raftDir string) {
			s, err := raftboltdb.NewBoltStore(filepath.Join(raftDir, "raft.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			last, err := s.LastIndex()
			if err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteRange(last-2, last); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.store, func(t *testing.T) {
			dir := t.TempDir()
			tn := startSingleOn(t, dir, tc.store)
			for _, id := range []string{"a", "b", "c", "d"} {
				upsert(t, tn.node, id)
			}
			applied := tn.fsm.AppliedIndex()
			tn.stop()
			tc.lose(t, tn.cfg.RaftDir())

			err := tn.restarted().start()
			var ce *node.CorruptError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), "lost entries") || !strings.HasPrefix(ce.Path, tn.cfg.RaftDir()) {
				t.Fatalf("restart on a log that lost entries up to %d: %v, want a CorruptError naming the log", applied, err)
			}
			t.Logf("refused: %v", err)
		})
	}
}
