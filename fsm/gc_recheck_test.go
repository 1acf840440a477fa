package fsm_test

import (
	"slices"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// The collector's commands re-check each key against the state as of
// their entry (blobs.go): the collector's list of candidates may be stale,
// or proposed by a leader whose clock is ahead, and only what the entry
// returns is deleted from the object store.

// gcScene runs job "g" (one checkpoint retained) for two epochs: the second
// materializes, so the first epoch's log blob (returned) loses its last
// reference at the harness's clock when the second completes.
func gcScene(t *testing.T) (h *harness, w *worker, old string) {
	t.Helper()
	h = newHarness(t)
	h.putJob("g", wire.JobConfig{Retained: 1})
	h.start("g", "a1", task(t, "t", "state", "incremental"))
	w = &worker{job: "g", task: "t", gen: 1, acked: map[uint64]manifests.Manifest{}}
	h.begin("g", 1, 1)
	w.step(h, 1, false)
	h.begin("g", 1, 2)
	w.step(h, 2, true)
	old = "g/t/log-1-1"
	if s := blobState(h, old); s != wire.BlobLive {
		t.Fatalf("%s is %q, want live", old, s)
	}
	if b, _, _ := h.f.Blob(old); b.Refs != 0 {
		t.Fatalf("%s has %d references, want none", old, b.Refs)
	}
	return h, w, old
}

// markKeys applies blobs-deleting with grace and returns the keys marked.
func (h *harness) markKeys(grace time.Duration, keys ...string) []string {
	h.t.Helper()
	return mustOK(h.t, h.mustApply(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: keys, Grace: fsm.Duration(grace)})).([]string)
}

// TestBlobsDeletingRechecksGrace: blobs-deleting marks a blob only once it
// has been unreferenced for the grace the command carries, by the entry's
// time; a candidate proposed early (a leader whose clock is ahead, or a
// blob unreferenced again since it was listed) is left alone.
func TestBlobsDeletingRechecksGrace(t *testing.T) {
	const grace = 10 * time.Minute
	h, _, old := gcScene(t)
	h.advance(grace - time.Nanosecond)
	if got := h.markKeys(grace, old); len(got) != 0 {
		t.Fatalf("marked %v one nanosecond before the grace ended", got)
	}
	if s := blobState(h, old); s != wire.BlobLive {
		t.Fatalf("%s is %q after an early mark, want live", old, s)
	}
	h.advance(time.Nanosecond)
	if got := h.markKeys(grace, old); !slices.Equal(got, []string{old}) {
		t.Fatalf("marked %v when the grace ended, want %s", got, old)
	}
	h.fsck()
}

// TestBlobsDeletingRechecksState: blobs-deleting marks only live or
// expired blobs; a key proposed again (by a stale list, or a second
// leader) that is already deleting or gone, an intent whose lease runs,
// or a referenced blob, is not marked and keeps its state.
func TestBlobsDeletingRechecksState(t *testing.T) {
	h, _, old := gcScene(t)
	h.intents("g", 1, "g/t/open")
	h.advance(time.Hour)
	referenced := "g/t/log-1-2"
	if got := h.markKeys(0, old, "g/t/open", referenced); !slices.Equal(got, []string{old}) {
		t.Fatalf("marked %v, want only %s", got, old)
	}
	if got := h.markKeys(0, old); len(got) != 0 {
		t.Fatalf("marked %v again while it is deleting", got)
	}
	gone := mustOK(t, h.mustApply(fsm.CmdBlobsGone, fsm.BlobKeys{Keys: []string{old}})).([]string)
	if !slices.Equal(gone, []string{old}) {
		t.Fatalf("gone %v, want %s", gone, old)
	}
	if got := h.markKeys(0, old); len(got) != 0 {
		t.Fatalf("marked %v again after it was gone", got)
	}
	for k, want := range map[string]wire.BlobState{old: wire.BlobGone, "g/t/open": wire.BlobIntent, referenced: wire.BlobLive} {
		if s := blobState(h, k); s != want {
			t.Errorf("%s is %q, want %q", k, s, want)
		}
	}
	if d, err := h.f.Deleting(10); err != nil || len(d) != 0 {
		t.Fatalf("deleting %v %v, want none", d, err)
	}
	h.fsck()
}

