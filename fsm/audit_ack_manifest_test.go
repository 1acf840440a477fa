package fsm_test

import (
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// Tests of the audit of the ack's manifest handling (ack.go, lineage_*.go).

// auditSeg is a segment of key at offset off holding sequence number seq.
func auditSeg(key string, off, seq uint64) manifests.Segment {
	return manifests.Segment{Key: key, Offset: off, Length: 10, FirstSeq: seq, LastSeq: seq}
}

// auditAck is the ack of task t of job in generation gen and epoch.
func auditAck(job string, gen, epoch uint64, m *fsm.ManifestAck) fsm.TaskAck {
	return fsm.TaskAck{Job: job, Generation: gen, Epoch: epoch, Task: "t", Manifest: m}
}

// TestAuditAckStateTaskWithoutManifestKeepsIt: a state task that acks an
// epoch without a manifest, in the attempt that gave it one, keeps its
// manifest: the epoch holds the manifest of the ack before, and the next
// delta extends it.
func TestAuditAckStateTaskWithoutManifestKeepsIt(t *testing.T) {
	h := oneIncrementalTask(t, "k", 3, "k/t/a", "k/t/b")
	a, b := auditSeg("k/t/a", 0, 1), auditSeg("k/t/b", 0, 2)
	h.begin("k", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("k", 1, 1, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "k/t/a", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{a}}})))
	h.begin("k", 1, 2)
	res := h.ack("k", 1, 2, "t", nil)
	if res.Ack.Lineage == 0 || !res.Completed {
		t.Fatalf("ack of epoch 2 without a manifest: %+v", res.Ack)
	}
	h.checkManifest("k", 2, "t", manifests.Manifest{Segments: []manifests.Segment{a}})
	h.begin("k", 1, 3)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("k", 1, 3, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "k/t/b", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{b}}})))
	h.checkManifest("k", 3, "t", manifests.Manifest{Segments: []manifests.Segment{a, b}})
	if refs, _ := fsm.BlobRefs(h.f); refs["k/t/a"] != 1 || refs["k/t/b"] != 1 {
		t.Fatalf("references %v, want one on each blob", refs)
	}
	h.fsck()
}

// TestAuditAckAbandonedManifestOfOldAttemptStart: with an attempt started
// by a version-2 entry (which releases no lineage), the first ack of the
// new attempt without a manifest abandons the old one, so the references
// of its blobs go with its last checkpoint.
func TestAuditAckAbandonedManifestOfOldAttemptStart(t *testing.T) {
	h := oneIncrementalTask(t, "v", 1, "v/t/a")
	h.begin("v", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("v", 1, 1, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "v/t/a", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("v/t/a", 0, 1)}}})))
	data, err := fsm.EncodeVersion(fsm.CmdAttemptStart, 2, h.now, fsm.AttemptStart{Job: "v", AttemptID: "a2", Tasks: []wire.Task{task(t, "t", "state", "incremental")}})
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, h.f.Apply(h.nextLog(data)).(*fsm.Result))
	h.begin("v", 2, 2)
	if res := h.ack("v", 2, 2, "t", nil); !res.Completed || res.Ack.Lineage != 0 {
		t.Fatalf("ack of the new attempt without a manifest: %+v", res.Ack)
	}
	// Epoch 1, the last checkpoint holding the old manifest, is subsumed.
	if refs, _ := fsm.BlobRefs(h.f); refs["v/t/a"] != 0 {
		t.Fatalf("blob of the abandoned manifest keeps %d references", refs["v/t/a"])
	}
	h.fsck()
}

// TestAuditAckVersion2IsStrict: task-ack version 2 (JSON) applies the
// cross-job rules as version 3 does: another job's unpinned checkpoint is
// no base.
func TestAuditAckVersion2IsStrict(t *testing.T) {
	h := crossJobWorld(t, true)
	h.rejectVersion(wire.ErrNotFound, fsm.CmdTaskAck, 2, baseAck("jobA", fsm.BaseRef{Job: "jobB", Task: "agg-0", Epoch: 1}))
}

// TestAuditAckAbandonedManifestOfAbortedEpochs: the manifest of an
// attempt whose every checkpoint was aborted, abandoned by the first ack
// of an attempt started by a version-2 entry, goes at once with the
// references of its blobs.
func TestAuditAckAbandonedManifestOfAbortedEpochs(t *testing.T) {
	h := newHarness(t)
	h.putJob("v", wire.JobConfig{Retained: 1})
	tasks := []wire.Task{task(t, "t", "state", "incremental"), task(t, "s", "input")}
	h.start("v", "a1", tasks...)
	h.intents("v", 1, "v/t/a")
	h.begin("v", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("v", 1, 1, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "v/t/a", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("v/t/a", 0, 1)}}})))
	h.abort("v", 1, 1, "")
	if refs, _ := fsm.BlobRefs(h.f); refs["v/t/a"] != 1 {
		t.Fatalf("the task's current manifest holds %d references, want 1", refs["v/t/a"])
	}
	data, err := fsm.EncodeVersion(fsm.CmdAttemptStart, 2, h.now, fsm.AttemptStart{Job: "v", AttemptID: "a2", Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, h.f.Apply(h.nextLog(data)).(*fsm.Result))
	h.begin("v", 2, 2)
	h.ack("v", 2, 2, "t", map[fsm.Kind][]byte{wire.KindState: []byte("inline")})
	if refs, _ := fsm.BlobRefs(h.f); refs["v/t/a"] != 0 {
		t.Fatalf("blob of the abandoned manifest keeps %d references", refs["v/t/a"])
	}
	if n := len(h.dump()["lineages"]); n != 0 {
		t.Fatalf("%d lineages left, want none", n)
	}
	h.fsck()
}

