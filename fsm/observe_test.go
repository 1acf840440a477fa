package fsm_test

import (
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// An ack and the observation of its blobs applied in one transaction (a
// batch entry, or Raft handing both entries to one ApplyBatch: a follower
// batches differently from the leader) must leave the state that applying
// them one by one does. bbolt answers Get with nil for a key put with a nil
// value in the same transaction, and with an empty value afterwards: a
// queue keyed that way made members diverge.
func TestObservationBatchedWithItsAck(t *testing.T) {
	single, batched := newHarness(t), newHarness(t)
	segs := []manifests.Segment{{Key: "j/t/a", Offset: 0, Length: 10, FirstSeq: 1, LastSeq: 1}}
	ack := fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: "j/t/a", Size: 10}},
		Delta: &manifests.Delta{AddSegments: segs}}}
	obs := fsm.BlobsObserved{Blobs: []fsm.BlobObservation{{Key: "j/t/a", Size: 10, ETag: "e1"}}}
	for _, h := range []*harness{single, batched} {
		h.putJob("j", wire.JobConfig{})
		h.start("j", "a1", task(t, "t", "state", "incremental"))
		h.intents("j", 1, "j/t/a")
		h.begin("j", 1, 1)
	}
	mustOK(t, single.mustApply(fsm.CmdTaskAck, ack))
	mustOK(t, single.mustApply(fsm.CmdBlobsObserved, obs))

	entry, err := fsm.EncodeBatch(batched.now, [][]byte{batched.encode(fsm.CmdTaskAck, ack), batched.encode(fsm.CmdBlobsObserved, obs)})
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := batched.f.Apply(batched.nextLog(entry)).(*fsm.Result); !ok || res.Err != nil {
		t.Fatalf("batch entry: %+v", res)
	}
	if b, _, err := batched.f.Blob("j/t/a"); err != nil || b.Observed == nil || b.Observed.ETag != "e1" {
		t.Fatalf("blob observed in the ack's batch: %+v %v", b, err)
	}
	// The same state, but for the Raft indexes records carry.
	if d := diffDumps(withoutIndexes(single.dump()), withoutIndexes(batched.dump())); d != "" {
		t.Fatalf("state after the entries one by one vs after one batch entry:\n%s", d)
	}
}

// threeBlobsAwaitingObservation is a state whose one ack committed
// three 10-byte blobs (j/t/a, j/t/b, j/t/c), none observed yet.
func threeBlobsAwaitingObservation(t *testing.T) (*harness, []string) {
	t.Helper()
	h := newHarness(t)
	keys := []string{"j/t/a", "j/t/b", "j/t/c"}
	h.putJob("j", wire.JobConfig{})
	h.start("j", "a1", task(t, "t", "state", "incremental"))
	h.intents("j", 1, keys...)
	h.begin("j", 1, 1)
	var segs []manifests.Segment
	var blobs []fsm.BlobCommit
	for i, k := range keys {
		segs = append(segs, manifests.Segment{Key: k, Offset: 0, Length: 10, FirstSeq: uint64(i + 1), LastSeq: uint64(i + 1)})
		blobs = append(blobs, fsm.BlobCommit{Key: k, Size: 10})
	}
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "t",
		Manifest: &fsm.ManifestAck{Blobs: blobs, Delta: &manifests.Delta{AddSegments: segs}}}))
	return h, keys
}

// TestObservationOfObservedBlobKeepsOthers: an observation of a blob no
// longer waiting to be observed (observed already, or a key without a
// record) changes nothing: the blobs still waiting, those whose keys sort
// right after it included, stay in the queue, unobserved.
func TestObservationOfObservedBlobKeepsOthers(t *testing.T) {
	h, keys := threeBlobsAwaitingObservation(t)
	observe := func(key string) {
		t.Helper()
		mustOK(t, h.mustApply(fsm.CmdBlobsObserved, fsm.BlobsObserved{Blobs: []fsm.BlobObservation{{Key: key, Size: 10, ETag: "e-" + key}}}))
	}
	observe("j/t/a")
	observe("j/t/a")     // again: b, right after it, waits on
	observe("j/t/a0")    // no record, sorts before b
	observe("j/t/bzzzz") // no record, sorts before c
	got, err := h.f.Unobserved(10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "j/t/b" || got[1] != "j/t/c" {
		t.Fatalf("unobserved after observing a (twice) and two unknown keys: %v, want [j/t/b j/t/c]", got)
	}
	for _, k := range keys[1:] {
		if b, _, err := h.f.Blob(k); err != nil || b.Observed != nil {
			t.Fatalf("%s: observed %+v (%v) by an observation of another key", k, b, err)
		}
	}
}
