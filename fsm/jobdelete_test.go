package fsm_test

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// refsOf returns the reference count of each key (-1: no record).
func (h *harness) refsOf(keys []string) map[string]int {
	h.t.Helper()
	out := map[string]int{}
	for _, k := range keys {
		b, _, err := h.f.Blob(k)
		if err != nil {
			out[k] = -1
			continue
		}
		out[k] = int(b.Refs)
	}
	return out
}

// TestJobDelete: a delete is refused while the job has a savepoint unless
// forced, naming it, and changes nothing then; a forced delete releases
// every reference (a fork in another job keeps the shared blobs by its
// own), expires the job's upload intents, fences its zombie writers with
// job_deleted, answers a repeat with the same tombstone, and the name can
// be used again with generations above the deleted ones.
func TestJobDelete(t *testing.T) {
	h := newHarness(t)
	h.putJob("src", wire.JobConfig{Retained: 1})
	tk := task(t, "w", "state", "incremental")
	h.start("src", "s1", tk)
	w := &worker{job: "src", task: "w", gen: 1, acked: map[uint64]manifests.Manifest{}}
	for e := uint64(1); e <= 3; e++ {
		h.begin("src", 1, e)
		w.step(h, e, e == 3)
		if e == 2 {
			h.pin("src", 2, "sp")
		}
	}
	h.begin("src", 1, 4)
	w.step(h, 4, false) // pending
	h.intents("src", 1, "src/w/open")

	// Another job forks from the savepoint.
	h.putJob("fork", wire.JobConfig{Retained: 1})
	h.start("fork", "f1", tk)
	fw := &worker{job: "fork", task: "w", gen: 1, acked: map[uint64]manifests.Manifest{}, m: w.acked[2], seq: 100,
		base: &fsm.BaseRef{Job: "src", Task: "w", Epoch: 2}}
	h.begin("fork", 1, 1)
	fw.step(h, 1, false)
	h.fsck()

	var all []string
	for _, m := range w.acked {
		all = append(all, m.Blobs()...)
	}
	shared := map[string]bool{}
	for _, k := range w.acked[2].Blobs() {
		shared[k] = true
	}

	re := h.reject(wire.ErrJobPinned, fsm.CmdJobDelete, fsm.JobDelete{Job: "src"})
	if re.Field != "force" || !strings.Contains(re.Message, `epoch 2 ("sp")`) {
		t.Fatalf("refusal %+v does not name the savepoint", re)
	}
	h.reject(wire.ErrNotFound, fsm.CmdJobDelete, fsm.JobDelete{Job: "never"})

	h.advance(time.Minute)
	ts := mustOK(t, h.mustApply(fsm.CmdJobDelete, fsm.JobDelete{Job: "src", Force: true})).(*wire.JobDeletion)
	want := &wire.JobDeletion{Job: "src", Generation: 1, LastEpoch: 4, Forced: true, PinsReleased: []wire.PinRef{{Epoch: 2, Name: "sp"}},
		LineagesReleased: 1, IntentsExpired: 1, DeletedAt: h.now, Index: h.index}
	if !reflect.DeepEqual(ts, want) {
		t.Fatalf("tombstone %+v, want %+v", ts, want)
	}
	h.fsck()
	for k, n := range h.refsOf(all) {
		if shared[k] && n == 0 {
			t.Errorf("shared blob %s lost its references; the fork holds it", k)
		}
		if !shared[k] && n != 0 {
			t.Errorf("blob %s of the deleted job: %d refs, want 0", k, n)
		}
	}
	if b, _, err := h.f.Blob("src/w/open"); err != nil || b.State != wire.BlobExpired || b.UnreferencedAt == nil || !b.UnreferencedAt.Equal(h.now) {
		t.Fatalf("open upload after the delete: %+v %v", b, err)
	}
	if j, _, err := h.f.Job("src"); !isRule(err, wire.ErrNotFound) {
		t.Fatalf("deleted job read: %+v %v, want not_found", j, err)
	}
	d := h.dump()
	for _, b := range []string{"epochs", "acks", "payloads", "attempts", "tasks", "heads"} {
		if n := keysWithPrefix(d, b, "src\x00"); n != 0 {
			t.Errorf("%d %s records of the deleted job remain", n, b)
		}
	}

	// The same delete again, forced or not: the same answer, no change.
	for _, force := range []bool{true, false} {
		before := h.hash()
		again := mustOK(t, h.mustApply(fsm.CmdJobDelete, fsm.JobDelete{Job: "src", Force: force})).(*wire.JobDeletion)
		if !reflect.DeepEqual(again, want) || h.hash() != before {
			t.Fatalf("repeated delete (force %v): %+v", force, again)
		}
	}

	// Zombie writers of the deleted job: job_deleted, nothing changes.
	h.reject(wire.ErrJobDeleted, fsm.CmdEpochBegin, fsm.EpochBegin{Job: "src", Generation: 1, Epoch: 5})
	h.reject(wire.ErrJobDeleted, fsm.CmdTaskAck, fsm.TaskAck{Job: "src", Generation: 1, Epoch: 4, Task: "w", Payloads: map[fsm.Kind][]byte{wire.KindState: []byte("x")}})
	h.reject(wire.ErrJobDeleted, fsm.CmdEpochAbort, fsm.EpochAbort{Job: "src", Generation: 1, Epoch: 4})
	h.reject(wire.ErrJobDeleted, fsm.CmdIntentCreate, fsm.IntentCreate{Job: "src", Generation: 1, Keys: []string{"src/w/late"}, LeaseUntil: h.now.Add(time.Hour)})
	h.reject(wire.ErrJobDeleted, fsm.CmdAttemptStart, fsm.AttemptStart{Job: "src", AttemptID: "s2", Tasks: []wire.Task{tk}})
	h.reject(wire.ErrJobDeleted, fsm.CmdEpochPin, fsm.EpochPin{Job: "src", Epoch: 2})

	// The fork is untouched and goes on.
	h.begin("fork", 1, 2)
	fw.step(h, 2, true)
	h.fsck()
	for k, n := range h.refsOf(w.acked[2].Blobs()) {
		if n != 0 {
			t.Errorf("blob %s of the savepoint: %d refs after the fork materialized, want 0", k, n)
		}
	}

	// The name again: a new job, generations above the deleted one's.
	j := h.putJob("src", wire.JobConfig{Retained: 2})
	if j.Generation != 1 || j.GenerationBase != 1 || j.LastEpoch != 0 || len(j.Retained) != 0 {
		t.Fatalf("job created again: %+v", j)
	}
	if n := len(h.dump()["job_tombstones"]); n != 0 {
		t.Fatalf("%d tombstones after the name was used again", n)
	}
	h.reject(wire.ErrFenced, fsm.CmdEpochBegin, fsm.EpochBegin{Job: "src", Generation: 1, Epoch: 1})
	h.reject(wire.ErrFenced, fsm.CmdAttemptStart, fsm.AttemptStart{Job: "src", AttemptID: "s1", Tasks: []wire.Task{tk}})
	if _, _, err := h.f.Attempt("src", 0); !isRule(err, wire.ErrNoAttempt) {
		t.Fatalf("current attempt of the new job: %v, want no_attempt", err)
	}
	a := h.start("src", "n1", tk)
	if a.Generation != 2 {
		t.Fatalf("first attempt of the new job: generation %d, want 2", a.Generation)
	}
	h.reject(wire.ErrFenced, fsm.CmdEpochBegin, fsm.EpochBegin{Job: "src", Generation: 1, Epoch: 1})
	nw := &worker{job: "src", task: "w", gen: 2, acked: map[uint64]manifests.Manifest{}}
	h.begin("src", 2, 1)
	nw.step(h, 1, false)
	h.fsck()
	// And it can be deleted in turn (no pins: no force needed).
	ts2 := mustOK(t, h.mustApply(fsm.CmdJobDelete, fsm.JobDelete{Job: "src"})).(*wire.JobDeletion)
	if ts2.Generation != 2 || ts2.Forced || len(ts2.PinsReleased) != 0 {
		t.Fatalf("second tombstone %+v", ts2)
	}
	h.fsck()
	for k, n := range h.refsOf(nw.acked[1].Blobs()) {
		if n != 0 {
			t.Errorf("blob %s: %d refs after the second delete", k, n)
		}
	}

	// Another member applying the same log has the same state.
	other := openFSM(t, filepath.Join(t.TempDir(), "fsm.db"))
	defer other.Close()
	for _, l := range h.logs {
		other.Apply(l)
	}
	if _, sum, err := other.StateHash(); err != nil || sum != h.hash() {
		t.Fatalf("replayed state %s (%v), want %s", sum, err, h.hash())
	}
}

