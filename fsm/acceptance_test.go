package fsm_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// hundredTasks is a job of 100 tasks of which 10 checkpoint something, in
// a mix of kinds; the other 90 are stateless.
func hundredTasks(t *testing.T) (all, expected []wire.Task) {
	capsOf := map[int][]string{
		3:  {"input"},
		11: {"state"},
		17: {"output"},
		25: {"input", "state"},
		38: {"state", "incremental"},
		42: {"input", "output"},
		57: {"state", "output", "incremental"},
		63: {"input", "state", "output"},
		78: {"input", "state", "output", "incremental"},
		99: {"output", "state"},
	}
	for i := range 100 {
		tk := task(t, fmt.Sprintf("task-%03d", i), capsOf[i]...)
		all = append(all, tk)
		if tk.Caps.Expected() {
			expected = append(expected, tk)
		}
	}
	if len(expected) != 10 {
		t.Fatalf("%d expected tasks, want 10", len(expected))
	}
	return all, expected
}

// TestEpochWaitsOnlyForTasksWithCapabilities: an epoch of a 100-task job
// with 10 capable tasks completes at exactly the 10th ack; restore answers
// "nothing to recover" for the 90 others and the exact payloads for the 10.
func TestEpochWaitsOnlyForTasksWithCapabilities(t *testing.T) {
	h := newHarness(t)
	all, expected := hundredTasks(t)
	h.putJob("wide", wire.JobConfig{Retained: 3})
	// Send the task list in a scrambled order: order must not matter.
	scrambled := slices.Clone(all)
	slices.Reverse(scrambled)
	a := h.start("wide", "attempt-1", scrambled...)
	if a.Generation != 1 || a.Tasks != 100 || a.Expected != 10 {
		t.Fatalf("attempt %+v, want generation 1, 100 tasks, 10 expected", a)
	}

	const epochs = 4
	acked := map[uint64]map[string]map[fsm.Kind][]byte{}
	for n := uint64(1); n <= epochs; n++ {
		h.advance(time.Second)
		e := h.begin("wide", 1, n)
		if e.State != wire.EpochPending || e.Expected != 10 {
			t.Fatalf("epoch %d began as %+v", n, e)
		}
		// A different task is last in every epoch.
		order := slices.Clone(expected)
		last := int(n*3) % len(order)
		order = append(append(order[:last:last], order[last+1:]...), order[last])
		acked[n] = map[string]map[fsm.Kind][]byte{}
		for i, tk := range order {
			h.advance(10 * time.Millisecond)
			p := payloadsFor(tk, n)
			acked[n][tk.ID] = p
			res := h.ack("wide", 1, n, tk.ID, p)
			if i < 9 {
				if res.Completed || res.Epoch.State != wire.EpochPending || res.Epoch.Acked != i+1 {
					t.Fatalf("epoch %d after %d acks: completed=%v %+v", n, i+1, res.Completed, res.Epoch)
				}
				continue
			}
			if !res.Completed || res.Epoch.State != wire.EpochCompleted || res.Epoch.Acked != 10 {
				t.Fatalf("epoch %d, 10th ack: completed=%v %+v", n, res.Completed, res.Epoch)
			}
		}
		d := h.epoch("wide", n)
		if d.State != wire.EpochCompleted || d.CompletedAt == nil || !d.CompletedAt.Equal(h.now) || len(d.Acks) != 10 || len(d.Stragglers) != 0 {
			t.Fatalf("epoch %d detail: %+v", n, d)
		}
		if j := h.job("wide"); j.LatestCompleted != n || len(j.Pending) != 0 {
			t.Fatalf("job after epoch %d: %+v", n, j)
		}
	}

	// The query view of an epoch after 9 of 10 acks.
	h.begin("wide", 1, epochs+1)
	for _, tk := range expected[:9] {
		h.ack("wide", 1, epochs+1, tk.ID, payloadsFor(tk, epochs+1))
	}
	d := h.epoch("wide", epochs+1)
	if d.State != wire.EpochPending || d.Acked != 9 || d.Expected != 10 {
		t.Fatalf("after 9 acks: %+v", d)
	}
	if want := []string{expected[9].ID}; !slices.Equal(d.Stragglers, want) {
		t.Fatalf("stragglers %v, want %v", d.Stragglers, want)
	}
	if j := h.job("wide"); j.LatestCompleted != epochs || !slices.Equal(j.Pending, []uint64{epochs + 1}) {
		t.Fatalf("job with a pending epoch: %+v", j)
	}

	// Restore (from the latest completed epoch, not the pending one).
	for _, tk := range all {
		p := h.restore(fsm.RestoreRequest{Job: "wide", Task: tk.ID})
		if p.Source.Epoch != epochs || p.Source.Generation != 1 {
			t.Fatalf("restore %s from %+v, want epoch %d", tk.ID, p.Source, epochs)
		}
		checkPlan(t, p, tk, acked[epochs][tk.ID])
	}
	// Restore from each retained epoch by number: payloads of that epoch.
	for n := uint64(epochs - 2); n <= epochs; n++ {
		for _, tk := range expected {
			p := h.restore(fsm.RestoreRequest{Job: "wide", Task: tk.ID, Epoch: n})
			checkPlan(t, p, tk, acked[n][tk.ID])
		}
	}
	// Epoch 1 was pushed out of retention (3 retained).
	if _, _, err := h.f.PlanRestore(fsm.RestoreRequest{Job: "wide", Task: expected[0].ID, Epoch: 1}); !isRule(err, wire.ErrEpochNotCompleted) {
		t.Fatalf("restore of subsumed epoch 1: %v", err)
	}
}

