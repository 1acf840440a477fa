package checker

import (
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/jepsen/history"
)

// Tests written in a mutation audit of linear.go: each case is the
// smallest history on which one rule of the model, or of how the history
// is turned into porcupine operations, decides the verdict.

func awaitOp(job string, epoch uint64, completed bool, client int) history.Op {
	return history.Op{Kind: history.KindAwait, Job: job, Epoch: epoch, Completed: completed, Client: client}
}

func TestLinearizableCases(t *testing.T) {
	epoch := func(e uint64, state string) EpochFinal { return EpochFinal{Epoch: e, State: state} }
	for _, c := range []struct {
		name  string
		ops   []history.Op
		final *Final
		ok    bool
	}{
		// An ack that did not report the completion may not have
		// completed the epoch (another ack is missing).
		{"epoch not completed by its ack", steps(step{ack("j", 1, "agg-0", "a1", false), 0, 10}, step{read("j", 0, 2), 20, 25}), nil, true},
		// ... unless the final state shows it completed or subsumed.
		{"ack's epoch completed at the end", steps(step{ack("j", 1, "agg-0", "a1", false), 0, 10}, step{read("j", 0, 2), 20, 25}),
			oneJob(1, epoch(1, "completed")), false},
		{"ack's epoch subsumed at the end", steps(step{ack("j", 1, "agg-0", "a1", false), 0, 10}, step{read("j", 0, 2), 20, 25}),
			oneJob(1, epoch(1, "subsumed")), false},
		{"another epoch completed at the end", steps(step{ack("j", 1, "agg-0", "a1", false), 0, 10}, step{read("j", 0, 2), 12, 15},
			step{ack("j", 2, "agg-0", "a2", true), 20, 30}, step{read("j", 2, 2), 40, 45}),
			oneJob(1, epoch(1, "aborted"), epoch(2, "completed")), true},
		// A straggling ack of an epoch below the latest completed one.
		{"ack of an older epoch after a completion", steps(step{ack("j", 2, "src-0", "s2", true), 0, 10}, step{ack("j", 1, "agg-0", "a1", false), 20, 30},
			step{read("j", 2, 2), 40, 45}), nil, true},
		// An await that saw epoch E completed, then reads of E.
		{"await of the latest epoch", steps(step{ack("j", 3, "src-0", "s3", true), 0, 5}, step{awaitOp("j", 3, true, 4), 0, 10}, step{read("j", 3, 2), 20, 25}), nil, true},
		{"await that did not see completion", steps(step{ack("j", 3, "src-0", "s3", false), 0, 5}, step{awaitOp("j", 3, false, 4), 0, 10}, step{read("j", 0, 2), 20, 25}), nil, true},
		{"failed read", steps(step{ack("j", 1, "src-0", "s1", true), 0, 10}, step{outcome(read("j", 0, 2), history.Fail), 20, 25}), nil, true},
		// Two acks of epoch 1: the other task's ack answered after the
		// completing one started and before it returned, not completing.
		{"non-completing ack inside the completing one", steps(step{ack("j", 1, "src-0", "s1", true), 20, 30}, step{ack("j", 1, "agg-0", "a1", false), 25, 28},
			step{read("j", 0, 2), 29, 29}), nil, true},
		// The completing ack's interval is the completion's: an ack of
		// unknown outcome of the same epoch does not widen it.
		{"unknown ack after the completing one", steps(step{ack("j", 1, "src-0", "s1", true), 10, 20}, step{outcome(ack("j", 1, "agg-0", "a1", false), history.Unknown), 15, 40},
			step{read("j", 0, 2), 30, 35}), nil, false},
		// A retry after an unknown outcome: the first attempt completed
		// the epoch before the retry was sent.
		{"retry of an ack of unknown outcome", steps(step{outcome(ack("j", 1, "src-0", "s1", false), history.Unknown), 0, 10}, step{read("j", 1, 2), 6, 8},
			step{ack("j", 1, "src-0", "s1", false), 12, 14}), nil, true},
		{"unknown ack, then an ok one of the same epoch", steps(step{outcome(ack("j", 1, "src-0", "s1", false), history.Unknown), 0, 10},
			step{ack("j", 1, "agg-0", "a1", false), 20, 30}, step{read("j", 0, 2), 40, 45}, step{read("j", 1, 2), 50, 55}), nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := Linearizable(&Input{Ops: c.ops, Final: c.final})
			if v.OK != c.ok {
				t.Fatalf("ok = %v, want %v: %s %v", v.OK, c.ok, v.Summary, v.Problems)
			}
		})
	}
}

// TestLinearizableExplanations: a stale read (behind a certain
// completion or an await returned before the read began) is named so; an
// illegal history without one is not called stale.
func TestLinearizableExplanations(t *testing.T) {
	b := newHB()
	b.add(awaitOp("j", 3, true, 4), 0, 10)
	b.add(ack("j", 3, "src-0", "v3", false), 0, 5)
	b.add(read("j", 0, 2), 20, 25)
	v := Linearizable(&Input{Ops: b.ops})
	if v.OK || !strings.Contains(strings.Join(v.Problems, "\n"), "stale read") {
		t.Fatalf("a read behind an awaited completion: %s %v", v.Summary, v.Problems)
	}

	ops := steps(step{ack("j", 1, "src-0", "s1", true), 0, 10},
		step{read("j", 0, 2), 5, 8},                     // concurrent with the completion
		step{read("j", 0, 3), 10, 11},                   // begun as the completion returned: concurrent too
		step{ack("j", 2, "src-0", "s2", false), 12, 15}, // may not have completed epoch 2
		step{read("j", 1, 2), 20, 25},                   // so not stale
		step{read("j", 7, 2), 30, 35})                   // never written: illegal
	v = Linearizable(&Input{Ops: ops})
	if v.OK {
		t.Fatal("a read of an epoch never acknowledged accepted")
	}
	if got := strings.Join(v.Problems, "\n"); strings.Contains(got, "stale read") || !strings.Contains(got, "no order of its operations explains every read") {
		t.Fatalf("explanation: %s", got)
	}
}

// TestLinearizableTimeoutIsFailure: porcupine giving up is no verdict of
// "linearizable". The history is illegal (a read of an epoch never
// acknowledged at the end) behind many concurrent completions of unknown
// outcome, which porcupine cannot search within a millisecond.
func TestLinearizableTimeoutIsFailure(t *testing.T) {
	b := newHB()
	for e := uint64(1); e <= 40; e++ {
		b.add(outcome(ack("j", e, "src-0", "v", false), history.Unknown), int(e), 1000+int(e))
		b.add(read("j", e, 100+int(e)), 2000+int(e), 3000)
	}
	b.add(read("j", 99, 500), 4000, 4001)
	v := Linearizable(&Input{Ops: b.ops, LinearizabilityTimeout: time.Millisecond})
	if v.OK || !strings.Contains(v.Summary, "timed out") {
		t.Fatalf("%s", v.Summary)
	}
}
