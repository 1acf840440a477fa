package fsm_test

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/smallfs"
	"github.com/metastore/metastore/wire"
)

// TestAuditBatchAfterFailedCommitWaits: once a commit failed (here a
// reader's, on a full file system), the next batch commits before it
// counts as applied, and waits while the file system stays full, even
// though the commit interval has not passed: the member stalls rather
// than apply on top of what it cannot write. Once space is freed it
// applies, and the state is a replay's.
func TestAuditBatchAfterFailedCommitWaits(t *testing.T) {
	mnt := smallfs.Mount(t, 24<<20)
	h := &harness{t: t, path: filepath.Join(mnt, "fsm.db"), now: t0}
	h.f = openFSM(t, h.path)
	defer func() { h.f.Close() }()
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 1 << 30})

	const tasks = 4000
	specs := beginBigJob(t, h, tasks)
	if err := h.f.Flush(); err != nil {
		t.Fatal(err)
	}
	ack := func(i int) []byte {
		payload := make([]byte, wire.MaxInlinePayload)
		rand.Read(payload)
		return h.encode(fsm.CmdTaskAck, fsm.TaskAck{Job: "big", Generation: 1, Epoch: 1, Task: specs[i].ID,
			Payloads: map[fsm.Kind][]byte{wire.KindState: payload}})
	}

	filler := fillFS(t, mnt, 2<<20)
	next := -1
	for i := range tasks {
		if r, ok := h.f.Apply(h.nextLog(ack(i))).(*fsm.Result); !ok || r.Err != nil {
			t.Fatalf("ack %d: %+v", i, r)
		}
		if err := h.f.Flush(); err != nil {
			if !errors.Is(err, fsm.ErrStateNotWritable) {
				t.Fatalf("flush: %v", err)
			}
			next = i + 1
			break
		}
	}
	if next < 0 {
		t.Fatal("the file system never filled")
	}
	// Reads are served from the open transaction meanwhile, with every
	// applied entry: a list reads the epoch's record as the last ack
	// deferred it, not as the file's last commit holds it.
	es, _, err := h.f.Epochs("big", "")
	if err != nil || len(es) != 1 || es[0].Acked != next {
		t.Fatalf("epochs while commits fail: %+v %v, want epoch 1 with %d acks", es, err, next)
	}
	if js, _, err := h.f.Jobs(); err != nil || len(js) != 1 || js[0].ModifyIndex != h.job("big").ModifyIndex {
		t.Fatalf("jobs while commits fail: %+v %v", js, err)
	}

	done := make(chan any, 1)
	go func() { done <- h.f.Apply(h.nextLog(ack(next))) }()
	var early any
	returned := false
	waitUntil(t, 30*time.Second, func() bool {
		select {
		case early = <-done:
			returned = true
		default:
		}
		return returned || h.f.Stalled()
	})
	if returned {
		// The retried commit may find room (the failed one was rolled
		// back); the batch then counts as applied only once committed.
		if r, ok := early.(*fsm.Result); !ok || r.Err != nil || h.f.CommittedIndex() != h.index {
			t.Fatalf("the batch after a failed commit answered %T %v with the file committed at %d, want it committed at %d or waiting",
				early, early, h.f.CommittedIndex(), h.index)
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
	} else {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		if r, ok := (<-done).(*fsm.Result); !ok || r.Err != nil {
			t.Fatalf("apply once space was freed: %+v", r)
		}
	}
	if got, want := h.f.CommittedIndex(), h.index; got != want {
		t.Fatalf("committed index %d, want %d", got, want)
	}
	ref := &harness{t: t, path: filepath.Join(t.TempDir(), "ref.db"), now: t0}
	ref.f = openFSM(t, ref.path)
	defer ref.f.Close()
	ref.f.ApplyBatch(h.logs)
	if got, want := h.hash(), ref.hash(); got != want {
		t.Fatalf("state hash %s, want a replay's %s", got, want)
	}
}
