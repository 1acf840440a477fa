package checker

import (
	"strings"
	"testing"

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

func (e EpochFinal) with(f func(*EpochFinal)) EpochFinal {
	f(&e)
	return e
}
