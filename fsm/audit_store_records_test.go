package fsm_test

import (
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// TestAuditPendingListNamesACompletedEpoch: a job whose pending list names
// an epoch that is not pending is a corrupt state; a command that ends the
// job's pending epochs stops on it (a fatal error: the member stops rather
// than abort a completed checkpoint and diverge).
func TestAuditPendingListNamesACompletedEpoch(t *testing.T) {
	h := newHarness(t)
	src := task(t, "src", "input")
	h.putJob("j", wire.JobConfig{})
	h.start("j", "a1", src)
	h.complete("j", 1, 1, src)
	if err := h.f.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := fsm.RawUpdate(h.f, func(tx *bolt.Tx) error {
		return editRecord(tx, "jobs", "j", func(m map[string]any) { m["pending"] = []uint64{1} })
	}); err != nil {
		t.Fatal(err)
	}
	tr, err := fsm.TryApply(h.f, h.encode(fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: "a2", Tasks: []wire.Task{src}}))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Err == nil || !strings.Contains(tr.Err.Error(), "lists epoch 1 as pending but it is not") {
		t.Fatalf("attempt start over a corrupt pending list: result %+v, error %v; want a fatal error naming the epoch", tr.Result, tr.Err)
	}
}
