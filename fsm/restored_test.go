package fsm_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// restoredFrom reads an attempt's restore source: "unknown" when it is not
// recorded, else the epoch.
func restoredFrom(a *wire.Attempt) any {
	if a.RestoredFrom == nil {
		return "unknown"
	}
	return *a.RestoredFrom
}

// TestAttemptRecordsRestoreSource: each new generation records the epoch a
// restore of its job would read as it starts (the latest completed one, 0
// for a fresh start), the job counts the starts that resumed from one, a
// retried start counts once, and a replay of the log gives the same state.
func TestAttemptRecordsRestoreSource(t *testing.T) {
	h := newHarness(t)
	src, op := task(t, "src", "input"), task(t, "op", "state")
	h.putJob("j", wire.JobConfig{Retained: 2})
	if j := h.job("j"); j.RestoredAttempts != 0 || j.RestoresCountedFrom != 0 {
		t.Fatalf("new job: %+v", j)
	}

	a1 := h.start("j", "a1", src, op)
	if got := restoredFrom(a1); got != uint64(0) {
		t.Fatalf("first attempt restored from %v, want 0 (a fresh start)", got)
	}
	if j := h.job("j"); j.RestoredAttempts != 0 || j.RestoresCountedFrom != 1 {
		t.Fatalf("after a fresh start: restored %d, counted from %d", j.RestoredAttempts, j.RestoresCountedFrom)
	}
	h.complete("j", 1, 1, src, op)
	h.complete("j", 1, 2, src, op)
	h.begin("j", 1, 3) // pending: a restore does not read it

	a2 := h.start("j", "a2", src, op)
	if got := restoredFrom(a2); got != uint64(2) {
		t.Fatalf("second attempt restored from %v, want 2", got)
	}
	// A retried start answers the same attempt and counts once.
	again := mustOK(t, h.mustApply(fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: "a2", Tasks: []wire.Task{op, src}})).(*wire.Attempt)
	if restoredFrom(again) != uint64(2) || again.Generation != 2 {
		t.Fatalf("retried start: %+v", again)
	}
	if j := h.job("j"); j.RestoredAttempts != 1 || j.RestoresCountedFrom != 1 {
		t.Fatalf("after one restored start and its retry: restored %d, counted from %d", j.RestoredAttempts, j.RestoresCountedFrom)
	}
	h.complete("j", 2, 4, src, op)
	// A third attempt with another task set: restored from 4, the latest.
	sink := task(t, "sink", "output")
	a3 := h.start("j", "a3", src, op, sink)
	if got := restoredFrom(a3); got != uint64(4) {
		t.Fatalf("third attempt restored from %v, want 4", got)
	}
	if j := h.job("j"); j.RestoredAttempts != 2 {
		t.Fatalf("restored attempts %d, want 2", j.RestoredAttempts)
	}
	plan := h.restore(fsm.RestoreRequest{Job: "j", Task: "src"})
	if plan.Source.Epoch != *a3.RestoredFrom {
		t.Fatalf("a restore reads epoch %d, the attempt says %d", plan.Source.Epoch, *a3.RestoredFrom)
	}

	// The attempts kept: the current one and those retained epochs (2 and
	// 4) belong to, newest first, each with its task set.
	list, _, err := h.f.Attempts("j", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var gens []uint64
	for _, a := range list.Attempts {
		gens = append(gens, a.Generation)
		if a.TaskList != nil {
			t.Errorf("generation %d: task set listed without being asked", a.Generation)
		}
	}
	if !slices.Equal(gens, []uint64{3, 2, 1}) || list.Kept != 3 {
		t.Fatalf("kept attempts %v (kept %d), want [3 2 1]", gens, list.Kept)
	}
	// The newest two with their task sets, read with the list.
	if list, _, err = h.f.Attempts("j", 2, true); err != nil || list.Kept != 3 || len(list.Attempts) != 2 ||
		list.Attempts[0].Generation != 3 || len(list.Attempts[0].TaskList) != 3 || len(list.Attempts[1].TaskList) != 2 {
		t.Fatalf("the newest two attempts with tasks: %+v %v", list, err)
	}
	h.complete("j", 3, 5, src, op, sink) // retention drops epoch 2: generation 1 goes
	if list, _, _ = h.f.Attempts("j", 0, false); len(list.Attempts) != 2 || list.Attempts[0].Generation != 3 || list.Attempts[1].Generation != 2 {
		t.Fatalf("kept attempts after retention moved: %+v", list)
	}
	d, _, err := h.f.Attempt("j", 2)
	if err != nil || len(d.TaskList) != 2 || d.TaskList[0].ID != "op" || !d.TaskList[0].Caps.Has(wire.KindState) {
		t.Fatalf("task set of generation 2: %+v %v", d, err)
	}
	if _, _, err := h.f.Attempt("j", 1); err == nil {
		t.Fatalf("generation 1 is still kept")
	}

	// Another member that applies the same log has the same state.
	other := openFSM(t, filepath.Join(t.TempDir(), "fsm.db"))
	defer other.Close()
	for _, l := range h.logs {
		other.Apply(l)
	}
	if _, sum, err := other.StateHash(); err != nil || sum != h.hash() {
		t.Fatalf("replayed state %s (%v), want %s", sum, err, h.hash())
	}
}

// TestAttemptStartVersion1Replay: an attempt-start entry of version 1 (an
// older leader's) applies as it did: the attempt and job records hold no
// restore fields, byte for byte the records it wrote; a later start of
// version 2 starts counting at its generation.
func TestAttemptStartVersion1Replay(t *testing.T) {
	h := newHarness(t)
	src := task(t, "src", "input")
	h.putJob("j", wire.JobConfig{})
	startV1 := func(id string) *wire.Attempt {
		t.Helper()
		data := h.encode(fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: id, Tasks: []wire.Task{src}})
		data[1] = 1
		res, ok := h.f.Apply(h.nextLog(data)).(*fsm.Result)
		if !ok || res.Err != nil {
			t.Fatalf("version-1 attempt start: %+v", res)
		}
		return res.Value.(*wire.Attempt)
	}
	startV1("a1")
	h.complete("j", 1, 1, src)
	a2 := startV1("a2")
	if a2.RestoredFrom != nil {
		t.Fatalf("version-1 start recorded restored_from %d", *a2.RestoredFrom)
	}
	d := h.dump()
	for bucket, key := range map[string]string{"jobs": "j", "attempts": "j\x00\x00\x00\x00\x00\x00\x00\x00\x02"} {
		raw, ok := d[bucket][key]
		if !ok {
			t.Fatalf("no %s record %q", bucket, key)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal([]byte(raw), &fields); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"restored_from", "restored_attempts", "restores_counted_from"} {
			if _, has := fields[f]; has {
				t.Errorf("%s record written by a version-1 entry holds %s: %s", bucket, f, raw)
			}
		}
	}
	if j := h.job("j"); j.RestoredAttempts != 0 || j.RestoresCountedFrom != 0 {
		t.Fatalf("job after version-1 starts: %+v", j)
	}

	a3 := h.start("j", "a3", src) // this build's version
	if restoredFrom(a3) != uint64(1) {
		t.Fatalf("version-2 start restored from %v, want 1", restoredFrom(a3))
	}
	if j := h.job("j"); j.RestoredAttempts != 1 || j.RestoresCountedFrom != 3 {
		t.Fatalf("job after a version-2 start: restored %d, counted from %d", j.RestoredAttempts, j.RestoresCountedFrom)
	}
}