// TestTopologyChange: a task added between attempts has no prior state, a
// removed one still restores from the checkpoint its attempt made, and the
// old generation is fenced.
func TestTopologyChange(t *testing.T) {
	h := newHarness(t)
	h.putJob("etl", wire.JobConfig{Retained: 2})
	a := task(t, "a", "state")
	b := task(t, "b", "input", "state", "incremental")
	c := task(t, "c", "output")
	d := task(t, "d", "state", "output")
	m := task(t, "map") // stateless, in both attempts
	h.start("etl", "att-1", a, b, c, m)
	h.begin("etl", 1, 1)
	for _, tk := range []wire.Task{a, b, c} {
		h.ack("etl", 1, 1, tk.ID, payloadsFor(tk, 1))
	}
	h.advance(time.Second)
	h.begin("etl", 1, 2) // still pending when attempt 2 starts
	h.ack("etl", 1, 2, "a", payloadsFor(a, 2))
	h.begin("etl", 1, 3)

	h.advance(time.Second)
	att2 := h.start("etl", "att-2", d, m, b, a) // c removed, d added
	if att2.Generation != 2 || att2.Expected != 3 || att2.Tasks != 4 {
		t.Fatalf("attempt 2: %+v", att2)
	}
	j := h.job("etl")
	if j.Generation != 2 || j.AttemptID != "att-2" || len(j.Pending) != 0 || j.LatestCompleted != 1 || !slices.Equal(j.Ended, []uint64{2, 3}) {
		t.Fatalf("job after attempt 2: %+v", j)
	}
	for _, n := range []uint64{2, 3} {
		e := h.epoch("etl", n)
		if e.State != wire.EpochAborted || !strings.Contains(e.Reason, "generation 2") || e.EndedAt == nil || !e.EndedAt.Equal(h.now) {
			t.Fatalf("epoch %d after attempt 2: %+v", n, e.Epoch)
		}
	}
	if n := keysWithPrefix(h.dump(), "payloads", fsm.EpochKeyPrefix("etl", 2)); n != 0 {
		t.Fatalf("aborted epoch 2 keeps %d payloads", n)
	}
	if exp, err := h.f.ExpiredEpochs(h.now.Add(time.Hour), 10); err != nil || len(exp) != 0 {
		t.Fatalf("aborted epochs still have deadlines: %v %v", exp, err)
	}

	// Before attempt 2 completes anything: the latest checkpoint is epoch 1
	// of attempt 1.
	pd := h.restore(fsm.RestoreRequest{Job: "etl", Task: "d"})
	checkNoPriorState(t, pd)
	if pd.Source.Epoch != 1 || pd.Source.Generation != 1 {
		t.Errorf("restore d from %+v, want epoch 1 generation 1", pd.Source)
	}
	checkPlan(t, h.restore(fsm.RestoreRequest{Job: "etl", Task: "c"}), c, payloadsFor(c, 1))
	checkPlan(t, h.restore(fsm.RestoreRequest{Job: "etl", Task: "a"}), a, payloadsFor(a, 1))
	checkPlan(t, h.restore(fsm.RestoreRequest{Job: "etl", Task: "map"}), m, nil)

	// A zombie of attempt 1 can change nothing.
	h.reject(wire.ErrFenced, fsm.CmdEpochBegin, fsm.EpochBegin{Job: "etl", Generation: 1, Epoch: 4})
	h.reject(wire.ErrFenced, fsm.CmdTaskAck, fsm.TaskAck{Job: "etl", Generation: 1, Epoch: 2, Task: "b", Payloads: payloadsFor(b, 2)})
	h.reject(wire.ErrFenced, fsm.CmdTaskAck, fsm.TaskAck{Job: "etl", Generation: 1, Epoch: 1, Task: "c", Payloads: payloadsFor(c, 1)})
	h.reject(wire.ErrFenced, fsm.CmdEpochAbort, fsm.EpochAbort{Job: "etl", Generation: 1, Epoch: 3})
	h.reject(wire.ErrFenced, fsm.CmdEpochAbort, fsm.EpochAbort{Job: "etl", Generation: 1, Epoch: 1})
	h.reject(wire.ErrFenced, fsm.CmdAttemptStart, fsm.AttemptStart{Job: "etl", AttemptID: "att-1", Tasks: []wire.Task{a, b, c, m}})

	// Attempt 2 completes an epoch: c is gone from the latest checkpoint.
	h.advance(time.Second)
	h.begin("etl", 2, 4)
	for _, tk := range []wire.Task{a, b, d} {
		h.ack("etl", 2, 4, tk.ID, payloadsFor(tk, 4))
	}
	checkNoPriorState(t, h.restore(fsm.RestoreRequest{Job: "etl", Task: "c"}))
	checkPlan(t, h.restore(fsm.RestoreRequest{Job: "etl", Task: "d"}), d, payloadsFor(d, 4))
	checkPlan(t, h.restore(fsm.RestoreRequest{Job: "etl", Task: "b"}), b, payloadsFor(b, 4))
	// Epoch 1 is still retained (2 retained) and still knows c.
	checkPlan(t, h.restore(fsm.RestoreRequest{Job: "etl", Task: "c", Epoch: 1}), c, payloadsFor(c, 1))
	checkNoPriorState(t, h.restore(fsm.RestoreRequest{Job: "etl", Task: "d", Epoch: 1}))
	// A task no attempt ever had.
	checkNoPriorState(t, h.restore(fsm.RestoreRequest{Job: "etl", Task: "never"}))
}