// TestRemovedTaskReleased: a task a new attempt no longer has (removed, or
// left without the state capability) keeps its manifest's blobs only while
// a live checkpoint holds them; when the last one is subsumed they lose
// their references. An attempt-start of version 2 keeps them, as it did.
// (removed-v2: an earlier release's attempt start kept the removed task's
// head; the next start of this release releases it.)
func TestRemovedTaskReleased(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version byte
		second  []wire.Task // tasks of the second attempt besides "a"
	}{
		{"removed", 3, nil},
		{"stateless", 3, []wire.Task{task(t, "b", "input")}},
		{"removed-v2", 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.putJob("j", wire.JobConfig{Retained: 1})
			a, b := task(t, "a", "state", "incremental"), task(t, "b", "state", "incremental")
			h.start("j", "a1", a, b)
			wa := &worker{job: "j", task: "a", gen: 1, acked: map[uint64]manifests.Manifest{}}
			wb := &worker{job: "j", task: "b", gen: 1, acked: map[uint64]manifests.Manifest{}}
			for e := uint64(1); e <= 3; e++ {
				h.begin("j", 1, e)
				wa.step(h, e, false)
				wb.step(h, e, false)
			}
			data := h.encode(fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: "a2", Tasks: append([]wire.Task{a}, tc.second...)})
			data[1] = tc.version
			if res := h.f.Apply(h.nextLog(data)).(*fsm.Result); res.Err != nil {
				t.Fatal(res.Err)
			}
			h.fsck()
			// Epoch 3 is retained: b's manifest in it is live.
			for k, n := range h.refsOf(wb.acked[3].Blobs()) {
				if n <= 0 {
					t.Fatalf("blob %s of the retained checkpoint: %d refs", k, n)
				}
			}
			wa.gen, wa.base = 2, &fsm.BaseRef{Job: "j", Task: "a", Epoch: 3}
			h.begin("j", 2, 4)
			if len(tc.second) > 0 {
				h.ack("j", 2, 4, "b", map[fsm.Kind][]byte{wire.KindInput: []byte("offset")})
			}
			wa.step(h, 4, false) // completes 4: 3 is subsumed
			h.fsck()
			if p := h.restore(fsm.RestoreRequest{Job: "j", Task: "b"}); len(tc.second) == 0 && p.Status != wire.RestoreNoPriorState {
				t.Fatalf("restore of the removed task: %+v", p)
			}
			for k, n := range h.refsOf(wb.acked[3].Blobs()) {
				// The old rule: the head keeps its manifest.
				if kept := n > 0; kept != (tc.version < 3) {
					t.Errorf("blob %s of the removed task: %d refs (attempt-start version %d)", k, n, tc.version)
				}
			}
			if n := len(h.dump()["heads"]); tc.version >= 3 && n != 1 {
				t.Errorf("%d heads, want only a's", n)
			}
			if tc.version < 3 {
				// What an earlier release kept is released by the job's
				// next attempt start of this release: it releases every
				// head of the job.
				h.start("j", "a3", a)
				h.fsck()
				for k, n := range h.refsOf(wb.acked[3].Blobs()) {
					if n > 0 {
						t.Errorf("blob %s of the task an earlier release kept: %d refs after an attempt start of this release", k, n)
					}
				}
				if n := len(h.dump()["heads"]); n != 1 {
					t.Errorf("%d heads after an attempt start of this release, want only a's", n)
				}
			}
		})
	}
}

