package checker

import (
	"testing"

	"github.com/metastore/metastore/jepsen/history"
)

// TestStaleRestoreOfStateTask: epoch 2 of job j was completed (an ok ack
// answered completed_by_this_ack) and, after that answer, a worker's
// restore of the latest checkpoint of state task agg-0 returned epoch 1:
// the worker would resume from a superseded checkpoint, which is the stale
// read that the linearizability check exists to catch. Restores are
// linearizable reads of the latest checkpoint as much as the readers' are
// (the same restore route, GET .../tasks/{task}/restore), but linOps feeds
// porcupine only KindRead ops (reads of the source task), and Acks checks
// only that a restore's value was sent in the epoch it names. The same
// observation recorded as a read is reported (control). Fails today.
func TestStaleRestoreOfStateTask(t *testing.T) {
	build := func(kind history.Kind, task string) []history.Op {
		b := newHB()
		b.add(ack("j", 1, task, "e1", true), 0, 10)
		b.add(ack("j", 2, task, "e2", true), 20, 30)
		b.add(history.Op{Kind: kind, Job: "j", Task: task, ReadEpoch: 1, Value: "e1", Client: 2, Member: "n1"}, 40, 50)
		return b.ops
	}
	if v := Linearizable(&Input{Ops: build(history.KindRead, "src-0")}); v.OK {
		t.Fatalf("control: a stale read accepted: %s", v.Summary)
	}
	ops := build(history.KindRestore, "agg-0")
	in := &Input{Ops: ops}
	if Linearizable(in).OK && Acks(in).OK {
		t.Fatalf("a restore invoked after epoch 2 was acknowledged complete returned epoch 1, and linearizable and acks passed")
	}
}

// TestRestoresThatAreNotStale: restores the linearizable check must accept:
// one of a named epoch (RestoreOptions.Epoch: a retained checkpoint, not
// the latest), one concurrent with the completion that may see either
// epoch, one that failed, and one of the latest epoch.
func TestRestoresThatAreNotStale(t *testing.T) {
	b := newHB()
	b.add(ack("j", 1, "agg-0", "e1", true), 0, 10)
	b.add(ack("j", 2, "agg-0", "e2", true), 20, 30)
	b.add(history.Op{Kind: history.KindRestore, Job: "j", Task: "agg-0", Epoch: 1, ReadEpoch: 1, Value: "e1", Client: 2}, 40, 50)
	b.add(history.Op{Kind: history.KindRestore, Job: "j", Task: "agg-0", ReadEpoch: 1, Value: "e1", Client: 3}, 15, 25)
	b.add(history.Op{Kind: history.KindRestore, Job: "j", Task: "agg-0", ReadEpoch: 1, Value: "e1", Client: 4, Outcome: history.Fail, Code: "error"}, 40, 50)
	b.add(history.Op{Kind: history.KindRestore, Job: "j", Task: "agg-1", ReadEpoch: 2, Client: 5}, 40, 50)
	if v := Linearizable(&Input{Ops: b.ops}); !v.OK {
		t.Fatalf("restores that are not stale refused: %s", v.Summary)
	}
}