// TestBlobsGoneAndPurgeRecheckState: blobs-gone records only blobs marked
// deleting (a stale or wrong key list cannot make a live blob, referenced
// or not, or an intent read as deleted), and blobs-purge forgets only gone
// ones (a deleting blob's delete is still to be done or confirmed).
func TestBlobsGoneAndPurgeRecheckState(t *testing.T) {
	h, _, old := gcScene(t)
	h.intents("g", 1, "g/t/open")
	h.advance(time.Hour)
	referenced := "g/t/log-1-2"
	if got := mustOK(t, h.mustApply(fsm.CmdBlobsGone, fsm.BlobKeys{Keys: []string{old, referenced, "g/t/open"}})).([]string); len(got) != 0 {
		t.Fatalf("gone %v, none of them marked deleting", got)
	}
	if got := h.markKeys(0, old); !slices.Equal(got, []string{old}) {
		t.Fatalf("marked %v, want %s", got, old)
	}
	h.advance(48 * time.Hour)
	if got := mustOK(t, h.mustApply(fsm.CmdBlobsPurge, fsm.BlobKeys{Keys: []string{old, referenced, "g/t/open"}})).([]string); len(got) != 0 {
		t.Fatalf("purged %v, none of them gone", got)
	}
	for k, want := range map[string]wire.BlobState{old: wire.BlobDeleting, "g/t/open": wire.BlobIntent, referenced: wire.BlobLive} {
		if s := blobState(h, k); s != want {
			t.Errorf("%s is %q, want %q", k, s, want)
		}
	}
	if d, err := h.f.Deleting(10); err != nil || !slices.Equal(d, []string{old}) {
		t.Fatalf("deleting %v %v, want %s", d, err, old)
	}
	h.fsck()
}

// TestIntentsExpireRechecks: intents-expire ends an intent only once its
// lease is over by the entry's time (a leader whose clock is ahead
// proposes early), and only an intent: a key proposed again after it
// expired, or once it is deleting, keeps its state.
func TestIntentsExpireRechecks(t *testing.T) {
	h, _, _ := gcScene(t)
	h.intents("g", 1, "g/t/open")
	expire := func() []string {
		t.Helper()
		return mustOK(t, h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: []string{"g/t/open"}})).([]string)
	}
	h.advance(time.Hour - time.Nanosecond)
	if got := expire(); len(got) != 0 {
		t.Fatalf("expired %v before the lease ended", got)
	}
	if s := blobState(h, "g/t/open"); s != wire.BlobIntent {
		t.Fatalf("g/t/open is %q before its lease ended, want intent", s)
	}
	h.advance(time.Nanosecond)
	if got := expire(); !slices.Equal(got, []string{"g/t/open"}) {
		t.Fatalf("expired %v when the lease ended, want g/t/open", got)
	}
	if got := expire(); len(got) != 0 {
		t.Fatalf("expired %v again", got)
	}
	if got := h.markKeys(0, "g/t/open"); !slices.Equal(got, []string{"g/t/open"}) {
		t.Fatalf("marked %v, want g/t/open", got)
	}
	if got := expire(); len(got) != 0 {
		t.Fatalf("expired %v while it is deleting", got)
	}
	if s := blobState(h, "g/t/open"); s != wire.BlobDeleting {
		t.Fatalf("g/t/open is %q, want deleting", s)
	}
	if d, err := h.f.Deleting(10); err != nil || !slices.Equal(d, []string{"g/t/open"}) {
		t.Fatalf("deleting %v %v, want g/t/open", d, err)
	}
	h.fsck()
}

// TestIntentCreateRefusesKeysInUse: an intent naming a key the store
// already knows (live and referenced, deleting, gone, or another lease's
// intent) is refused: its upload would overwrite a committed object, or
// one the collector deleted or is deleting. The same request applied twice
// is a retry.
func TestIntentCreateRefusesKeysInUse(t *testing.T) {
	h, _, old := gcScene(t)
	h.intents("g", 1, "g/t/open")
	h.intents("g", 1, "g/t/open") // a retried request: same lease
	h.advance(time.Hour + time.Minute)
	mustOK(t, h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: []string{"g/t/open"}}))
	if got := h.markKeys(0, old); !slices.Equal(got, []string{old}) {
		t.Fatalf("marked %v, want %s", got, old)
	}
	h.intents("g", 1, "g/t/other")
	for _, k := range []string{"g/t/log-1-2", old, "g/t/open", "g/t/other"} {
		h.reject(wire.ErrConflict, fsm.CmdIntentCreate, fsm.IntentCreate{Job: "g", Generation: 1, Keys: []string{k}, LeaseUntil: h.now.Add(2 * time.Hour)})
	}
	mustOK(t, h.mustApply(fsm.CmdBlobsGone, fsm.BlobKeys{Keys: []string{old}}))
	h.reject(wire.ErrConflict, fsm.CmdIntentCreate, fsm.IntentCreate{Job: "g", Generation: 1, Keys: []string{old}, LeaseUntil: h.now.Add(2 * time.Hour)})
	h.fsck()
}

