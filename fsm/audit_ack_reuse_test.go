package fsm_test

import (
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestAuditAckDropAndAddOfOneReferenceRefused: a delta that drops a
// segment and adds one at the same reference would overwrite the record
// the checkpoint before holds: refused, whether the ack continues the
// attempt's manifest or rolls a new attempt back onto its checkpoint, and
// the checkpoint's manifest stays.
func TestAuditAckDropAndAddOfOneReferenceRefused(t *testing.T) {
	h := oneIncrementalTask(t, "r", 2, "r/t/a")
	a := auditSeg("r/t/a", 0, 1)
	again := auditSeg("r/t/a", 0, 2)
	h.begin("r", 1, 1)
	first := mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("r", 1, 1, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "r/t/a", Size: 20}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{a}}}))).(*wire.AckResult)
	swap := &manifests.Delta{DropSegments: []manifests.Ref{a.ID()}, AddSegments: []manifests.Segment{again}}

	h.begin("r", 1, 2)
	h.reject(wire.ErrManifestMismatch, fsm.CmdTaskAck, auditAck("r", 1, 2, &fsm.ManifestAck{Delta: swap}))

	// A new attempt restores epoch 1: its first ack rolls the task's
	// lineage back onto it, without a copy.
	h.start("r", "a2", task(t, "t", "state", "incremental"))
	h.begin("r", 2, 3)
	base := &fsm.BaseRef{Job: "r", Task: "t", Epoch: 1}
	h.reject(wire.ErrManifestMismatch, fsm.CmdTaskAck, auditAck("r", 2, 3, &fsm.ManifestAck{Base: base, Delta: swap}))
	res := mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("r", 2, 3, &fsm.ManifestAck{Base: base,
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("r/t/a", 10, 2)}}}))).(*wire.AckResult)
	if res.Ack.Lineage != first.Ack.Lineage {
		t.Errorf("the ack restoring the task's own latest checkpoint made lineage %d, want %d continued", res.Ack.Lineage, first.Ack.Lineage)
	}
	h.checkManifest("r", 1, "t", manifests.Manifest{Segments: []manifests.Segment{a}})
	h.fsck()
}
