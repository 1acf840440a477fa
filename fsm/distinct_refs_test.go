package fsm_test

import (
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestAckKeepsBaseAndSegmentApart: from task-ack version 4, an ack whose
// manifest change leaves a base and a segment at one reference (a
// manifest Validate refuses whole) is refused with manifest_mismatch and
// writes nothing: a segment at a present base, and a materialization's
// base at a segment it keeps. An entry of version 3 is replayed as it was
// applied: accepted, the manifest it leaves read back as stored.
func TestAckKeepsBaseAndSegmentApart(t *testing.T) {
	h := oneIncrementalTask(t, "d", 1, "d/t/base", "d/t/log")
	base := manifests.Base{Key: "d/t/base", Offset: 0, Length: 10}
	logSeg := manifests.Segment{Key: "d/t/log", Offset: 0, Length: 10, FirstSeq: 1, LastSeq: 1}
	ack := func(epoch uint64, d manifests.Delta, blobs ...fsm.BlobCommit) fsm.TaskAck {
		return fsm.TaskAck{Job: "d", Generation: 1, Epoch: epoch, Task: "t", Manifest: &fsm.ManifestAck{Blobs: blobs, Delta: &d}}
	}
	h.begin("d", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, ack(1, manifests.Delta{
		Materialize: &manifests.Materialization{Bases: []manifests.Base{base}},
		AddSegments: []manifests.Segment{logSeg},
	}, fsm.BlobCommit{Key: "d/t/base", Size: 10}, fsm.BlobCommit{Key: "d/t/log", Size: 10})))

	h.begin("d", 1, 2)
	atBase := ack(2, manifests.Delta{AddSegments: []manifests.Segment{{Key: "d/t/base", Offset: 0, Length: 5, FirstSeq: 2, LastSeq: 2}}})
	h.reject(wire.ErrManifestMismatch, fsm.CmdTaskAck, atBase)
	h.reject(wire.ErrManifestMismatch, fsm.CmdTaskAck, ack(2, manifests.Delta{
		Materialize: &manifests.Materialization{Bases: []manifests.Base{{Key: "d/t/log", Offset: 0, Length: 10}}},
	}))

	data, err := fsm.EncodeVersion(fsm.CmdTaskAck, 3, h.now, atBase)
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, h.f.Apply(h.nextLog(data)).(*fsm.Result))
	m, _, err := h.f.Manifest("d", 2, "t")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Bases) != 1 || m.Bases[0].ID() != base.ID() || len(m.Segments) != 2 {
		t.Fatalf("manifest after the version-3 ack: %+v, want the base and both segments", m)
	}
	h.fsck()
}
