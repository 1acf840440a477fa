package fsm_test

import (
	"slices"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// Audit of the upload intents (blobs.go, upload_batches.go): the edges of
// their rules that the other tests leave open.

// applyVersion applies a command of an earlier payload version, as an
// older leader wrote it, and returns its result.
func (h *harness) applyVersion(typ fsm.CommandType, version uint8, payload any) *fsm.Result {
	h.t.Helper()
	data, err := fsm.EncodeVersion(typ, version, h.now, payload)
	if err != nil {
		h.t.Fatalf("encode %s version %d: %v", typ, version, err)
	}
	res, ok := h.f.Apply(h.nextLog(data)).(*fsm.Result)
	if !ok || res.Index != h.index {
		h.t.Fatalf("apply %s version %d: no result of index %d", typ, version, h.index)
	}
	return res
}

// TestAuditIntentGenerationFromVersion2: an intent-create of version 2
// records its attempt's generation, so an ack of a later attempt cannot
// commit its key (fenced, nothing written); one of version 1 records
// none, and the later attempt commits its key, as it did when the entry
// was written.
func TestAuditIntentGenerationFromVersion2(t *testing.T) {
	h := newBatchHarness(t)
	for v, key := range map[uint8]string{1: "u/t/v1", 2: "u/t/v2"} {
		mustOK(t, h.applyVersion(fsm.CmdIntentCreate, v, fsm.IntentCreate{Job: "u", Generation: 1, Keys: []string{key}, LeaseUntil: h.now.Add(time.Hour)}))
	}
	h.start("u", "a2", task(t, "t", "state", "incremental"))
	h.begin("u", 2, 1)
	before := h.hash()
	mustRule(t, batchAck(h, 2, 1, 1, "u/t/v2"), wire.ErrFenced)
	if h.hash() != before {
		t.Fatal("a fenced commit of a version-2 intent changed the state")
	}
	if s := blobState(h, "u/t/v2"); s != wire.BlobIntent {
		t.Fatalf("u/t/v2 is %q after the fenced ack, want intent", s)
	}
	mustOK(t, batchAck(h, 2, 1, 1, "u/t/v1"))
	if s := blobState(h, "u/t/v1"); s != wire.BlobLive {
		t.Fatalf("u/t/v1 is %q after its ack, want live", s)
	}
	h.fsck()
}

// TestAuditBatchExpiresAtItsLeaseEnd: an upload batch expires when the
// entry's time reaches its lease end, not a nanosecond before, as a
// single intent does.
func TestAuditBatchExpiresAtItsLeaseEnd(t *testing.T) {
	h := newBatchHarness(t)
	keys := h.batch("u", 1, "t", testBatch, 2)
	expire := func() []string {
		t.Helper()
		return mustOK(t, h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: keys[:1]})).([]string)
	}
	h.advance(time.Hour - time.Nanosecond)
	if got := expire(); len(got) != 0 {
		t.Fatalf("expired %v a nanosecond before the lease ended", got)
	}
	h.advance(time.Nanosecond)
	if got := expire(); !slices.Equal(got, keys) {
		t.Fatalf("expired %v when the lease ended, want %v", got, keys)
	}
	if u := h.f.JobUsage("u"); u.Intents != 0 {
		t.Fatalf("usage %+v after the batch expired, want no intent", u)
	}
	h.fsck()
}

// TestAuditExpiredIntentsUnreferencedSinceLeaseEnd: an intent expired by
// an entry later than its lease end (the collector runs late) is
// unreferenced since its lease end, a batch's unused keys as a single
// intent: the GC grace runs from the lease's end for both.
func TestAuditExpiredIntentsUnreferencedSinceLeaseEnd(t *testing.T) {
	h := newBatchHarness(t)
	lease := h.now.Add(time.Hour)
	keys := h.batch("u", 1, "t", testBatch, 2)
	h.intents("u", 1, "u/t/single")
	h.advance(3 * time.Hour)
	got := mustOK(t, h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: []string{keys[0], "u/t/single"}})).([]string)
	want := append(slices.Clone(keys), "u/t/single")
	if !slices.Equal(got, want) {
		t.Fatalf("expired %v, want %v", got, want)
	}
	for _, k := range want {
		b, _, err := h.f.Blob(k)
		if err != nil {
			t.Fatal(err)
		}
		if b.State != wire.BlobExpired || b.UnreferencedAt == nil || !b.UnreferencedAt.Equal(lease) {
			t.Errorf("%s: %s, unreferenced since %v, want expired since the lease end %v", k, b.State, b.UnreferencedAt, lease)
		}
	}
	cands, err := h.f.GCCandidates(lease, 10)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(cands)
	if !slices.Equal(cands, want) {
		t.Fatalf("GC candidates unreferenced by the lease end: %v, want %v", cands, want)
	}
	h.fsck()
}
