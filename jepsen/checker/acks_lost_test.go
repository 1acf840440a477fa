package checker

import (
	"testing"

	"github.com/metastore/metastore/jepsen/history"
)

// TestAcksLostManifestOfCheckpoint: an ok ack sent a state manifest of two
// blobs and completed its epoch; at the end the completed checkpoint of
// that task holds the acked payload but no state manifest at all (the
// restore of the epoch returned none). The acked manifest is lost: Acks
// promises "if that epoch is a retained or pinned checkpoint the store
// holds exactly the acked payload and manifest".
func TestAcksLostManifestOfCheckpoint(t *testing.T) {
	b := newHB()
	a := ack("j", 1, "agg-0", "a1", true)
	a.HasManifest, a.Keys = true, []string{"k1", "k2"}
	b.add(a, 0, 10)
	f := &Final{Jobs: map[string]*JobFinal{"j": {Generation: 1, LatestCompleted: 1, Epochs: []EpochFinal{{
		Epoch: 1, Generation: 1, State: "completed", Expected: 1, Acked: 1,
		Tasks: map[string]TaskCheckpoint{"agg-0": {Value: "a1"}}, // no manifest
		Acks:  map[string]AckRecord{"agg-0": {}},
	}}}}}
	if v := Acks(&Input{Ops: b.ops, Final: f}); v.OK {
		t.Fatalf("a checkpoint that lost its acked manifest accepted: %s", v.Summary)
	}
}

// TestAcksReadOfLostPayload: a linearizable read of the source task saw
// epoch 3 with an empty input payload, where the ok ack of epoch 3 sent
// "v3". A read records the payload whenever it records the epoch, so the
// empty payload is one no ack sent.
func TestAcksReadOfLostPayload(t *testing.T) {
	b := newHB()
	b.add(ack("j", 3, "src-0", "v3", true), 0, 10)
	b.add(history.Op{Kind: history.KindRead, Job: "j", Task: "src-0", ReadEpoch: 3, Value: "", Client: 2}, 20, 30)
	if v := Acks(&Input{Ops: b.ops}); v.OK {
		t.Fatalf("a read of epoch 3 without its acked payload accepted: %s", v.Summary)
	}
}
