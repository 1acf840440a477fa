package fsm_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

const testBatch = "00000000000000010123456789abcdef"

// batchAck acknowledges epoch of task t of job u (generation gen),
// committing keys with one segment each.
func batchAck(h *harness, gen, epoch uint64, seq uint64, keys ...string) *fsm.Result {
	h.t.Helper()
	var d manifests.Delta
	var blobs []fsm.BlobCommit
	for i, k := range keys {
		blobs = append(blobs, fsm.BlobCommit{Key: k, Size: 100})
		s := seq + uint64(i)
		d.AddSegments = append(d.AddSegments, manifests.Segment{Key: k, Offset: 0, Length: 100, FirstSeq: s, LastSeq: s})
	}
	ack := fsm.TaskAck{Job: "u", Generation: gen, Epoch: epoch, Task: "t", Manifest: &fsm.ManifestAck{Blobs: blobs, Delta: &d}}
	return h.mustApply(fsm.CmdTaskAck, ack)
}

func blobState(h *harness, key string) wire.BlobState {
	h.t.Helper()
	b, _, err := h.f.Blob(key)
	if err != nil {
		var re *wire.RuleError
		if errors.As(err, &re) && re.Code == wire.CodeNotFound {
			return ""
		}
		h.t.Fatal(err)
	}
	return b.State
}

func newBatchHarness(t *testing.T) *harness {
	h := newHarness(t)
	h.putJob("u", wire.JobConfig{Retained: 1})
	h.start("u", "a1", task(t, "t", "state", "incremental"))
	return h
}

