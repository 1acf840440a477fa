package fsm_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// complete begins epoch n of job and acks it from every task.
func (h *harness) complete(job string, gen, n uint64, tasks ...wire.Task) *wire.AckResult {
	h.t.Helper()
	h.advance(time.Second)
	h.begin(job, gen, n)
	var res *wire.AckResult
	for _, tk := range tasks {
		res = h.ack(job, gen, n, tk.ID, payloadsFor(tk, n))
	}
	if !res.Completed {
		h.t.Fatalf("epoch %s/%d did not complete: %+v", job, n, res.Epoch)
	}
	return res
}

func TestSeveralPendingEpochs(t *testing.T) {
	h := newHarness(t)
	a, b := task(t, "a", "state"), task(t, "b", "input")
	h.putJob("j", wire.JobConfig{Retained: 5})
	h.start("j", "a1", a, b)
	for n := uint64(1); n <= 4; n++ {
		h.advance(time.Second)
		h.begin("j", 1, n)
	}
	h.ack("j", 1, 1, "a", payloadsFor(a, 1))
	h.ack("j", 1, 2, "b", payloadsFor(b, 2))
	if j := h.job("j"); !slices.Equal(j.Pending, []uint64{1, 2, 3, 4}) {
		t.Fatalf("pending %v", j.Pending)
	}
	if exp, _ := h.f.ExpiredEpochs(h.now.Add(time.Hour), 100); len(exp) != 4 {
		t.Fatalf("deadlines of 4 pending epochs: %v", exp)
	}

	// Epoch 3 completes: the older pending ones (1, 2) are aborted, the
	// newer one (4) stays pending.
	h.advance(time.Second)
	h.ack("j", 1, 3, "b", payloadsFor(b, 3))
	res := h.ack("j", 1, 3, "a", payloadsFor(a, 3))
	if !res.Completed {
		t.Fatal("epoch 3 did not complete")
	}
	for _, n := range []uint64{1, 2} {
		e := h.epoch("j", n)
		if e.State != wire.EpochAborted || e.Reason != "subsumed by completed epoch 3" || e.EndedAt == nil || !e.EndedAt.Equal(h.now) {
			t.Fatalf("epoch %d: %+v", n, e.Epoch)
		}
		if k := keysWithPrefix(h.dump(), "payloads", fsm.EpochKeyPrefix("j", n)); k != 0 {
			t.Fatalf("aborted epoch %d keeps %d payloads", n, k)
		}
		// Its acks stay for inspection; a late ack is refused.
		if len(e.Acks) != 1 {
			t.Fatalf("epoch %d acks %+v", n, e.Acks)
		}
	}
	h.reject(wire.ErrEpochNotPending, fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "b", Payloads: payloadsFor(b, 1)})
	j := h.job("j")
	if !slices.Equal(j.Pending, []uint64{4}) || !slices.Equal(j.Retained, []uint64{3}) || !slices.Equal(j.Ended, []uint64{1, 2}) || j.LatestCompleted != 3 {
		t.Fatalf("job after epoch 3: %+v", j)
	}
	exp, _ := h.f.ExpiredEpochs(h.now.Add(time.Hour), 100)
	if !slices.Equal(exp, []fsm.EpochRef{{Job: "j", Epoch: 4}}) {
		t.Fatalf("deadlines after epoch 3: %v", exp)
	}
	if _, _, err := h.f.PlanRestore(fsm.RestoreRequest{Job: "j", Task: "a", Epoch: 4}); !isRule(err, wire.ErrEpochNotCompleted) {
		t.Fatalf("restore of pending epoch 4: %v", err)
	}
	// Epoch 4 can still complete after 3.
	h.ack("j", 1, 4, "a", payloadsFor(a, 4))
	if !h.ack("j", 1, 4, "b", payloadsFor(b, 4)).Completed {
		t.Fatal("epoch 4 did not complete")
	}
	if j := h.job("j"); len(j.Pending) != 0 || !slices.Equal(j.Retained, []uint64{3, 4}) || j.LatestCompleted != 4 {
		t.Fatalf("job after epoch 4: %+v", j)
	}
	if _, ok := h.f.NextDeadline(); ok {
		t.Fatal("a deadline is left with nothing pending")
	}
	for _, n := range []uint64{1, 2} {
		if _, _, err := h.f.PlanRestore(fsm.RestoreRequest{Job: "j", Task: "a", Epoch: n}); !isRule(err, wire.ErrEpochNotCompleted) {
			t.Fatalf("restore of aborted epoch %d: %v", n, err)
		}
	}
	if es, _, _ := h.f.Epochs("j", wire.EpochAborted); len(es) != 2 {
		t.Fatalf("aborted epochs %+v", es)
	}
}

