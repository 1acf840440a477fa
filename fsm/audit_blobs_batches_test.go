package fsm_test

import (
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// Audit of upload batches (upload_batches.go).

// TestAuditBatchRetryIsTheSameRequest: a request naming a batch id in use
// is a retry only when it is the same request; the same id, count, task
// and lease for another job, or for another attempt of the job, is a
// conflict that writes nothing (its keys would be the first request's
// intents, or none).
func TestAuditBatchRetryIsTheSameRequest(t *testing.T) {
	h := newBatchHarness(t)
	h.putJob("v", wire.JobConfig{Retained: 1})
	h.start("v", "b1", task(t, "t", "state", "incremental"))
	lease := h.now.Add(time.Hour)
	first := fsm.IntentCreate{Job: "u", Generation: 1, Task: "t", Batch: testBatch, Count: 2, LeaseUntil: lease}
	mustOK(t, h.mustApply(fsm.CmdIntentCreate, first))
	mustOK(t, h.mustApply(fsm.CmdIntentCreate, first)) // the retry

	otherJob := first
	otherJob.Job = "v"
	if re := h.reject(wire.ErrConflict, fsm.CmdIntentCreate, otherJob); re.Field != "batch" {
		t.Fatalf("job v naming u's batch: %v", re)
	}
	h.start("u", "a2", task(t, "t", "state", "incremental"))
	otherAttempt := first
	otherAttempt.Generation = 2
	if re := h.reject(wire.ErrConflict, fsm.CmdIntentCreate, otherAttempt); re.Field != "batch" {
		t.Fatalf("attempt 2 naming attempt 1's batch: %v", re)
	}
	checkUsage(t, h.f, "after the refusals", "u", "v")
	if u := h.f.JobUsage("v"); u.Intents != 0 {
		t.Fatalf("v's usage %+v, want none", u)
	}
}
