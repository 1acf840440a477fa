package fsm_test

import (
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestAuditAckFreshManifestDetachesTheOld: after an attempt start of
// version 2 (which releases no lineage), the new attempt's first ack with
// a fresh manifest detaches the old one: what an aborted epoch added to it
// after its last live checkpoint dies at once, and the checkpoint keeps
// its own.
func TestAuditAckFreshManifestDetachesTheOld(t *testing.T) {
	h := newHarness(t)
	h.putJob("d", wire.JobConfig{Retained: 2})
	tasks := []wire.Task{task(t, "t", "state", "incremental"), task(t, "s", "input")}
	h.start("d", "a1", tasks...)
	h.intents("d", 1, "d/t/a", "d/t/b")
	for i, key := range []string{"d/t/a", "d/t/b"} {
		n := uint64(i + 1)
		h.begin("d", 1, n)
		mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("d", 1, n, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: key, Size: 10}},
			Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg(key, 0, n)}}})))
		if n == 1 {
			h.ack("d", 1, 1, "s", payloadsFor(tasks[1], 1))
		}
	}
	data, err := fsm.EncodeVersion(fsm.CmdAttemptStart, 2, h.now, fsm.AttemptStart{Job: "d", AttemptID: "a2", Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, h.f.Apply(h.nextLog(data)).(*fsm.Result)) // aborts epoch 2
	h.intents("d", 2, "d/t/c")
	h.begin("d", 2, 3)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("d", 2, 3, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "d/t/c", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("d/t/c", 0, 1)}}})))
	if refs, _ := fsm.BlobRefs(h.f); refs["d/t/a"] != 1 || refs["d/t/b"] != 0 || refs["d/t/c"] != 1 {
		t.Fatalf("references %v: want d/t/a held by epoch 1, d/t/b (aborted epoch 2 only) released, d/t/c", refs)
	}
	h.checkManifest("d", 1, "t", manifests.Manifest{Segments: []manifests.Segment{auditSeg("d/t/a", 0, 1)}})
	h.checkManifest("d", 3, "t", manifests.Manifest{Segments: []manifests.Segment{auditSeg("d/t/c", 0, 1)}})
	h.fsck()
}