func TestStatelessAttemptCompletesAtBegin(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{})
	h.start("j", "a1", task(t, "m1"), task(t, "m2"))
	e := h.begin("j", 1, 1)
	if e.State != wire.EpochCompleted || e.Expected != 0 || e.CompletedAt == nil {
		t.Fatalf("epoch of a stateless attempt: %+v", e)
	}
	if j := h.job("j"); j.LatestCompleted != 1 || len(j.Pending) != 0 {
		t.Fatalf("job %+v", j)
	}
	checkPlan(t, h.restore(fsm.RestoreRequest{Job: "j", Task: "m1"}), task(t, "m1"), nil)
}

func TestRetentionAndPins(t *testing.T) {
	h := newHarness(t)
	a, b := task(t, "a", "state", "incremental"), task(t, "b", "input", "output")
	h.putJob("j", wire.JobConfig{Retained: 2})
	h.start("j", "a1", a, b)
	h.complete("j", 1, 1, a, b)
	h.complete("j", 1, 2, a, b)
	if j := h.job("j"); !slices.Equal(j.Retained, []uint64{1, 2}) || len(j.Ended) != 0 {
		t.Fatalf("after 2 epochs: %+v", j)
	}
	// The third completion subsumes the first.
	h.complete("j", 1, 3, a, b)
	e1 := h.epoch("j", 1)
	if e1.State != wire.EpochSubsumed || e1.EndedAt == nil || !e1.EndedAt.Equal(h.now) || e1.CompletedAt == nil {
		t.Fatalf("epoch 1: %+v", e1.Epoch)
	}
	d := h.dump()
	if k := keysWithPrefix(d, "payloads", fsm.EpochKeyPrefix("j", 1)); k != 0 {
		t.Fatalf("subsumed epoch 1 keeps %d payloads", k)
	}
	if k := keysWithPrefix(d, "acks", fsm.EpochKeyPrefix("j", 1)); k != 2 {
		t.Fatalf("subsumed epoch 1 has %d acks, want 2 (kept for history)", k)
	}
	if j := h.job("j"); !slices.Equal(j.Retained, []uint64{2, 3}) || !slices.Equal(j.Ended, []uint64{1}) {
		t.Fatalf("after 3 epochs: %+v", j)
	}
	if _, _, err := h.f.PlanRestore(fsm.RestoreRequest{Job: "j", Task: "a", Epoch: 1}); !isRule(err, wire.ErrEpochNotCompleted) {
		t.Fatalf("restore of subsumed epoch 1: %v", err)
	}
	h.reject(wire.ErrEpochNotCompleted, fsm.CmdEpochPin, fsm.EpochPin{Job: "j", Epoch: 1, Name: "late"})
	checkPlan(t, h.restore(fsm.RestoreRequest{Job: "j", Task: "a", Epoch: 2}), a, payloadsFor(a, 2))

	// A pinned epoch is never subsumed.
	p := h.pin("j", 2, "keep")
	if !p.Pinned || p.PinName != "keep" {
		t.Fatalf("pin: %+v", p)
	}
	for n := uint64(4); n <= 6; n++ {
		h.complete("j", 1, n, a, b)
	}
	if e := h.epoch("j", 2); e.State != wire.EpochCompleted || !e.Pinned {
		t.Fatalf("pinned epoch 2: %+v", e.Epoch)
	}
	if j := h.job("j"); !slices.Equal(j.Retained, []uint64{2, 5, 6}) || !slices.Equal(j.Ended, []uint64{1, 3, 4}) {
		t.Fatalf("with a pin: %+v", j)
	}
	// A pin also survives a new attempt, and another job restores from it.
	h.start("j", "a2", task(t, "a", "state"))
	h.putJob("clone", wire.JobConfig{})
	for _, req := range []fsm.RestoreRequest{
		{Job: "j", Task: "a", Pin: "keep"},
		{Job: "j", Task: "a", Epoch: 2},
		{Job: "clone", Task: "a", SourceJob: "j", Pin: "keep"},
		{Job: "clone", Task: "a-copy", SourceJob: "j", SourceTask: "a", Pin: "keep"},
		{Job: "j", Task: "a-new", SourceTask: "a", Pin: "keep"},
	} {
		p := h.restore(req)
		if p.Job != req.Job || p.Task != req.Task || p.Source.Job != "j" || p.Source.Task != "a" || p.Source.Epoch != 2 || p.Source.Generation != 1 || p.Source.Pin != "keep" {
			t.Fatalf("restore %+v: %+v", req, p)
		}
		checkPlan(t, p, a, payloadsFor(a, 2))
	}
	bp := h.restore(fsm.RestoreRequest{Job: "j", Task: "b", Epoch: 6})
	checkPlan(t, bp, b, payloadsFor(b, 6))
	// Another job restores only from a savepoint: epoch 6 is not pinned.
	if _, _, err := h.f.PlanRestore(fsm.RestoreRequest{Job: "clone", Task: "b", SourceJob: "j", Epoch: 6}); !isRule(err, wire.ErrNotFound) {
		t.Fatalf("restore of another job's unpinned epoch: %v", err)
	}
	if _, _, err := h.f.PlanRestore(fsm.RestoreRequest{Job: "clone", Task: "a", Pin: "keep"}); !isRule(err, wire.ErrNotFound) {
		t.Fatalf("pin of another job without SourceJob: %v", err)
	}

	// Unpin re-applies retention: epoch 2 is now the oldest beyond 2.
	u := h.unpin("j", 2)
	if u.Pinned || u.PinName != "" || u.State != wire.EpochSubsumed {
		t.Fatalf("unpinned epoch 2: %+v", u)
	}
	if k := keysWithPrefix(h.dump(), "payloads", fsm.EpochKeyPrefix("j", 2)); k != 0 {
		t.Fatalf("unpinned epoch 2 keeps %d payloads", k)
	}
	if j := h.job("j"); !slices.Equal(j.Retained, []uint64{5, 6}) || !slices.Equal(j.Ended, []uint64{1, 3, 4, 2}) {
		t.Fatalf("after unpin: %+v", j)
	}
	if _, _, err := h.f.PlanRestore(fsm.RestoreRequest{Job: "clone", Task: "a", SourceJob: "j", Pin: "keep"}); !isRule(err, wire.ErrNotFound) {
		t.Fatalf("restore of an unpinned savepoint: %v", err)
	}
	// Unpin of an epoch within retention keeps it. Pins without a name do
	// not clash with each other.
	h.pin("j", 5, "")
	h.pin("j", 6, "")
	for _, n := range []uint64{5, 6} {
		if u := h.unpin("j", n); u.State != wire.EpochCompleted {
			t.Fatalf("unpin of epoch %d within retention: %+v", n, u)
		}
	}

	// Lowering retention through the config subsumes at once.
	h.putJob("j", wire.JobConfig{Retained: 1})
	if j := h.job("j"); !slices.Equal(j.Retained, []uint64{6}) || j.Ended[len(j.Ended)-1] != 5 {
		t.Fatalf("after retained=1: %+v", j)
	}
}