func TestRestoreWithoutCheckpoint(t *testing.T) {
	h := newHarness(t)
	h.putJob("new", wire.JobConfig{})
	h.start("new", "a1", task(t, "x", "state"))
	p := h.restore(fsm.RestoreRequest{Job: "new", Task: "x"})
	if p.Status != "no_checkpoint" || p.Source.Epoch != 0 {
		t.Fatalf("restore before any checkpoint: %+v", p)
	}
	for _, k := range wire.Kinds {
		if p.Kinds[k].Status != wire.RestoreNoPriorState {
			t.Errorf("kind %s: %+v", k, p.Kinds[k])
		}
	}
	for _, tc := range []struct {
		req  fsm.RestoreRequest
		want error
	}{
		{fsm.RestoreRequest{Job: "nope", Task: "x"}, wire.ErrNotFound},
		{fsm.RestoreRequest{Job: "new", Task: "x", SourceJob: "nope"}, wire.ErrNotFound},
		{fsm.RestoreRequest{Job: "new", Task: "x", Pin: "sp"}, wire.ErrNotFound},
		{fsm.RestoreRequest{Job: "new", Task: "x", Epoch: 1}, wire.ErrNotFound},
		{fsm.RestoreRequest{Job: "new", Task: "x", Epoch: 1, Pin: "sp"}, wire.ErrInvalid},
		{fsm.RestoreRequest{Job: "new", Task: "bad/id"}, wire.ErrInvalid},
		{fsm.RestoreRequest{Job: "new", Task: "x", SourceTask: "../x"}, wire.ErrInvalid},
	} {
		if _, _, err := h.f.PlanRestore(tc.req); !isRule(err, tc.want) {
			t.Errorf("PlanRestore(%+v): %v, want %v", tc.req, err, tc.want)
		}
	}
}
