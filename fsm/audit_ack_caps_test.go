package fsm_test

import (
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestAuditAckManifestFormFollowsIncrementalFlag: a task with the
// incremental capability sends deltas, one without it whole manifests;
// the other form is refused, naming it, and writes nothing.
func TestAuditAckManifestFormFollowsIncrementalFlag(t *testing.T) {
	h := newHarness(t)
	h.putJob("f", wire.JobConfig{Retained: 2})
	h.start("f", "a1", task(t, "inc", "state", "incremental"), task(t, "whole", "state"))
	h.intents("f", 1, "f/inc/a", "f/whole/a", "f/whole/b")
	h.begin("f", 1, 1)
	ack := func(tk string, m *fsm.ManifestAck) fsm.TaskAck {
		return fsm.TaskAck{Job: "f", Generation: 1, Epoch: 1, Task: tk, Manifest: m}
	}
	seg := func(key string) manifests.Segment { return auditSeg(key, 0, 1) }
	commit := func(key string) []fsm.BlobCommit { return []fsm.BlobCommit{{Key: key, Size: 10}} }
	if re := h.reject(wire.ErrInvalid, fsm.CmdTaskAck, ack("whole", &fsm.ManifestAck{Blobs: commit("f/whole/a"),
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg("f/whole/a")}}})); re.Field != "manifest.delta" {
		t.Errorf("delta of a task without the incremental flag: %v", re)
	}
	if re := h.reject(wire.ErrInvalid, fsm.CmdTaskAck, ack("inc", &fsm.ManifestAck{Blobs: commit("f/inc/a"),
		Full: &manifests.Manifest{Segments: []manifests.Segment{seg("f/inc/a")}}})); re.Field != "manifest.full" {
		t.Errorf("full manifest of a task with the incremental flag: %v", re)
	}
	mustOK(t, h.mustApply(fsm.CmdTaskAck, ack("whole", &fsm.ManifestAck{Blobs: commit("f/whole/a"),
		Full: &manifests.Manifest{Segments: []manifests.Segment{seg("f/whole/a")}}})))
	mustOK(t, h.mustApply(fsm.CmdTaskAck, ack("inc", &fsm.ManifestAck{Blobs: commit("f/inc/a"),
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg("f/inc/a")}}})))
	h.checkManifest("f", 1, "whole", manifests.Manifest{Segments: []manifests.Segment{seg("f/whole/a")}})
	h.checkManifest("f", 1, "inc", manifests.Manifest{Segments: []manifests.Segment{seg("f/inc/a")}})

	// Later whole manifests are taken as the change from the one before.
	b := auditSeg("f/whole/b", 0, 2)
	for n, m := range [][]manifests.Segment{{seg("f/whole/a"), b}, {b}} {
		epoch := uint64(n + 2)
		h.begin("f", 1, epoch)
		full := fsm.ManifestAck{Full: &manifests.Manifest{Segments: m}}
		if epoch == 2 {
			full.Blobs = commit("f/whole/b")
		}
		mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "f", Generation: 1, Epoch: epoch, Task: "whole", Manifest: &full}))
		h.ack("f", 1, epoch, "inc", nil)
		h.checkManifest("f", epoch, "whole", manifests.Manifest{Segments: m})
	}
	if refs, _ := fsm.BlobRefs(h.f); refs["f/whole/a"] != 1 || refs["f/whole/b"] != 1 {
		t.Fatalf("references %v: want one on f/whole/a (held by epoch 2) and f/whole/b", refs)
	}
	h.fsck()
}

// TestAuditAckBaseOnlyOnFirstAck: a later ack of an attempt that names a
// base is refused, even the base its first ack named.
func TestAuditAckBaseOnlyOnFirstAck(t *testing.T) {
	h := oneIncrementalTask(t, "o", 2, "o/t/a", "o/t/b")
	h.begin("o", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("o", 1, 1, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "o/t/a", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("o/t/a", 0, 1)}}})))
	h.start("o", "a2", task(t, "t", "state", "incremental"))
	base := &fsm.BaseRef{Job: "o", Task: "t", Epoch: 1}
	h.begin("o", 2, 2)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("o", 2, 2, &fsm.ManifestAck{Base: base})))
	h.begin("o", 2, 3)
	if re := h.reject(wire.ErrConflict, fsm.CmdTaskAck, auditAck("o", 2, 3, &fsm.ManifestAck{Base: base, Blobs: []fsm.BlobCommit{{Key: "o/t/b", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("o/t/b", 0, 2)}}})); re.Field != "manifest.base" {
		t.Errorf("a base on a later ack: %v", re)
	}
}
