package checker

import (
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/jepsen/history"
)

// Tests written in a mutation audit of acks.go: each case is the smallest
// history on which one guard of Acks decides the verdict.

func outcome(o history.Op, out history.Outcome) history.Op {
	o.Outcome = out
	return o
}

func gen(o history.Op, g uint64) history.Op {
	o.Gen = g
	return o
}

func attempt(job string, g uint64) history.Op {
	return history.Op{Kind: history.KindAttempt, Job: job, Gen: g, Client: 9}
}

func begin(job string, epoch, g uint64) history.Op {
	return history.Op{Kind: history.KindBegin, Job: job, Epoch: epoch, Gen: g, Client: 9}
}

// step is one operation of a table-built history, with its interval in
// milliseconds.
type step struct {
	op       history.Op
	from, to int
}

func steps(ss ...step) []history.Op {
	b := newHB()
	for _, s := range ss {
		b.add(s.op, s.from, s.to)
	}
	return b.ops
}

func checkAcks(t *testing.T, in *Input, wantOK bool, want string) {
	t.Helper()
	v := Acks(in)
	if v.OK != wantOK {
		t.Fatalf("acks ok = %v, want %v: %s %v", v.OK, wantOK, v.Summary, v.Problems)
	}
	if want != "" && !strings.Contains(strings.Join(v.Problems, "\n"), want) {
		t.Fatalf("no %q in %v", want, v.Problems)
	}
}

// TestAcksFencingCases: a begin, ack or abort of generation g answered ok
// after an attempt of a newer generation was answered ok is a violation;
// nothing else is (a failed attempt fences nothing, an op of unknown
// outcome was not accepted, an op invoked before the attempt returned is
// concurrent with it, an op of the newer generation is not fenced).
func TestAcksFencingCases(t *testing.T) {
	abort := history.Op{Kind: history.KindAbort, Job: "j", Epoch: 5, Gen: 1, Client: 1}
	for _, c := range []struct {
		name string
		ops  []history.Op
		ok   bool
	}{
		{"begin of a fenced generation", steps(step{attempt("j", 2), 0, 10}, step{begin("j", 5, 1), 20, 30}), false},
		{"abort of a fenced generation", steps(step{attempt("j", 2), 0, 10}, step{abort, 20, 30}), false},
		{"after a failed attempt", steps(step{outcome(attempt("j", 2), history.Fail), 0, 10}, step{ack("j", 5, "src-0", "v", false), 20, 30}), true},
		{"fenced ack of unknown outcome", steps(step{attempt("j", 2), 0, 10}, step{outcome(ack("j", 5, "src-0", "v", false), history.Unknown), 20, 30}), true},
		{"ack of the new generation", steps(step{attempt("j", 2), 0, 10}, step{gen(ack("j", 5, "src-0", "v", false), 2), 20, 30}), true},
		{"ack of the same generation as the attempt", steps(step{attempt("j", 1), 0, 10}, step{ack("j", 5, "src-0", "v", false), 20, 30}), true},
		{"ack invoked before the attempt returned", steps(step{attempt("j", 2), 0, 20}, step{ack("j", 5, "src-0", "v", false), 10, 30}), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkAcks(t, &Input{Ops: c.ops}, c.ok, "")
		})
	}
}

// TestAcksBeginOrder: begins answered ok for a job increase in real-time
// order; a retried begin of the same epoch and generation, a concurrent
// one and a failed one are not violations.
func TestAcksBeginOrder(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []history.Op
		ok   bool
	}{
		{"older epoch begun later", steps(step{begin("j", 2, 1), 0, 10}, step{begin("j", 1, 1), 20, 30}), false},
		{"same epoch begun again by a new generation", steps(step{begin("j", 2, 1), 0, 10}, step{begin("j", 2, 2), 20, 30}), false},
		{"same begin retried", steps(step{begin("j", 2, 1), 0, 10}, step{begin("j", 2, 1), 20, 30}), true},
		{"concurrent begins", steps(step{begin("j", 2, 1), 0, 30}, step{begin("j", 1, 1), 10, 20}), true},
		{"older epoch's begin failed", steps(step{begin("j", 2, 1), 0, 10}, step{outcome(begin("j", 1, 1), history.Fail), 20, 30}), true},
		{"newer epoch begun later", steps(step{begin("j", 1, 1), 0, 10}, step{begin("j", 2, 1), 20, 30}), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkAcks(t, &Input{Ops: c.ops}, c.ok, "")
		})
	}
}