func TestHistoryTrimming(t *testing.T) {
	h := newHarness(t)
	a := task(t, "a", "state")
	h.putJob("j", wire.JobConfig{Retained: 1, History: 3})
	b := task(t, "b", "output")
	h.start("j", "a1", a, b)
	for n := uint64(1); n <= 4; n++ {
		h.complete("j", 1, n, a, b) // 1..3 subsumed
	}
	h.begin("j", 1, 5)
	h.ack("j", 1, 5, "a", payloadsFor(a, 5))
	h.abort("j", 1, 5, "") // ended: 1 2 3 5 -> 2 3 5
	h.begin("j", 1, 6)
	h.ack("j", 1, 6, "a", payloadsFor(a, 6))
	h.start("j", "a2", a, b)    // aborts 6: ended 3 5 6
	h.complete("j", 2, 7, a, b) // subsumes 4: ended 5 6 4, by end time

	j := h.job("j")
	if !slices.Equal(j.Ended, []uint64{5, 6, 4}) || !slices.Equal(j.Retained, []uint64{7}) {
		t.Fatalf("job: %+v", j)
	}
	d := h.dump()
	for n := uint64(1); n <= 3; n++ {
		if _, _, err := h.f.Epoch("j", n); !isRule(err, wire.ErrNotFound) {
			t.Errorf("forgotten epoch %d: %v", n, err)
		}
		prefix := fsm.EpochKeyPrefix("j", n)
		for _, bucket := range []string{"epochs", "acks", "payloads"} {
			if k := keysWithPrefix(d, bucket, prefix); k != 0 {
				t.Errorf("forgotten epoch %d keeps %d keys in %s", n, k, bucket)
			}
		}
	}
	for _, n := range []uint64{4, 5, 6, 7} {
		if e := h.epoch("j", n); len(e.Acks) == 0 {
			t.Errorf("remembered epoch %d lost its acks", n)
		}
	}
	es, _, _ := h.f.Epochs("j", "")
	var nums []uint64
	for _, e := range es {
		nums = append(nums, e.Epoch)
	}
	if !slices.Equal(nums, []uint64{4, 5, 6, 7}) {
		t.Fatalf("remembered epochs %v", nums)
	}
	// A forgotten epoch cannot be acked, pinned or restored, and its
	// number cannot be begun again.
	h.reject(wire.ErrNotFound, fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 2, Epoch: 2, Task: "a"})
	h.reject(wire.ErrNotFound, fsm.CmdEpochPin, fsm.EpochPin{Job: "j", Epoch: 2})
	h.reject(wire.ErrEpochNotIncreasing, fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 2, Epoch: 2})
	if _, _, err := h.f.PlanRestore(fsm.RestoreRequest{Job: "j", Task: "a", Epoch: 2}); !isRule(err, wire.ErrNotFound) {
		t.Fatalf("restore of forgotten epoch: %v", err)
	}
	// Lowering history through the config trims at once.
	h.putJob("j", wire.JobConfig{Retained: 1, History: 1})
	if j := h.job("j"); !slices.Equal(j.Ended, []uint64{4}) {
		t.Fatalf("after history=1: %+v", j)
	}
	if k := keysWithPrefix(h.dump(), "acks", fsm.EpochKeyPrefix("j", 5)); k != 0 {
		t.Fatalf("epoch 5 keeps %d acks", k)
	}
}