// TestAuditAckSegmentDroppedTwiceRefused: a segment dropped from the
// manifest, whose record an older checkpoint still holds, cannot be
// dropped again: the ack is refused and changes nothing.
func TestAuditAckSegmentDroppedTwiceRefused(t *testing.T) {
	h := oneIncrementalTask(t, "d", 3, "d/t/a", "d/t/b")
	a, b := auditSeg("d/t/a", 0, 1), auditSeg("d/t/b", 0, 2)
	h.begin("d", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("d", 1, 1, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "d/t/a", Size: 10}, {Key: "d/t/b", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{a, b}}})))
	h.begin("d", 1, 2)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("d", 1, 2, &fsm.ManifestAck{Delta: &manifests.Delta{DropSegments: []manifests.Ref{a.ID()}}})))
	h.begin("d", 1, 3)
	h.reject(wire.ErrManifestMismatch, fsm.CmdTaskAck, auditAck("d", 1, 3, &fsm.ManifestAck{Delta: &manifests.Delta{DropSegments: []manifests.Ref{a.ID()}}}))
	h.checkManifest("d", 1, "t", manifests.Manifest{Segments: []manifests.Segment{a, b}})
	h.checkManifest("d", 2, "t", manifests.Manifest{Segments: []manifests.Segment{b}})
	h.fsck()
}

// TestAuditAckCommitRecordsTheBlob: an ack's commit records the declared
// size and checksum; only an ack of version 2 on queues the blob for the
// leader's observation.
func TestAuditAckCommitRecordsTheBlob(t *testing.T) {
	h := oneIncrementalTask(t, "c", 2, "c/t/a", "c/t/b")
	h.begin("c", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("c", 1, 1, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "c/t/a", Size: 10, Checksum: "sha256:aa"}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("c/t/a", 0, 1)}}})))
	h.begin("c", 1, 2)
	data, err := fsm.EncodeVersion(fsm.CmdTaskAck, 1, h.now, auditAck("c", 1, 2, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "c/t/b", Size: 20, Checksum: "sha256:bb"}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("c/t/b", 0, 2)}}}))
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, h.f.Apply(h.nextLog(data)).(*fsm.Result))
	for _, want := range []struct {
		key, sum string
		size     uint64
		awaiting bool
	}{{"c/t/a", "sha256:aa", 10, true}, {"c/t/b", "sha256:bb", 20, false}} {
		b, _, err := h.f.Blob(want.key)
		if err != nil {
			t.Fatal(err)
		}
		if b.State != wire.BlobLive || b.Size != want.size || b.Checksum != want.sum || b.AwaitingObservation != want.awaiting || b.Refs != 1 {
			t.Errorf("blob %s: %+v, want live, size %d, checksum %s, awaiting observation %v, one reference", want.key, b, want.size, want.sum, want.awaiting)
		}
	}
	h.fsck()
}

// TestAuditAckForkedManifestReleasedWholly: a task's manifest forked from
// another task's checkpoint, and the one it was forked from, leave
// nothing behind once no live checkpoint holds them: no lineage, record,
// change or head, and no reference.
func TestAuditAckForkedManifestReleasedWholly(t *testing.T) {
	h := newHarness(t)
	h.putJob("f", wire.JobConfig{Retained: 1})
	st, su := task(t, "t", "state", "incremental"), task(t, "u", "state", "incremental")
	h.start("f", "a1", st, su)
	h.intents("f", 1, "f/t/a", "f/u/b")
	a, b := auditSeg("f/t/a", 0, 1), auditSeg("f/u/b", 0, 2)
	h.begin("f", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, auditAck("f", 1, 1, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "f/t/a", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{a}}})))
	h.ack("f", 1, 1, "u", nil)
	h.begin("f", 1, 2)
	h.ack("f", 1, 2, "t", nil)
	fork := fsm.TaskAck{Job: "f", Generation: 1, Epoch: 2, Task: "u", Manifest: &fsm.ManifestAck{Base: &fsm.BaseRef{Job: "f", Task: "t", Epoch: 1},
		Blobs: []fsm.BlobCommit{{Key: "f/u/b", Size: 10}}, Delta: &manifests.Delta{AddSegments: []manifests.Segment{b}}}}
	if res := mustOK(t, h.mustApply(fsm.CmdTaskAck, fork)).(*wire.AckResult); !res.Completed {
		t.Fatalf("fork ack: %+v", res)
	}
	h.checkManifest("f", 2, "u", manifests.Manifest{Segments: []manifests.Segment{a, b}})
	if refs, _ := fsm.BlobRefs(h.f); refs["f/t/a"] != 2 || refs["f/u/b"] != 1 {
		t.Fatalf("references after the fork: %v", refs)
	}
	h.fsck()
	// The next attempt has no state: epoch 3 subsumes epoch 2, the last
	// checkpoint holding either manifest.
	h.start("f", "a2", task(t, "t", "input"), task(t, "u", "input"))
	h.complete("f", 2, 3, task(t, "t", "input"), task(t, "u", "input"))
	d := h.dump()
	for _, bucket := range []string{"lineages", "records", "rec_changes", "heads"} {
		if n := len(d[bucket]); n != 0 {
			t.Errorf("%s keeps %d keys: %v", bucket, n, d[bucket])
		}
	}
	if refs, _ := fsm.BlobRefs(h.f); refs["f/t/a"] != 0 || refs["f/u/b"] != 0 {
		t.Fatalf("references at the end: %v", refs)
	}
	h.fsck()
}