func restoreOp(job, task string, epoch, readEpoch uint64, value string) history.Op {
	return history.Op{Kind: history.KindRestore, Job: job, Task: task, Epoch: epoch, ReadEpoch: readEpoch, Value: value, Client: 3}
}

func withManifest(o history.Op, keys ...string) history.Op {
	o.HasManifest, o.Keys = true, keys
	return o
}

// TestAcksValuesRead: every payload a read or restore returned is one an
// ack that may have taken effect (ok or unknown, never failed, never
// another kind of operation) sent for that job, epoch and task; likewise
// every manifest a restore returned.
func TestAcksValuesRead(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []history.Op
		ok   bool
		want string
	}{
		{"restore of a value an unknown ack sent",
			steps(step{outcome(ack("j", 3, "src-0", "v3", false), history.Unknown), 0, 10}, step{restoreOp("j", "src-0", 0, 3, "v3"), 20, 30}), true, ""},
		{"restore of a value only a failed ack sent",
			steps(step{outcome(ack("j", 3, "src-0", "v3", false), history.Fail), 0, 10}, step{restoreOp("j", "src-0", 0, 3, "v3"), 20, 30}), false, "which no ack of that epoch sent"},
		{"restore of epoch 3 returning a value no ack sent",
			steps(step{ack("j", 3, "src-0", "v3", false), 0, 10}, step{restoreOp("j", "src-0", 3, 3, "forged"), 20, 30}), false, "which no ack of that epoch sent"},
		{"read of a value no ack sent",
			steps(step{ack("j", 3, "src-0", "v3", false), 0, 10}, step{history.Op{Kind: history.KindRead, Job: "j", Task: "src-0", ReadEpoch: 3, Value: "forged", Client: 2}, 20, 30}), false, "which no ack of that epoch sent"},
		{"read of a zombie's value",
			steps(step{ack("j", 3, "src-0", "v3", false), 0, 10},
				step{history.Op{Kind: history.KindZombieAck, Job: "j", Epoch: 3, Task: "src-0", Value: "zombie", Outcome: history.Unknown, Client: 4}, 5, 15},
				step{restoreOp("j", "src-0", 0, 3, "zombie"), 20, 30}), false, "which no ack of that epoch sent"},
		// A restore records the payload of the task's own main kind, so
		// an empty one of a task with an inline kind was lost (before,
		// a restore whose plan named no capabilities recorded none and
		// passed: TestRestoreOfLostStateIsAViolation).
		{"restore of a task with an inline kind returning no payload",
			steps(step{ack("j", 3, "src-0", "v3", false), 0, 10}, step{restoreOp("j", "src-0", 0, 3, ""), 20, 30}), false, "which no ack of that epoch sent"},
		{"restore of a task without an inline kind",
			steps(step{ack("j", 3, "src-0", "v3", false), 0, 10}, step{restoreOp("j", "map-0", 0, 3, ""), 20, 30}), true, ""},
		{"restore of a task the workload does not run, without a payload",
			steps(step{ack("j", 3, "src-0", "v3", false), 0, 10}, step{restoreOp("j", "other", 0, 3, ""), 20, 30}), true, ""},
		{"restore of a state task that lost its manifest of blobs",
			steps(step{withManifest(ack("j", 3, "agg-0", "a3", false), "k1"), 0, 10}, step{restoreOp("j", "agg-0", 0, 3, "a3"), 20, 30}), false, "without a state manifest"},
		{"restore without a manifest where an unknown ack sent one of none",
			steps(step{withManifest(ack("j", 3, "agg-0", "a3", false), "k1"), 0, 10},
				step{outcome(withManifest(ack("j", 3, "agg-0", "a3", false)), history.Unknown), 5, 15},
				step{restoreOp("j", "agg-0", 0, 3, "a3"), 20, 30}), true, ""},
		{"restore without a manifest where the ack sent one of none",
			steps(step{withManifest(ack("j", 3, "agg-0", "a3", false)), 0, 10}, step{restoreOp("j", "agg-0", 0, 3, "a3"), 20, 30}), true, ""},
		{"restore without a payload",
			steps(step{ack("j", 3, "agg-0", "", false), 0, 10}, step{withManifest(restoreOp("j", "agg-0", 0, 3, ""), "k1"), 20, 30}), false, "manifest of 1 blobs no ack"},
		{"restore of the manifest an ack sent",
			steps(step{withManifest(ack("j", 3, "agg-0", "a3", false), "k1", "k2"), 0, 10}, step{withManifest(restoreOp("j", "agg-0", 0, 3, "a3"), "k2", "k1"), 20, 30}), true, ""},
		{"restore of a manifest no ack sent",
			steps(step{withManifest(ack("j", 3, "agg-0", "a3", false), "k1", "k2"), 0, 10}, step{withManifest(restoreOp("j", "agg-0", 0, 3, "a3"), "k1", "k3"), 20, 30}), false, "manifest of 2 blobs no ack"},
		{"restore of a manifest when the ack sent none",
			steps(step{ack("j", 3, "agg-0", "a3", false), 0, 10}, step{withManifest(restoreOp("j", "agg-0", 0, 3, "a3")), 20, 30}), false, "manifest of 0 blobs no ack"},
		{"restore whose blob bytes differ",
			steps(step{history.Op{Kind: history.KindRestore, Job: "j", Task: "agg-0", Outcome: history.Fail, Code: "content_mismatch", Error: "crc"}, 20, 30}), false, "never uploaded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkAcks(t, &Input{Ops: c.ops}, c.ok, c.want)
		})
	}
}

