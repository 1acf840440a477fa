package node_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// Concurrent commands, grouped into batch entries while Raft is busy, each
// get their own result: their own value or their own rule violation.
func TestConcurrentAppliesGetTheirOwnResults(t *testing.T) {
	tn := startSingle(t, testLogger(t), "n1", t.TempDir())
	n := tn.node
	waitFor(t, 5*time.Second, "ready", func() bool { return n.Ready() == nil })

	const workers, each = 32, 8
	var wg sync.WaitGroup
	indexes := make(chan uint64, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("m%d-%d", w, i)
				if i%4 == 3 {
					id = fmt.Sprintf("bad id %d-%d!", w, i) // a rule violation
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				v, index, err := n.Propose(ctx, fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: id, RaftAddr: "x.example:1", HTTPAddr: "x.example:2"})
				cancel()
				if i%4 == 3 {
					if !errors.Is(err, wire.ErrInvalid) || index == 0 {
						t.Errorf("%s: %v at index %d, want its own rule violation", id, err, index)
						return
					}
					indexes <- index
					continue
				}
				if err != nil {
					t.Errorf("propose %s: %v", id, err)
					return
				}
				indexes <- index
				if m, ok := v.(*fsm.Member); !ok || m.ID != id {
					t.Errorf("%s: answered %#v, want its own member", id, v)
				}
			}
		})
	}
	wg.Wait()
	close(indexes)
	entries := map[uint64]bool{}
	for i := range indexes {
		entries[i] = true
	}
	for w := range workers {
		for i := range each {
			if i%4 != 3 && !hasMember(t, tn.fsm, fmt.Sprintf("m%d-%d", w, i)) {
				t.Fatalf("member m%d-%d was answered but not applied", w, i)
			}
		}
	}
	t.Logf("%d commands in %d Raft entries", workers*each, len(entries))
}

// A caller that gives up before its command was handed to Raft is told so
// (the context's error, nothing proposed), not that the outcome is unknown.
func TestApplyCancelledBeforeProposing(t *testing.T) {
	tn := startSingle(t, testLogger(t), "n1", t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := tn.node.Propose(ctx, fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "late", RaftAddr: "x.example:1", HTTPAddr: "x.example:2"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Propose with a done context: %v, want context.Canceled", err)
	}
	if hasMember(t, tn.fsm, "late") {
		t.Fatal("a command whose caller gave up first was applied")
	}
}

// The state machine file is written without fsync: after a machine crash
// (its marker says it was open under an earlier boot) it is set aside and
// rebuilt from the latest snapshot and the log; no applied write is lost.
func TestStateRebuiltAfterMachineCrash(t *testing.T) {
	if _, err := os.Stat("/proc/sys/kernel/random/boot_id"); err != nil {
		t.Skip("the boot id is unknown here (not Linux): the state machine syncs every commit")
	}
	dir := t.TempDir()
	tn := startSingle(t, testLogger(t), "n1", dir)
	upsert(t, tn.node, "a")
	if err := tn.node.Snapshot(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	upsert(t, tn.node, "b") // only in the log after the snapshot
	want := tn.fsm.AppliedIndex()
	tn.stop()

	marker := tn.cfg.FSMPath() + ".state"
	if err := os.WriteFile(marker, []byte(`{"boot_id":"an-earlier-boot","state":"open"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tn2 := tn.restarted()
	if err := tn2.start(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if _, err := os.Stat(tn.cfg.FSMPath() + ".discarded"); err != nil {
		t.Fatalf("the untrusted state machine file was not set aside: %v", err)
	}
	waitFor(t, 10*time.Second, "state rebuilt from the snapshot and the log", func() bool {
		return hasMember(t, tn2.fsm, "a") && hasMember(t, tn2.fsm, "b") && tn2.fsm.AppliedIndex() >= want
	})
}
