package fsm_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/smallfs"
	"github.com/metastore/metastore/wire"
)

// fillFS fills dir's file system up to about keep free bytes with a file
// named filler, whose path it returns.
func fillFS(t *testing.T, dir string, keep int64) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	smallfs.Fill(t, path, keep)
	return path
}

// TestApplyWaitsForSpace: a state machine whose file system fills up does
// not panic and skips nothing. The batch that cannot be committed is
// retried until space is freed, then applied; the state equals that of a
// state machine that never ran out of space. At shutdown the wait ends and
// the unapplied batch is applied again from the log at restart.
func TestApplyWaitsForSpace(t *testing.T) {
	mnt := smallfs.Mount(t, 24<<20)
	h := &harness{t: t, path: filepath.Join(mnt, "fsm.db"), now: t0}
	h.f = openFSM(t, h.path)
	defer func() { h.f.Close() }()

	const tasks = 4000
	specs := beginBigJob(t, h, tasks)

	// Leave little room, then ack tasks until an apply blocks.
	filler := fillFS(t, mnt, 2<<20)
	type applied struct {
		resp any
		task int
	}
	done := make(chan applied, 1)
	stop := make(chan struct{})
	go func() {
		for i := range tasks {
			payload := make([]byte, wire.MaxInlinePayload)
			rand.Read(payload)
			data := h.encode(fsm.CmdTaskAck, fsm.TaskAck{Job: "big", Generation: 1, Epoch: 1, Task: specs[i].ID,
				Payloads: map[fsm.Kind][]byte{wire.KindState: payload}})
			resp := h.f.Apply(h.nextLog(data))
			if r, ok := resp.(*fsm.Result); !ok || r.Err != nil {
				done <- applied{resp, i}
				return
			}
			select {
			case <-stop:
				done <- applied{nil, i}
				return
			default:
			}
		}
		done <- applied{nil, tasks}
	}()
	waitUntil(t, 30*time.Second, func() bool { return h.f.Stalled() })
	close(stop)
	stalledIndex := h.index // the goroutine is blocked in Apply at this index
	if got := h.f.AppliedIndex(); got != stalledIndex-1 {
		t.Fatalf("stalled with applied index %d, want %d (the entry before the blocked one)", got, stalledIndex-1)
	}
	// Reads go on while the apply waits.
	if e := h.epoch("big", 1); e == nil {
		t.Fatal("no epoch read while stalled")
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.resp != nil {
		t.Fatalf("apply after space was freed answered %T %v", a.resp, a.resp)
	}
	if got := h.f.AppliedIndex(); got != stalledIndex {
		t.Fatalf("applied index %d after space was freed, want %d", got, stalledIndex)
	}
	if h.f.Stalled() {
		t.Fatal("still stalled after the batch applied")
	}

	// The state equals a replay of the same log on a roomy disk.
	ref := &harness{t: t, path: filepath.Join(t.TempDir(), "ref.db"), now: t0}
	ref.f = openFSM(t, ref.path)
	defer ref.f.Close()
	ref.f.ApplyBatch(h.logs)
	if got, want := h.hash(), ref.hash(); got != want {
		t.Fatalf("state hash after the stall %s, want %s", got, want)
	}

	// A stall ended by shutdown leaves the entry unapplied, and the file at
	// the entry before it; a restart replays it.
	filler = fillFS(t, mnt, 0)
	payload := make([]byte, wire.MaxInlinePayload)
	var last *raft.Log
	resp := make(chan any, 1)
	go func() {
		for i := a.task + 1; i < tasks; i++ {
			rand.Read(payload)
			last = h.nextLog(h.encode(fsm.CmdTaskAck, fsm.TaskAck{Job: "big", Generation: 1, Epoch: 1, Task: specs[i].ID,
				Payloads: map[fsm.Kind][]byte{wire.KindState: payload}}))
			if r := h.f.Apply(last); r != nil {
				if res, ok := r.(*fsm.Result); !ok || res.Err != nil {
					resp <- r
					return
				}
			}
		}
		resp <- nil
	}()
	waitUntil(t, 30*time.Second, func() bool { return h.f.Stalled() })
	h.f.StopWaiting()
	if r := <-resp; !errors.Is(asErr(r), fsm.ErrApplyAborted) {
		t.Fatalf("apply ended by StopWaiting answered %T %v, want ErrApplyAborted", r, r)
	}
	// The entries since the file's last commit (group commits, commit.go)
	// are discarded with the aborted one: the applied index falls back to
	// the file's, which a restart starts from.
	aborted := h.f.AppliedIndex()
	if aborted >= last.Index {
		t.Fatalf("applied index %d after the aborted apply of entry %d", aborted, last.Index)
	}
	if _, err := h.f.Snapshot(); !errors.Is(err, fsm.ErrApplyAborted) {
		t.Fatalf("snapshot after an aborted apply: %v, want ErrApplyAborted", err)
	}
	_ = h.f.Close() // may fail to sync or write its marker: the disk is full
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	h.f = openFSM(t, h.path)
	if got := h.f.AppliedIndex(); got != aborted {
		t.Fatalf("reopened at applied index %d, want %d", got, aborted)
	}
	// Raft replays what the file does not hold.
	h.f.ApplyBatch(h.logs[aborted:])
	ref.f.ApplyBatch(h.logs)
	if got, want := h.hash(), ref.hash(); got != want {
		t.Fatalf("state hash after restart and replay %s, want %s", got, want)
	}
}

func asErr(v any) error {
	err, _ := v.(error)
	return err
}

func waitUntil(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// beginBigJob creates job "big" of n state tasks (t0000...) and begins
// its epoch 1: n acks to come, each a record of its own. It returns the
// tasks.
func beginBigJob(t *testing.T, h *harness, n int) []wire.Task {
	t.Helper()
	var specs []wire.Task
	for i := range n {
		specs = append(specs, task(t, fmt.Sprintf("t%04d", i), "state"))
	}
	h.putJob("big", wire.JobConfig{Retained: 2})
	h.start("big", "a1", specs...)
	h.begin("big", 1, 1)
	return specs
}