// TestAbandonedAttemptReleased: what the acks of an attempt added in
// epochs that never completed dies when the next attempt starts, although
// no ack of that attempt comes (the task is gone, or the attempt is
// abandoned in turn); a lineage only aborted epochs held is deleted.
func TestAbandonedAttemptReleased(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{Retained: 1})
	a, b := task(t, "a", "state", "incremental"), task(t, "b", "state", "incremental")
	h.start("j", "a1", a, b)
	wa := &worker{job: "j", task: "a", gen: 1, acked: map[uint64]manifests.Manifest{}}
	wb := &worker{job: "j", task: "b", gen: 1, acked: map[uint64]manifests.Manifest{}}
	h.begin("j", 1, 1)
	wa.step(h, 1, false)
	wb.step(h, 1, false)
	h.begin("j", 1, 2)
	wa.step(h, 2, false) // b never acks 2
	h.start("j", "a2", a, b)
	h.fsck()
	for k, n := range h.refsOf([]string{"j/a/log-1-2"}) {
		if n != 0 {
			t.Fatalf("blob %s of the aborted epoch: %d refs after the next attempt started", k, n)
		}
	}
	// Attempt 2: b forks nothing and starts afresh in epoch 3, which is
	// then abandoned: the fresh lineage is deleted by attempt 3's start.
	wb.gen, wb.m, wb.seq = 2, manifests.Manifest{}, 0
	h.begin("j", 2, 3)
	wb.step(h, 3, false)
	h.start("j", "a3", a)
	h.fsck()
	for k, n := range h.refsOf(append(wa.acked[1].Blobs(), wb.acked[1].Blobs()...)) {
		if n <= 0 {
			t.Errorf("blob %s of retained epoch 1: %d refs", k, n)
		}
	}
	if n := h.refsOf([]string{"j/b/log-2-3"})["j/b/log-2-3"]; n != 0 {
		t.Errorf("blob of the abandoned attempt's fresh manifest: %d refs", n)
	}
}
