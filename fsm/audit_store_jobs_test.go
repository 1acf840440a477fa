package fsm_test

import (
	"slices"
	"testing"

	"github.com/metastore/metastore/wire"
)

// TestAuditJobPutPrunesAttempts: lowering a job's retention subsumes the
// epochs beyond it and deletes the attempts (and task sets) that no
// retained epoch references any more, as retention moved by a completion
// does: the job keeps its current attempt and those of its retained
// epochs.
func TestAuditJobPutPrunesAttempts(t *testing.T) {
	h := newHarness(t)
	src := task(t, "src", "input")
	h.putJob("j", wire.JobConfig{Retained: 3})
	for gen, id := range []string{"a1", "a2", "a3"} {
		h.start("j", id, src)
		h.complete("j", uint64(gen+1), uint64(gen+1), src)
	}
	gens := func() []uint64 {
		t.Helper()
		list, _, err := h.f.Attempts("j", 0, false)
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, a := range list.Attempts {
			out = append(out, a.Generation)
		}
		return out
	}
	if got := gens(); !slices.Equal(got, []uint64{3, 2, 1}) {
		t.Fatalf("attempts before the config change: %v", got)
	}
	h.putJob("j", wire.JobConfig{Retained: 1})
	if j := h.job("j"); !slices.Equal(j.Retained, []uint64{3}) {
		t.Fatalf("retained after lowering retention: %v", j.Retained)
	}
	if got := gens(); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("attempts after lowering retention to 1: %v, want only the current one", got)
	}
	if _, _, err := h.f.Attempt("j", 1); !isRule(err, wire.ErrNotFound) {
		t.Fatalf("attempt 1 after it was pruned: %v", err)
	}
	h.fsck()
}

// TestAuditAttemptStartTrimsHistory: the epochs a new attempt aborts are
// ended epochs like any other: the job remembers up to its history of
// them, and forgets the older ones with their records.
func TestAuditAttemptStartTrimsHistory(t *testing.T) {
	h := newHarness(t)
	src := task(t, "src", "input")
	h.putJob("j", wire.JobConfig{History: 1})
	h.start("j", "a1", src)
	h.begin("j", 1, 1)
	h.begin("j", 1, 2)
	h.start("j", "a2", src) // aborts 1 and 2
	if j := h.job("j"); !slices.Equal(j.Ended, []uint64{2}) || len(j.Pending) != 0 {
		t.Fatalf("ended %v, pending %v after the new attempt; want ended [2] (history 1)", j.Ended, j.Pending)
	}
	es, _, err := h.f.Epochs("j", "")
	if err != nil || len(es) != 1 || es[0].Epoch != 2 || es[0].State != wire.EpochAborted {
		t.Fatalf("epochs remembered: %+v %v, want aborted epoch 2 only", es, err)
	}
	h.fsck()
}

// TestAuditAttemptStartPrunesAttempts: an attempt that no retained epoch
// references is deleted, with its task set, when the next attempt
// starts: the job keeps its current attempt and those of its retained
// epochs.
func TestAuditAttemptStartPrunesAttempts(t *testing.T) {
	h := newHarness(t)
	src := task(t, "src", "input")
	h.putJob("j", wire.JobConfig{Retained: 1})
	h.start("j", "a1", src)
	h.complete("j", 1, 1, src)
	h.start("j", "a2", src) // epoch 1 of generation 1 is retained
	h.begin("j", 2, 2)
	h.start("j", "a3", src) // generation 2 completed nothing
	list, _, err := h.f.Attempts("j", 0, true)
	if err != nil {
		t.Fatal(err)
	}
	var gens []uint64
	for _, a := range list.Attempts {
		gens = append(gens, a.Generation)
	}
	if !slices.Equal(gens, []uint64{3, 1}) {
		t.Fatalf("attempts kept %v, want 3 (current) and 1 (retained epoch 1)", gens)
	}
	if _, _, err := h.f.Attempt("j", 2); !isRule(err, wire.ErrNotFound) {
		t.Fatalf("attempt 2 after the next one started: %v", err)
	}
	h.fsck()
}