func TestAckTimeout(t *testing.T) {
	h := newHarness(t)
	a, b := task(t, "a", "state"), task(t, "b", "output")
	h.putJob("j", wire.JobConfig{AckTimeout: fsm.Duration(30 * time.Second), Retained: 3})
	h.putJob("k", wire.JobConfig{AckTimeout: fsm.Duration(time.Minute)})
	h.start("j", "a1", a, b)
	h.start("k", "k1", a)
	h.begin("j", 1, 1) // deadline t0+30s
	h.begin("k", 1, 1) // deadline t0+60s
	h.advance(10 * time.Second)
	h.begin("j", 1, 2) // deadline t0+40s
	h.ack("j", 1, 1, "a", payloadsFor(a, 1))

	j1, j2, k1 := fsm.EpochRef{Job: "j", Epoch: 1}, fsm.EpochRef{Job: "j", Epoch: 2}, fsm.EpochRef{Job: "k", Epoch: 1}
	if e := h.epoch("j", 2); !e.Deadline.Equal(t0.Add(40 * time.Second)) {
		t.Fatalf("deadline of j/2: %v", e.Deadline)
	}
	if at, ok := h.f.NextDeadline(); !ok || !at.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("next deadline %v %v", at, ok)
	}
	for _, tc := range []struct {
		at   time.Duration
		max  int
		want []fsm.EpochRef
	}{
		{29 * time.Second, 10, nil},
		{30*time.Second - 1, 10, nil},
		{30 * time.Second, 10, []fsm.EpochRef{j1}}, // the deadline itself has passed
		{45 * time.Second, 10, []fsm.EpochRef{j1, j2}},
		{time.Hour, 10, []fsm.EpochRef{j1, j2, k1}},
		{time.Hour, 2, []fsm.EpochRef{j1, j2}},
	} {
		got, err := h.f.ExpiredEpochs(t0.Add(tc.at), tc.max)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ExpiredEpochs(t0+%s, %d) = %v %v, want %v", tc.at, tc.max, got, err, tc.want)
		}
	}

	// A timeout stamped before the deadline changes nothing, even if the
	// leader's scan listed the epoch.
	h.now = t0.Add(29 * time.Second)
	before := h.hash()
	if got := h.timeout(j1, j2, k1); len(got) != 0 || h.hash() != before {
		t.Fatalf("early timeout aborted %v", got)
	}
	// Epoch 2 completes meanwhile (and aborts epoch 1 as older).
	h.now = t0.Add(35 * time.Second)
	h.ack("j", 1, 2, "a", payloadsFor(a, 2))
	h.ack("j", 1, 2, "b", payloadsFor(b, 2))
	if e := h.epoch("j", 1); e.State != wire.EpochAborted || !strings.Contains(e.Reason, "completed epoch 2") {
		t.Fatalf("j/1: %+v", e.Epoch)
	}
	// A timeout after the deadlines leaves the ended epochs alone and
	// aborts the one still pending.
	h.now = t0.Add(time.Hour)
	got := h.timeout(j1, j2, k1)
	if !slices.Equal(got, []fsm.EpochRef{k1}) {
		t.Fatalf("timeout aborted %v, want [k/1]", got)
	}
	if e := h.epoch("j", 2); e.State != wire.EpochCompleted {
		t.Fatalf("completed j/2 touched by the timeout: %+v", e.Epoch)
	}
	e := h.epoch("k", 1)
	if e.State != wire.EpochAborted || e.Reason != "ack timeout after 1m0s: 0 of 1 tasks acknowledged" || !e.EndedAt.Equal(h.now) {
		t.Fatalf("k/1 after the timeout: %+v", e.Epoch)
	}
	if exp, _ := h.f.ExpiredEpochs(h.now.Add(time.Hour), 10); len(exp) != 0 {
		t.Fatalf("still expired: %v", exp)
	}
	if j := h.job("k"); len(j.Pending) != 0 || !slices.Equal(j.Ended, []uint64{1}) {
		t.Fatalf("job k: %+v", j)
	}
	// A late ack to the timed-out epoch is refused.
	h.reject(wire.ErrEpochNotPending, fsm.CmdTaskAck, fsm.TaskAck{Job: "k", Generation: 1, Epoch: 1, Task: "a", Payloads: payloadsFor(a, 1)})

	// Timeouts are not fenced: the leader proposes them, not a worker.
	h.begin("k", 1, 2)
	h.start("k", "k2", a)
	h.begin("k", 2, 3)
	h.advance(2 * time.Minute)
	if got := h.timeout(fsm.EpochRef{Job: "k", Epoch: 3}); !slices.Equal(got, []fsm.EpochRef{{Job: "k", Epoch: 3}}) {
		t.Fatalf("timeout of k/3: %v", got)
	}
}

