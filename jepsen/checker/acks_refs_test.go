package checker

import (
	"testing"

	"github.com/metastore/metastore/jepsen/history"
	"github.com/metastore/metastore/manifests"
)

// refsOf is the whole manifest of one segment of key at offset.
func refsOf(key string, offset uint64) []string {
	return history.ManifestRefs(manifests.Manifest{Segments: []manifests.Segment{{Key: key, Offset: offset, Length: 10, FirstSeq: 1, LastSeq: 1, CRC32C: "0000abcd"}}})
}

// TestAcksManifestsComparedWhole: a manifest that holds the acked blobs
// but another range of them is not the acked state. Each place that
// compares an acked manifest with the store's fails on a range moved (the
// checkpoint, a pending epoch, a restore, two reads of one manifest), and
// passes on the same ranges or when either side did not record them.
func TestAcksManifestsComparedWhole(t *testing.T) {
	acked := func(b *hb, epoch uint64, refs []string, completed bool) {
		a := ack("j", epoch, "agg-0", "a1", completed)
		a.HasManifest, a.Keys, a.Refs = true, []string{"k1"}, refs
		b.add(a, 0, 10)
	}
	final := func(state string, refs []string) *Final {
		return &Final{Jobs: map[string]*JobFinal{"j": {Generation: 1, LatestCompleted: 1, Epochs: []EpochFinal{{
			Epoch: 1, Generation: 1, State: state, Expected: 1, Acked: 1,
			Tasks: map[string]TaskCheckpoint{"agg-0": {Value: "a1", HasManifest: true, Keys: []string{"k1"}, Refs: refs}},
			Acks:  map[string]AckRecord{"agg-0": {}},
		}}}}}
	}
	for _, tc := range []struct {
		name        string
		ack, stored []string
		ok          bool
	}{
		{"same ranges", refsOf("k1", 0), refsOf("k1", 0), true},
		{"range moved", refsOf("k1", 0), refsOf("k1", 64), false},
		{"not recorded by the ack", nil, refsOf("k1", 64), true},
		{"not recorded by the store's side", refsOf("k1", 0), nil, true},
	} {
		for _, state := range []string{"completed", "pending"} {
			b := newHB()
			acked(b, 1, tc.ack, state == "completed")
			f := final(state, tc.stored)
			if state == "pending" {
				f.Jobs["j"].LatestCompleted = 0
				f.Jobs["j"].Epochs[0].Expected = 2
			}
			if v := Acks(&Input{Ops: b.ops, Final: f}); v.OK != tc.ok {
				t.Errorf("%s, %s checkpoint: ok %v, want %v: %s %v", tc.name, state, v.OK, tc.ok, v.Summary, v.Problems)
			}
		}
		// A restore, and two reads of the completed epoch's manifest.
		b := newHB()
		acked(b, 1, tc.ack, true)
		b.add(history.Op{Kind: history.KindRestore, Job: "j", Task: "agg-0", ReadEpoch: 1, Value: "a1", HasManifest: true, Keys: []string{"k1"}, Refs: tc.stored, Client: 2}, 20, 30)
		b.add(history.Op{Kind: history.KindManifest, Job: "j", Epoch: 1, Task: "agg-0", HasManifest: true, Keys: []string{"k1"}, Refs: tc.stored, Client: 3}, 20, 30)
		if v := Acks(&Input{Ops: b.ops}); v.OK != tc.ok {
			t.Errorf("%s, restore and manifest read: ok %v, want %v: %s %v", tc.name, v.OK, tc.ok, v.Summary, v.Problems)
		}
	}
	// Two reads of one completed manifest that disagree on a range.
	b := newHB()
	acked(b, 1, nil, true)
	b.add(history.Op{Kind: history.KindManifest, Job: "j", Epoch: 1, Task: "agg-0", HasManifest: true, Keys: []string{"k1"}, Refs: refsOf("k1", 0), Client: 3}, 20, 30)
	b.add(history.Op{Kind: history.KindManifest, Job: "j", Epoch: 1, Task: "agg-0", HasManifest: true, Keys: []string{"k1"}, Refs: refsOf("k1", 64), Client: 3}, 40, 50)
	if v := Acks(&Input{Ops: b.ops}); v.OK {
		t.Errorf("two reads of one manifest with different ranges accepted: %s", v.Summary)
	}
}