// TestUploadBatchKeysAreIntents: an upload batch (intent-create version 4)
// makes its keys intents without a record each: an ack commits them, the
// others stay intents, the orphan sweep's Known sees all of them, the
// usage counts them, and fsck finds the state consistent.
func TestUploadBatchKeysAreIntents(t *testing.T) {
	h := newBatchHarness(t)
	keys := h.batch("u", 1, "t", testBatch, 3)
	if want := "u/t/" + testBatch + "00000002"; keys[2] != want {
		t.Fatalf("key 2 is %q, want %q", keys[2], want)
	}
	for _, k := range keys {
		if s := blobState(h, k); s != wire.BlobIntent {
			t.Fatalf("%s is %q before any ack, want intent", k, s)
		}
	}
	if u := h.f.JobUsage("u"); u.Intents != 3 {
		t.Fatalf("usage %+v, want 3 intents", u)
	}
	checkUsage(t, h.f, "after the batch", "u")

	h.begin("u", 1, 1)
	mustOK(t, batchAck(h, 1, 1, 1, keys[0], keys[1]))
	if s := blobState(h, keys[0]); s != wire.BlobLive {
		t.Fatalf("%s is %q after its ack, want live", keys[0], s)
	}
	if s := blobState(h, keys[2]); s != wire.BlobIntent {
		t.Fatalf("%s is %q, want still an intent", keys[2], s)
	}
	if u := h.f.JobUsage("u"); u.Intents != 1 || u.LiveBlobs != 2 {
		t.Fatalf("usage %+v, want 1 intent and 2 live blobs", u)
	}
	checkUsage(t, h.f, "after the ack", "u")

	// A retried ack commits nothing twice; the next epoch references the
	// committed keys and commits the third.
	mustOK(t, batchAck(h, 1, 1, 1, keys[0], keys[1]))
	h.begin("u", 1, 2)
	mustOK(t, batchAck(h, 1, 2, 3, keys[2]))
	if s := blobState(h, keys[2]); s != wire.BlobLive {
		t.Fatalf("%s is %q after its ack, want live", keys[2], s)
	}

	other := "u/t/" + "00000000000000010123456789abcdee" + "00000000"
	known, err := h.f.Known(append(slices.Clone(keys), other, "u/t/"+testBatch+"00000003"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !known[k] {
			t.Errorf("Known(%s) = false for a key of the batch", k)
		}
	}
	if known[other] || known["u/t/"+testBatch+"00000003"] {
		t.Errorf("Known answers true for keys no batch holds: %v", known)
	}
	h.fsck()
}

// TestUploadBatchUnusedKeyKnown: an uploaded object under a key of a live
// batch that no ack committed yet is known to the orphan sweep, which
// therefore never deletes an upload whose commit may still come.
func TestUploadBatchUnusedKeyKnown(t *testing.T) {
	h := newBatchHarness(t)
	keys := h.batch("u", 1, "t", testBatch, 2)
	known, err := h.f.Known(keys)
	if err != nil {
		t.Fatal(err)
	}
	if !known[keys[0]] || !known[keys[1]] {
		t.Fatalf("Known(%v) = %v: an upload to a live batch would be swept as an orphan", keys, known)
	}
	// The batch's name under another task's or job's directory is not a key
	// of the batch.
	for _, k := range []string{"u/s/" + testBatch + "00000000", "v/t/" + testBatch + "00000001"} {
		if recorded(h, k) || blobState(h, k) != "" {
			t.Errorf("%s, not a key of the batch, reads as one (%q)", k, blobState(h, k))
		}
	}
}

// TestUploadBatchExpires: when the lease ends, the collector's
// intents-expire names the batch's first key (its lease entry); the
// unused keys become expired records, GC candidates, and can no longer
// be committed; the committed one stays live.
func TestUploadBatchExpires(t *testing.T) {
	h := newBatchHarness(t)
	keys := h.batch("u", 1, "t", testBatch, 3)
	h.begin("u", 1, 1)
	mustOK(t, batchAck(h, 1, 1, 1, keys[1]))

	early, err := h.f.ExpiredIntents(h.now, 100)
	if err != nil || len(early) != 0 {
		t.Fatalf("expired intents before the lease ends: %v %v", early, err)
	}
	// Proposed early (a leader whose clock is ahead), nothing expires.
	if got := mustOK(t, h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: []string{keys[0]}})).([]string); len(got) != 0 {
		t.Fatalf("expired %v before the lease ended", got)
	}
	h.advance(2 * time.Hour)
	// Only the batch's own first key names its lease entry: neither
	// another task's key of the batch's name nor another unused key of the
	// batch expires anything.
	if got := mustOK(t, h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: []string{"u/s/" + testBatch + "00000000", keys[2]}})).([]string); len(got) != 0 {
		t.Fatalf("keys that do not name the batch's lease entry expired %v", got)
	}
	due, err := h.f.ExpiredIntents(h.now, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(due, []string{keys[0]}) {
		t.Fatalf("expired intents %v, want the batch's lease entry %s", due, keys[0])
	}
	got := mustOK(t, h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: due})).([]string)
	if !slices.Equal(got, []string{keys[0], keys[2]}) {
		t.Fatalf("expired %v, want the unused keys %s and %s", got, keys[0], keys[2])
	}
	for k, want := range map[string]wire.BlobState{keys[0]: wire.BlobExpired, keys[1]: wire.BlobLive, keys[2]: wire.BlobExpired} {
		if s := blobState(h, k); s != want {
			t.Errorf("%s is %q after the lease ended, want %q", k, s, want)
		}
	}
	if due, _ := h.f.ExpiredIntents(h.now, 100); len(due) != 0 {
		t.Fatalf("lease entries %v remain after the batch expired", due)
	}
	cands, err := h.f.GCCandidates(h.now, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{keys[0], keys[2]} {
		if !slices.Contains(cands, k) {
			t.Errorf("expired key %s is not a GC candidate (%v)", k, cands)
		}
	}
	h.begin("u", 1, 2)
	mustRule(t, batchAck(h, 1, 2, 2, keys[2]), wire.ErrBlobExpired)
	if u := h.f.JobUsage("u"); u.Intents != 0 {
		t.Fatalf("usage %+v after the batch expired, want no intent", u)
	}
	checkUsage(t, h.f, "after expiry", "u")
	// A replay of the request stamped by a proposer whose clock is behind
	// the lease (the batch record is gone) finds its keys' records: refused.
	replay := fsm.IntentCreate{Job: "u", Generation: 1, Task: "t", Batch: testBatch, Count: 3, LeaseUntil: t0.Add(time.Hour)}
	h.now = t0.Add(30 * time.Minute)
	if re := h.reject(wire.ErrConflict, fsm.CmdIntentCreate, replay); re.Field != "batch" {
		t.Fatalf("replay of the expired batch: %v", re)
	}
	h.fsck()
}