// TestOldAttemptsPruned checks that the task sets of generations no retained
// epoch references are deleted, while a pinned epoch keeps its generation's.
func TestOldAttemptsPruned(t *testing.T) {
	h := newHarness(t)
	h.putJob("p", wire.JobConfig{Retained: 1})
	a := task(t, "a", "state")
	for gen := uint64(1); gen <= 4; gen++ {
		h.start("p", fmt.Sprintf("att-%d", gen), a, task(t, fmt.Sprintf("only-%d", gen), "input"))
		h.begin("p", gen, gen)
		h.ack("p", gen, gen, "a", payloadsFor(a, gen))
		h.ack("p", gen, gen, fmt.Sprintf("only-%d", gen), map[fsm.Kind][]byte{wire.KindInput: []byte("x")})
		if gen == 2 {
			h.pin("p", 2, "keep")
		}
	}
	attempt := func(gen uint64) error {
		_, _, err := h.f.Attempt("p", gen)
		return err
	}
	for gen, kept := range map[uint64]bool{1: false, 2: true, 3: false, 4: true} {
		err := attempt(gen)
		if kept && err != nil {
			t.Fatalf("generation %d pruned while referenced: %v", gen, err)
		}
		if !kept && !errors.Is(err, wire.ErrNotFound) {
			t.Fatalf("generation %d kept: %v", gen, err)
		}
	}
	// The pinned epoch still restores, with its generation's task set.
	p := h.restore(fsm.RestoreRequest{Job: "p", Task: "only-2", Pin: "keep"})
	if p.Status != wire.RestoreRestored {
		t.Fatalf("restore from pinned epoch: %+v", p)
	}
	// Unpinning lets generation 2 go; a retried start of an old attempt is
	// still fenced.
	h.unpin("p", 2)
	if err := attempt(2); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("generation 2 after unpin: %v", err)
	}
	h.reject(wire.ErrFenced, fsm.CmdAttemptStart, fsm.AttemptStart{Job: "p", AttemptID: "att-1", Tasks: []wire.Task{a}})
}