func manifestRead(job string, epoch uint64, task string, keys ...string) history.Op {
	return history.Op{Kind: history.KindManifest, Job: job, Epoch: epoch, Task: task, HasManifest: true, Keys: keys, Client: 5}
}

// TestAcksManifestReads: the manifest of a completed epoch read twice is
// the same, and is one an ack sent.
func TestAcksManifestReads(t *testing.T) {
	sent := step{withManifest(ack("j", 3, "agg-0", "a3", true), "k1", "k2"), 0, 10}
	for _, c := range []struct {
		name string
		ops  []history.Op
		ok   bool
		want string
	}{
		{"read twice, the same", steps(sent, step{manifestRead("j", 3, "agg-0", "k2", "k1"), 20, 30}, step{manifestRead("j", 3, "agg-0", "k1", "k2"), 40, 50}), true, ""},
		{"changed between two reads", steps(sent,
			step{withManifest(ack("j", 3, "agg-0", "a3", false), "k1"), 5, 10}, // a second ack sent another
			step{manifestRead("j", 3, "agg-0", "k1", "k2"), 20, 30}, step{manifestRead("j", 3, "agg-0", "k1"), 40, 50}), false, "changed between two reads"},
		{"read of a manifest no ack sent", steps(sent, step{manifestRead("j", 3, "agg-0", "k1", "k9"), 20, 30}), false, "blobs no ack of that epoch sent"},
		{"failed read", steps(sent, step{outcome(manifestRead("j", 3, "agg-0", "k9"), history.Fail), 20, 30}), true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkAcks(t, &Input{Ops: c.ops}, c.ok, c.want)
		})
	}
}

// oneJob is the end of a run where job j, in its attempt of generation g,
// holds the epochs eps.
func oneJob(g uint64, eps ...EpochFinal) *Final {
	return &Final{Jobs: map[string]*JobFinal{"j": {Generation: g, Epochs: eps}}}
}

// done is epoch e completed with one task's ack and checkpoint.
func done(e uint64, task, value string) EpochFinal {
	return EpochFinal{Epoch: e, Generation: 1, State: "completed", Expected: 1, Acked: 1,
		Tasks: map[string]TaskCheckpoint{task: {Value: value}}, Acks: map[string]AckRecord{task: {}}}
}

func (e EpochFinal) with(f func(*EpochFinal)) EpochFinal {
	f(&e)
	return e
}