// TestUploadBatchKeyNeverAnIntentAgain: a committed key of a batch whose
// blob was collected, deleted and purged while the batch's lease still
// runs cannot be committed again: it would reference a deleted object.
func TestUploadBatchKeyNeverAnIntentAgain(t *testing.T) {
	h := newBatchHarness(t)
	keys := h.batch("u", 1, "t", testBatch, 2)
	h.begin("u", 1, 1)
	mustOK(t, batchAck(h, 1, 1, 1, keys[0]))
	// Epoch 2 drops the segment: with one checkpoint retained, keys[0]
	// loses its last reference when epoch 2 completes.
	h.begin("u", 1, 2)
	drop := fsm.TaskAck{Job: "u", Generation: 1, Epoch: 2, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: keys[1], Size: 100}},
		Delta: &manifests.Delta{
			DropSegments: []manifests.Ref{{Key: keys[0], Offset: 0}},
			AddSegments:  []manifests.Segment{{Key: keys[1], Offset: 0, Length: 100, FirstSeq: 2, LastSeq: 2}},
		}}}
	mustOK(t, h.mustApply(fsm.CmdTaskAck, drop))
	cands, err := h.f.GCCandidates(h.now, 100)
	if err != nil || !slices.Contains(cands, keys[0]) {
		t.Fatalf("candidates %v %v, want %s", cands, err, keys[0])
	}
	// Not before the grace has passed since its last reference went.
	if early := mustOK(t, h.mustApply(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: []string{keys[0]}, Grace: fsm.Duration(time.Minute)})).([]string); len(early) != 0 {
		t.Fatalf("marked %v within the grace", early)
	}
	marked := mustOK(t, h.mustApply(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: []string{keys[0]}})).([]string)
	if !slices.Equal(marked, []string{keys[0]}) {
		t.Fatalf("marked %v", marked)
	}
	// A blob deleting, or gone, is not marked again; only a blob deleting
	// goes, and only a gone one is purged.
	if again := mustOK(t, h.mustApply(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: marked})).([]string); len(again) != 0 {
		t.Fatalf("marked %v again while deleting", again)
	}
	if purged := mustOK(t, h.mustApply(fsm.CmdBlobsPurge, fsm.BlobKeys{Keys: append(slices.Clone(marked), keys[1])})).([]string); len(purged) != 0 {
		t.Fatalf("purged %v, neither gone", purged)
	}
	if gone := mustOK(t, h.mustApply(fsm.CmdBlobsGone, fsm.BlobKeys{Keys: []string{keys[1]}})).([]string); len(gone) != 0 || blobState(h, keys[1]) != wire.BlobLive {
		t.Fatalf("blobs-gone of live %s answered %v (now %q)", keys[1], gone, blobState(h, keys[1]))
	}
	mustOK(t, h.mustApply(fsm.CmdBlobsGone, fsm.BlobKeys{Keys: marked}))
	if again := mustOK(t, h.mustApply(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: marked})).([]string); len(again) != 0 {
		t.Fatalf("marked %v again once gone", again)
	}
	h.advance(30 * time.Minute) // the lease (an hour) still runs
	mustOK(t, h.mustApply(fsm.CmdBlobsPurge, fsm.BlobKeys{Keys: marked}))
	if s := blobState(h, keys[0]); s != "" {
		t.Fatalf("%s is %q after the purge, want no record", keys[0], s)
	}
	h.begin("u", 1, 3)
	mustRule(t, batchAck(h, 1, 3, 3, keys[0]), wire.ErrBlobUnknown)
	known, err := h.f.Known([]string{keys[0]})
	if err != nil || known[keys[0]] {
		t.Fatalf("Known(%s) = %v %v after its purge", keys[0], known, err)
	}
	h.fsck()
}

