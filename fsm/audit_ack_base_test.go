package fsm_test

import (
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestAuditAckBaseMustHoldAManifest: the base of a first ack is a
// completed checkpoint holding a manifest of the named task: a subsumed
// or aborted epoch is refused, and so is a checkpoint where the task
// acked without a manifest; the refusals write nothing.
func TestAuditAckBaseMustHoldAManifest(t *testing.T) {
	h := newHarness(t)
	h.putJob("b", wire.JobConfig{Retained: 1})
	st, in := task(t, "t", "state", "incremental"), task(t, "s", "state")
	h.start("b", "a1", st, in)
	h.intents("b", 1, "b/t/a", "b/t/b")
	for i, key := range []string{"b/t/a", "b/t/b"} {
		n := uint64(i + 1)
		h.begin("b", 1, n)
		delta := &manifests.Delta{AddSegments: []manifests.Segment{auditSeg(key, 0, n)}}
		if n == 2 {
			delta.DropSegments = []manifests.Ref{{Key: "b/t/a"}}
		}
		mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("b", 1, n, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: key, Size: 10}}, Delta: delta})))
		// Task s has state but acks it inline, without a manifest.
		h.ack("b", 1, n, "s", map[fsm.Kind][]byte{wire.KindState: []byte("inline")})
	}
	h.begin("b", 1, 3)
	h.ack("b", 1, 3, "s", map[fsm.Kind][]byte{wire.KindState: []byte("inline")})
	h.abort("b", 1, 3, "")
	if e := h.epoch("b", 1); e.State != wire.EpochSubsumed {
		t.Fatalf("epoch 1: %+v", e.Epoch)
	}
	h.start("b", "a2", st, in)
	h.begin("b", 2, 4)
	for _, tc := range []struct {
		base  fsm.BaseRef
		want  error
		field string
	}{
		{fsm.BaseRef{Job: "b", Task: "t", Epoch: 1}, wire.ErrEpochNotCompleted, "manifest.base.epoch"},
		{fsm.BaseRef{Job: "b", Task: "t", Epoch: 3}, wire.ErrEpochNotCompleted, "manifest.base.epoch"},
		{fsm.BaseRef{Job: "b", Task: "s", Epoch: 2}, wire.ErrNotFound, "manifest.base.task"},
	} {
		if re := h.reject(tc.want, fsm.CmdTaskAck, auditAck("b", 2, 4, &fsm.ManifestAck{Base: &tc.base})); re.Field != tc.field {
			t.Errorf("base %+v: %v, want a refusal naming %s", tc.base, re, tc.field)
		}
	}
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("b", 2, 4, &fsm.ManifestAck{Base: &fsm.BaseRef{Job: "b", Task: "t", Epoch: 2}})))
	h.checkManifest("b", 4, "t", manifests.Manifest{Segments: []manifests.Segment{auditSeg("b/t/b", 0, 2)}})
	h.fsck()
}
