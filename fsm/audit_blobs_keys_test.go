package fsm_test

import (
	"strings"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// Audit of the keys that read as intents without a record (upload
// batches, signed slots): only the keys the batch or the signature made
// do, under the job and task they were made for.

// TestAuditBatchKeysOutsideTheBatch: a key of a batch's name that the
// batch did not make (an index at or past its count, another task's or
// another job's directory) is no intent: unknown to the orphan sweep and
// the blob view, and an ack committing it is refused without a write.
func TestAuditBatchKeysOutsideTheBatch(t *testing.T) {
	h := newBatchHarness(t)
	h.putJob("v", wire.JobConfig{Retained: 1})
	h.start("v", "b1", task(t, "t", "state", "incremental"))
	keys := h.batch("u", 1, "t", testBatch, 3)
	h.begin("u", 1, 1)
	// Another job's key is refused as foreign (crossjob.go) before its
	// commit is checked.
	outside := map[string]error{
		"u/t/" + testBatch + "00000003": wire.ErrBlobUnknown, // past the count
		"u/t/" + testBatch + "00000007": wire.ErrBlobUnknown, // past the count, in the bitmap's byte
		"u/s/" + testBatch + "00000000": wire.ErrBlobUnknown, // another task's directory
		"v/t/" + testBatch + "00000000": wire.ErrNotFound,    // another job's directory
	}
	for k, refusal := range outside {
		if recorded(h, k) {
			t.Errorf("%s reads as known to the orphan sweep", k)
		}
		if s := blobState(h, k); s != "" {
			t.Errorf("%s reads as %q, want unknown", k, s)
		}
		before := h.hash()
		mustRule(t, batchAck(h, 1, 1, 1, k), refusal)
		if h.hash() != before {
			t.Fatalf("a refused commit of %s changed the state", k)
		}
	}
	// The batch's own keys are untouched: each still commits once.
	mustOK(t, batchAck(h, 1, 1, 1, keys...))
	h.fsck()
}

// TestAuditSignedSlotOtherJobDirectory: a signed slot of job u moved
// under job v's directory does not verify (the MAC covers the job): it
// reads as unknown, and v cannot commit it.
func TestAuditSignedSlotOtherJobDirectory(t *testing.T) {
	h := newSlotHarness(t)
	h.putJob("v", wire.JobConfig{Retained: 1})
	h.start("v", "b1", task(t, "t", "state", "incremental"))
	h.begin("v", 1, 1)
	k := h.signed(1, 1)[0]
	moved := "v/" + strings.TrimPrefix(k, "u/")
	if s := blobState(h, moved); s != "" {
		t.Fatalf("%s, a slot of job u under v's directory, reads as %q", moved, s)
	}
	ack := fsm.TaskAck{Job: "v", Generation: 1, Epoch: 1, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: moved, Size: 100}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: moved, Length: 100, FirstSeq: 1, LastSeq: 1}}}}}
	h.reject(wire.ErrBlobUnknown, fsm.CmdTaskAck, ack)
}

// TestAuditBlobStatsCountBatchIntents: the blob statistics count the
// unused keys of an upload batch as intents (they have no record), and
// its committed key as live only.
func TestAuditBlobStatsCountBatchIntents(t *testing.T) {
	h := newBatchHarness(t)
	keys := h.batch("u", 1, "t", testBatch, 3)
	h.begin("u", 1, 1)
	mustOK(t, batchAck(h, 1, 1, 1, keys[1]))
	s, _, err := h.f.BlobStats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Count[wire.BlobIntent] != 2 || s.Count[wire.BlobLive] != 1 || s.LiveByJob["u"].Count != 1 || s.LiveByJob["u"].Bytes != 100 {
		t.Fatalf("blob stats %+v, want 2 intents and 1 live blob of 100 bytes", s)
	}
}