// TestUploadBatchFencedAndRetried: a batch of an attempt cannot be
// committed by the next one; the same request applied twice records one
// batch; another request with its id is refused; a version-3 command
// cannot carry a batch.
func TestUploadBatchFencedAndRetried(t *testing.T) {
	h := newBatchHarness(t)
	keys := h.batch("u", 1, "t", testBatch, 2)
	again := h.batch("u", 1, "t", testBatch, 2)
	if !slices.Equal(keys, again) {
		t.Fatalf("a retried request answered %v, then %v", keys, again)
	}
	if u := h.f.JobUsage("u"); u.Intents != 2 {
		t.Fatalf("usage %+v after a retried request, want 2 intents", u)
	}
	h.reject(wire.ErrConflict, fsm.CmdIntentCreate, fsm.IntentCreate{Job: "u", Generation: 1, Task: "t", Batch: testBatch, Count: 3, LeaseUntil: h.now.Add(time.Hour)})
	h.reject(wire.ErrInvalid, fsm.CmdIntentCreate, fsm.IntentCreate{Job: "u", Generation: 1, Task: "t", Batch: "0000000000000002aaaaaaaaaaaaaaaa", Count: 1, LeaseUntil: h.now})

	h.start("u", "a2", task(t, "t", "state", "incremental"))
	h.begin("u", 2, 1)
	mustRule(t, batchAck(h, 2, 1, 1, keys[0]), wire.ErrFenced)

	// Version 3 names keys; a batch in it is refused.
	data, err := fsm.EncodeVersion(fsm.CmdIntentCreate, 3, h.now,
		fsm.IntentCreate{Job: "u", Generation: 2, Task: "t", Batch: "0000000000000003aaaaaaaaaaaaaaaa", Count: 1, LeaseUntil: h.now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	v3, ok := h.f.Apply(h.nextLog(data)).(*fsm.Result)
	if !ok {
		t.Fatalf("apply: %v", v3)
	}
	mustRule(t, v3, wire.ErrInvalid)
}

// TestUploadBatchExpiresWithItsJob: deleting a job ends its batches: the
// unused keys become expired candidates at once.
func TestUploadBatchExpiresWithItsJob(t *testing.T) {
	h := newBatchHarness(t)
	keys := h.batch("u", 1, "t", testBatch, 2)
	res := mustOK(t, h.mustApply(fsm.CmdJobDelete, fsm.JobDelete{Job: "u"})).(*wire.JobDeletion)
	if res.IntentsExpired != 2 {
		t.Fatalf("job delete expired %d intents, want the batch's 2", res.IntentsExpired)
	}
	for _, k := range keys {
		if s := blobState(h, k); s != wire.BlobExpired {
			t.Errorf("%s is %q after its job was deleted, want expired", k, s)
		}
	}
	h.fsck()
}

// TestIntentKeysInUse: an intent-create naming its keys answers a retried
// request (the same job and lease, each key still an intent) with the
// intents it recorded and changes nothing; a key in use otherwise is
// refused: another job's intent, an intent of another lease, an intent
// that expired. Intents-expire ends an intent once its lease has ended by
// the proposer's clock, and a repeated one changes nothing.
func TestIntentKeysInUse(t *testing.T) {
	h := newBatchHarness(t)
	h.putJob("v", wire.JobConfig{Retained: 1})
	h.start("v", "b1", task(t, "t", "state"))
	lease := h.now.Add(time.Hour)
	create := func(job string, lease time.Time, keys ...string) fsm.IntentCreate {
		return fsm.IntentCreate{Job: job, Generation: 1, Task: "t", Keys: keys, LeaseUntil: lease}
	}
	mustOK(t, h.mustApply(fsm.CmdIntentCreate, create("u", lease, "u/t/a", "u/t/b")))
	before := h.hash()
	mustOK(t, h.mustApply(fsm.CmdIntentCreate, create("u", lease, "u/t/a", "u/t/b")))
	if h.hash() != before {
		t.Fatal("a retried intent-create changed the state")
	}
	for _, tc := range []struct {
		what string
		p    fsm.IntentCreate
	}{
		{"another job's intent", create("v", lease, "u/t/a")},
		{"an intent of another lease", create("u", lease.Add(time.Second), "u/t/b")},
	} {
		if re := h.reject(wire.ErrConflict, fsm.CmdIntentCreate, tc.p); re.Field != "keys" {
			t.Errorf("%s: refused naming %q, want keys", tc.what, re.Field)
		}
	}
	// Intents expire when their lease ends by the proposer's clock, once.
	if got := mustOK(t, h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: []string{"u/t/a"}})).([]string); len(got) != 0 {
		t.Fatalf("expired %v before the lease ended", got)
	}
	h.advance(2 * time.Hour)
	if got := mustOK(t, h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: []string{"u/t/a"}})).([]string); !slices.Equal(got, []string{"u/t/a"}) {
		t.Fatalf("expired %v, want u/t/a", got)
	}
	before = h.hash()
	if got := mustOK(t, h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: []string{"u/t/a"}})).([]string); len(got) != 0 || h.hash() != before {
		t.Fatalf("a repeated intents-expire expired %v again (state changed: %v)", got, h.hash() != before)
	}
	if re := h.reject(wire.ErrConflict, fsm.CmdIntentCreate, create("u", lease, "u/t/a")); re.Field != "keys" {
		t.Errorf("an expired intent: refused naming %q, want keys", re.Field)
	}
}