// TestAcksFinalEpochs: the checks of the final epochs against each
// other: generations never decrease, completion times increase with the
// epoch (within the clock slack and twice the injected skew), a completed
// epoch has every expected ack, a pending epoch belongs to the current
// attempt, and a final state not collected is no verdict of "ok".
func TestAcksFinalEpochs(t *testing.T) {
	b := newHB()
	b.add(ack("j", 1, "src-0", "s1", true), 0, 10)
	b.add(ack("j", 2, "src-0", "s2", true), 20, 30)
	doneAt := func(d time.Duration) func(*EpochFinal) {
		return func(e *EpochFinal) { c := b.t0.Add(time.Minute + d); e.CompletedAt = &c }
	}
	e1, e2 := done(1, "src-0", "s1").with(doneAt(0)), done(2, "src-0", "s2")
	for _, c := range []struct {
		name string
		f    *Final
		skew time.Duration
		ok   bool
		want string
	}{
		{"valid", oneJob(1, e1, e2.with(doneAt(time.Second))), 0, true, ""},
		{"listed out of order", oneJob(1, e2.with(doneAt(10*time.Second)), e1), 0, true, ""},
		{"not collected", &Final{CollectErr: "timeout"}, 0, false, "final state not collected"},
		{"generation decreases", oneJob(2, e1.with(func(e *EpochFinal) { e.Generation = 2 }), e2), 0, false, "below the generation"},
		{"completed out of order beyond the slack", oneJob(1, e1, e2.with(doneAt(-3*time.Second))), 0, false, "before the older epoch"},
		{"completed out of order within the slack", oneJob(1, e1, e2.with(doneAt(-time.Second))), 0, true, ""},
		{"out of order within slack and twice the skew", oneJob(1, e1, e2.with(doneAt(-5*time.Second))), 2 * time.Second, true, ""},
		{"out of order beyond slack and twice the skew", oneJob(1, e1, e2.with(doneAt(-7*time.Second))), 2 * time.Second, false, "before the older epoch"},
		{"completed short of an expected ack", oneJob(1, e1, e2.with(func(e *EpochFinal) { e.Expected = 2 })), 0, false, "completed with 1 of 2 expected acks"},
		{"completed with more acks than expected", oneJob(1, e1, e2.with(func(e *EpochFinal) {
			e.Acked, e.Acks = 2, map[string]AckRecord{"src-0": {}, "src-1": {}}
		})), 0, false, "completed with 2 of 1 expected acks"},
		{"pending epoch of a superseded generation", oneJob(2, e1, e2, EpochFinal{Epoch: 3, Generation: 1, State: "pending", Expected: 1}), 0, false, "still pending"},
		{"pending epoch of a generation newer than the job's", oneJob(1, e1, e2, EpochFinal{Epoch: 3, Generation: 2, State: "pending", Expected: 1}), 0, false, "still pending"},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkAcks(t, &Input{Ops: b.ops, Final: c.f, ClockSkew: c.skew}, c.ok, c.want)
		})
	}
}

