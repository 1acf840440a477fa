package fsm_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// Audit of the consistency checks of the derived state in memory
// (quota.go, unobserved.go).

// fsckProblems flushes and returns fsck's problems.
func fsckProblems(t *testing.T, h *harness) []string {
	t.Helper()
	if err := h.f.Flush(); err != nil {
		t.Fatal(err)
	}
	rep, err := h.f.Fsck()
	if err != nil {
		t.Fatal(err)
	}
	return rep.Problems
}

func hasProblem(problems []string, want string) bool {
	for _, p := range problems {
		if strings.Contains(p, want) {
			return true
		}
	}
	return false
}

// TestAuditFsckComparesUsageValues: a job's usage counted in memory that
// differs from the blob table in its bytes alone is reported.
func TestAuditFsckComparesUsageValues(t *testing.T) {
	h := newBatchHarness(t)
	h.intents("u", 1, "u/t/a")
	h.begin("u", 1, 1)
	mustOK(t, batchAck(h, 1, 1, 1, "u/t/a"))
	if p := fsckProblems(t, h); len(p) != 0 {
		t.Fatalf("fsck problems before the change: %q", p)
	}
	err := fsm.RawUpdate(h.f, func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("blobs"))
		js, err := fsm.RecordJSON("blobs", b.Get([]byte("u/t/a")))
		if err != nil {
			return err
		}
		var rec map[string]any
		if err := json.Unmarshal(js, &rec); err != nil {
			return err
		}
		rec["size"] = 101
		js, _ = json.Marshal(rec)
		raw, err := fsm.StoredRecord("blobs", js)
		if err != nil {
			return err
		}
		return b.Put([]byte("u/t/a"), raw)
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := fsckProblems(t, h); !hasProblem(p, `job "u": usage counted in memory`) {
		t.Fatalf("fsck problems %q, want the usage of job u", p)
	}
}

// TestAuditFsckReportsAwaitingNotLive: a blob that awaits observation but
// is not live is reported as such.
func TestAuditFsckReportsAwaitingNotLive(t *testing.T) {
	h := newBatchHarness(t)
	h.intents("u", 1, "u/t/a")
	h.advance(2 * time.Hour)
	mustOK(t, h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: []string{"u/t/a"}}))
	if err := h.f.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := fsm.MarkAwaiting(h.f, "u/t/a", true); err != nil {
		t.Fatal(err)
	}
	if p := fsckProblems(t, h); !hasProblem(p, `blob "u/t/a" is expired and awaits observation`) {
		t.Fatalf("fsck problems %q, want the expired blob awaiting observation", p)
	}
}

// TestAuditBatchWithABadBitmapIsCorrupt: an upload batch whose bitmap
// does not have a bit per key is corrupt: reading one of its keys is an
// error, not an intent.
func TestAuditBatchWithABadBitmapIsCorrupt(t *testing.T) {
	h := newBatchHarness(t)
	keys := h.batch("u", 1, "t", testBatch, 3)
	if err := h.f.Flush(); err != nil {
		t.Fatal(err)
	}
	err := fsm.RawUpdate(h.f, func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("upload_batches"))
		js, err := fsm.RecordJSON("upload_batches", b.Get([]byte(testBatch)))
		if err != nil {
			return err
		}
		var rec map[string]any
		if err := json.Unmarshal(js, &rec); err != nil {
			return err
		}
		rec["used"] = []byte{0, 0}
		js, _ = json.Marshal(rec)
		raw, err := fsm.StoredRecord("upload_batches", js)
		if err != nil {
			return err
		}
		return b.Put([]byte(testBatch), raw)
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, _, err := h.f.Blob(keys[0]); err == nil || isRule(err, wire.ErrNotFound) {
		t.Fatalf("a key of a batch with a bad bitmap reads as %+v (%v), want a corrupt-state error", b, err)
	}
}