// TestCommittedUnreferencedBlobIsACandidate: a blob an ack commits without
// its manifest referencing it is unreferenced from the ack on: a GC
// candidate at the ack's time, marked once the grace has passed.
func TestCommittedUnreferencedBlobIsACandidate(t *testing.T) {
	h, w, _ := gcScene(t)
	h.begin("g", 1, 3)
	h.intents("g", 1, "g/t/log-1-3", "g/t/spare")
	h.advance(time.Minute)
	acked := h.now
	seg := manifests.Segment{Key: "g/t/log-1-3", Offset: 0, Length: 100, FirstSeq: w.seq + 1, LastSeq: w.seq + 1}
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "g", Generation: 1, Epoch: 3, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: "g/t/log-1-3", Size: 100}, {Key: "g/t/spare", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg}}}}))
	b, _, err := h.f.Blob("g/t/spare")
	if err != nil || b.State != wire.BlobLive || b.Refs != 0 {
		t.Fatalf("g/t/spare: %+v %v, want live without references", b, err)
	}
	if b.UnreferencedAt == nil || !b.UnreferencedAt.Equal(acked) {
		t.Fatalf("g/t/spare unreferenced at %v, want the ack's time %s", b.UnreferencedAt, acked)
	}
	cands, err := h.f.GCCandidates(acked, 100)
	if err != nil || !slices.Contains(cands, "g/t/spare") || slices.Contains(cands, "g/t/log-1-3") {
		t.Fatalf("candidates %v %v, want g/t/spare and not g/t/log-1-3", cands, err)
	}
	h.advance(10 * time.Minute)
	if got := h.markKeys(10*time.Minute, "g/t/spare", "g/t/log-1-3"); !slices.Equal(got, []string{"g/t/spare"}) {
		t.Fatalf("marked %v, want g/t/spare", got)
	}
	h.fsck()
}

// TestDetachedLineageReleasedWithItsLastEpoch: after an attempt-start of
// version 2 (an entry of an earlier release: it does not release the
// heads), the new attempt's first ack starts a fresh manifest and detaches
// the old lineage, which keeps the references of its live epoch only until
// that epoch is subsumed; then the lineage goes and its blobs are
// candidates.
func TestDetachedLineageReleasedWithItsLastEpoch(t *testing.T) {
	h, _, _ := gcScene(t)
	old := []string{"g/t/base-1-2", "g/t/log-1-2"}
	data, err := fsm.EncodeVersion(fsm.CmdAttemptStart, 2, h.now, fsm.AttemptStart{Job: "g", AttemptID: "a2", Tasks: []wire.Task{task(t, "t", "state", "incremental")}})
	if err != nil {
		t.Fatal(err)
	}
	if res := h.f.Apply(h.nextLog(data)).(*fsm.Result); res.Err != nil {
		t.Fatalf("attempt-start version 2: %v", res.Err)
	}
	refs, _, err := h.f.ReferencedBlobs("g")
	if err != nil {
		t.Fatal(err)
	}
	if got := refKeys(refs); !slices.Equal(got, old) {
		t.Fatalf("referenced %v before the new attempt acked, want %v", got, old)
	}
	h.begin("g", 2, 3)
	h.intents("g", 2, "g/t/fresh-3")
	seg := manifests.Segment{Key: "g/t/fresh-3", Offset: 0, Length: 100, FirstSeq: 1, LastSeq: 1}
	res := mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "g", Generation: 2, Epoch: 3, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: "g/t/fresh-3", Size: 100}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg}}}})).(*wire.AckResult)
	if !res.Completed {
		t.Fatal("epoch 3 did not complete")
	}
	if refs, _, err = h.f.ReferencedBlobs("g"); err != nil {
		t.Fatal(err)
	}
	if got := refKeys(refs); !slices.Equal(got, []string{"g/t/fresh-3"}) {
		t.Fatalf("referenced %v, want only the fresh manifest's blob", got)
	}
	cands, err := h.f.GCCandidates(h.now, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range old {
		b, _, err := h.f.Blob(k)
		if err != nil || b.Refs != 0 || !slices.Contains(cands, k) {
			t.Errorf("%s: %+v %v, candidates %v: want it unreferenced and a candidate once the detached lineage's last epoch is subsumed", k, b, err, cands)
		}
	}
	h.fsck()
}