// TestAcksHistoryAgainstFinal: each operation of the history against the
// final state of its job.
func TestAcksHistoryAgainstFinal(t *testing.T) {
	s1 := step{ack("j", 1, "src-0", "s1", true), 0, 10}
	e1 := done(1, "src-0", "s1")
	await := func(epoch uint64, completed bool) history.Op {
		return history.Op{Kind: history.KindAwait, Job: "j", Epoch: epoch, Completed: completed, Client: 4}
	}
	state := func(s string) func(*EpochFinal) {
		return func(e *EpochFinal) {
			e.State = s
			if s != "completed" {
				e.Tasks = nil
			}
		}
	}
	hashed := func(o history.Op, h string) history.Op {
		o.Hash = h
		return o
	}
	for _, c := range []struct {
		name string
		ops  []history.Op
		f    *Final
		ok   bool
		want string
	}{
		{"begun epoch forgotten", steps(s1, step{begin("j", 2, 1), 20, 30}), oneJob(1, e1), false, "epoch 2 was begun"},
		{"begun epoch remembered", steps(s1, step{begin("j", 2, 1), 20, 30}), oneJob(1, e1, EpochFinal{Epoch: 2, Generation: 1, State: "pending", Expected: 1}), true, ""},
		{"awaited completion, then aborted", steps(s1, step{await(2, true), 20, 30}), oneJob(1, e1, EpochFinal{Epoch: 2, Generation: 1, State: "aborted", Expected: 1}), false, "was seen completed"},
		{"awaited completion, then subsumed", steps(s1, step{await(1, true), 20, 30}), oneJob(1, e1.with(state("subsumed"))), true, ""},
		{"awaited completion, completed", steps(s1, step{await(1, true), 20, 30}), oneJob(1, e1), true, ""},
		{"await that did not see completion, aborted", steps(s1, step{await(2, false), 20, 30}), oneJob(1, e1, EpochFinal{Epoch: 2, Generation: 1, State: "aborted", Expected: 1}), true, ""},
		{"awaited completion of a forgotten epoch", steps(step{await(1, true), 20, 30}), oneJob(1), true, ""},
		{"ack of unknown outcome not held", steps(s1, step{outcome(ack("j", 2, "src-0", "s2", false), history.Unknown), 20, 30}),
			oneJob(1, e1, EpochFinal{Epoch: 2, Generation: 1, State: "pending", Expected: 1}), true, ""},
		{"ok ack of a forgotten epoch", steps(s1, step{ack("j", 2, "src-0", "s2", false), 20, 30}), oneJob(1, e1), false, "does not remember the epoch"},
		{"ok ack whose answer gave no hash", steps(step{hashed(s1.op, ""), 0, 10}), oneJob(1, e1.with(func(e *EpochFinal) { e.Acks = map[string]AckRecord{"src-0": {Hash: "h1"}} })), true, ""},
		{"completing ack, then subsumed", steps(s1), oneJob(1, e1.with(state("subsumed"))), true, ""},
		{"completing ack, then pending", steps(s1), oneJob(1, e1.with(state("pending"))), false, "lost completion"},
		{"checkpoint lacks an acknowledged task", steps(s1), oneJob(1, e1.with(func(e *EpochFinal) { e.Tasks = map[string]TaskCheckpoint{} })), false, "lacks task src-0"},
		{"pending epoch holds acknowledged manifests", steps(s1, step{withManifest(ack("j", 2, "agg-0", "a2", false), "k1"), 20, 30}),
			oneJob(1, e1, EpochFinal{Epoch: 2, Generation: 1, State: "pending", Expected: 2, Acked: 1,
				Tasks: map[string]TaskCheckpoint{"agg-0": {HasManifest: true, Keys: []string{"k1"}}}, Acks: map[string]AckRecord{"agg-0": {}}}), true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkAcks(t, &Input{Ops: c.ops, Final: c.f}, c.ok, c.want)
		})
	}
}

// TestAcksCheckpointManifests: a completed checkpoint holds the manifest
// its ok ack sent, and no manifest no ack of the epoch sent.
func TestAcksCheckpointManifests(t *testing.T) {
	a := step{withManifest(ack("j", 1, "agg-0", "a1", true), "k1", "k2"), 0, 10}
	holding := func(keys ...string) *Final {
		e := done(1, "agg-0", "a1")
		e.Tasks = map[string]TaskCheckpoint{"agg-0": {Value: "a1", HasManifest: true, Keys: keys}}
		return oneJob(1, e)
	}
	checkAcks(t, &Input{Ops: steps(a), Final: holding("k2", "k1")}, true, "")
	checkAcks(t, &Input{Ops: steps(a), Final: holding("k1", "k3")}, false, "holds a manifest of 2 blobs no ack of that epoch sent")
	checkAcks(t, &Input{Ops: steps(a), Final: holding("k1", "k3")}, false, "but one of 2 blobs was acknowledged")
	// The checkpoint holds the manifest of the ack of unknown outcome
	// that followed (sent, so not a value never written), not the one
	// acknowledged ok: the ok ack's manifest is lost.
	u := step{outcome(withManifest(ack("j", 1, "agg-0", "a1", false), "k1"), history.Unknown), 20, 30}
	checkAcks(t, &Input{Ops: steps(a, u), Final: holding("k1")}, false, "but one of 2 blobs was acknowledged")
}

// TestAcksJobsApart: the operations of one job are checked against that
// job's final state only.
func TestAcksJobsApart(t *testing.T) {
	k := ack("k", 1, "src-0", "k1", true)
	ops := steps(step{ack("j", 1, "src-0", "s1", true), 0, 10}, step{k, 0, 10})
	f := oneJob(1, done(1, "src-0", "s1"))
	f.Jobs["k"] = &JobFinal{Generation: 1, Epochs: []EpochFinal{done(1, "src-0", "k1")}}
	checkAcks(t, &Input{Ops: ops, Final: f}, true, "")
}
