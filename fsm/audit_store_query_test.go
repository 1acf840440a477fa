package fsm_test

import (
	"slices"
	"testing"

	"github.com/metastore/metastore/wire"
)

// TestAuditQueriesReadOnlyTheNamedJob: the reads of a job scan its keys
// by the job's prefix, which ends with a zero byte: a job whose id starts
// with another's ("a", "ab") shows none of the other's epochs, attempts,
// tasks or acks, and one epoch's detail lists that epoch's acks only.
func TestAuditQueriesReadOnlyTheNamedJob(t *testing.T) {
	h := newHarness(t)
	src, op, sink := task(t, "src", "input"), task(t, "op", "state"), task(t, "sink", "output")
	other := task(t, "other", "state")
	for _, job := range []string{"a", "ab"} {
		h.putJob(job, wire.JobConfig{Retained: 3})
	}
	h.start("a", "a-1", src, op, sink)
	h.start("ab", "ab-1", other)
	h.start("ab", "ab-2", other, task(t, "more", "output"))
	h.complete("a", 1, 1, src, op, sink)
	h.complete("ab", 2, 1, other, task(t, "more", "output"))
	h.complete("ab", 2, 2, other, task(t, "more", "output"))
	h.begin("a", 1, 2)
	h.ack("a", 1, 2, "op", payloadsFor(op, 2))
	h.start("a", "a-2", src, op) // aborts a/2
	h.complete("a", 2, 3, src, op)

	es, _, err := h.f.Epochs("a", "")
	if err != nil {
		t.Fatal(err)
	}
	var ns []uint64
	for _, e := range es {
		if e.Job != "a" {
			t.Errorf("Epochs(a) lists an epoch of job %q", e.Job)
		}
		ns = append(ns, e.Epoch)
	}
	if !slices.Equal(ns, []uint64{1, 2, 3}) {
		t.Errorf("Epochs(a) = %v, want 1, 2, 3", ns)
	}
	if es, _, _ := h.f.Epochs("a", wire.EpochAborted); len(es) != 1 || es[0].Epoch != 2 {
		t.Errorf("aborted epochs of a: %+v, want epoch 2", es)
	}

	list, _, err := h.f.Attempts("a", 0, true)
	if err != nil {
		t.Fatal(err)
	}
	var gens []uint64
	for _, a := range list.Attempts {
		if a.Job != "a" {
			t.Errorf("Attempts(a) lists an attempt of job %q", a.Job)
		}
		gens = append(gens, a.Generation)
	}
	if !slices.Equal(gens, []uint64{2, 1}) || list.Kept != 2 {
		t.Errorf("Attempts(a) generations %v (kept %d), want 2, 1", gens, list.Kept)
	}
	if got := list.Attempts[1].TaskList; !slices.Equal(got, []wire.Task{op, sink, src}) {
		t.Errorf("tasks of a's first attempt %+v", got)
	}

	a1, _, err := h.f.Attempt("a", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a1.TaskList, []wire.Task{op, sink, src}) {
		t.Errorf("Attempt(a, 1) tasks %+v, want op, sink, src", a1.TaskList)
	}
	cur, _, err := h.f.Attempt("a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Generation != 2 || !slices.Equal(cur.TaskList, []wire.Task{op, src}) {
		t.Errorf("Attempt(a, current) = generation %d tasks %+v, want 2 with op, src", cur.Generation, cur.TaskList)
	}

	for n, want := range map[uint64][]string{1: {"src", "op", "sink"}, 2: {"op"}, 3: {"src", "op"}} {
		e := h.epoch("a", n)
		var got []string
		for _, ack := range e.Acks {
			got = append(got, ack.Task)
		}
		if !slices.Equal(got, want) {
			t.Errorf("acks of a/%d: %v, want %v", n, got, want)
		}
	}
	if e := h.epoch("ab", 1); len(e.Acks) != 2 {
		t.Errorf("acks of ab/1: %+v", e.Acks)
	}
}

// TestAuditEpochStragglers: a pending epoch's detail names the expected
// tasks that have not acked it, and only those: acks of other epochs of
// the job do not count.
func TestAuditEpochStragglers(t *testing.T) {
	h := newHarness(t)
	src, op, sink, idle := task(t, "src", "input"), task(t, "op", "state"), task(t, "sink", "output"), task(t, "idle")
	h.putJob("j", wire.JobConfig{})
	h.start("j", "j-1", src, op, sink, idle)
	h.begin("j", 1, 1)
	h.ack("j", 1, 1, "src", payloadsFor(src, 1))
	h.ack("j", 1, 1, "op", payloadsFor(op, 1))
	h.begin("j", 1, 2)
	h.ack("j", 1, 2, "sink", payloadsFor(sink, 2))
	for n, want := range map[uint64][]string{1: {"sink"}, 2: {"op", "src"}} {
		if got := h.epoch("j", n).Stragglers; !slices.Equal(got, want) {
			t.Errorf("stragglers of epoch %d: %v, want %v", n, got, want)
		}
	}
	h.ack("j", 1, 1, "sink", payloadsFor(sink, 1))
	if e := h.epoch("j", 1); e.State != wire.EpochCompleted || len(e.Stragglers) != 0 {
		t.Errorf("completed epoch: %s, stragglers %v", e.State, e.Stragglers)
	}
}
