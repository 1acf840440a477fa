package fsm_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// Tests of the audit of the epoch lifecycle (epochs.go, cmd_epochs.go).

// TestAuditAckRetentionEndsEpochsOldestFirst: epochs subsumed together
// (retention lowered by the config) end oldest first, so the history
// forgets the oldest first.
func TestAuditAckRetentionEndsEpochsOldestFirst(t *testing.T) {
	h := newHarness(t)
	a := task(t, "a", "input")
	h.putJob("j", wire.JobConfig{Retained: 3, History: 5})
	h.start("j", "a1", a)
	for n := uint64(1); n <= 3; n++ {
		h.complete("j", 1, n, a)
	}
	h.putJob("j", wire.JobConfig{Retained: 1, History: 5})
	if j := h.job("j"); !slices.Equal(j.Retained, []uint64{3}) || !slices.Equal(j.Ended, []uint64{1, 2}) {
		t.Fatalf("after retained=1: retained %v ended %v, want [3] and [1 2]", j.Retained, j.Ended)
	}
	h.putJob("j", wire.JobConfig{Retained: 1, History: 1})
	if _, _, err := h.f.Epoch("j", 1); !isRule(err, wire.ErrNotFound) {
		t.Fatalf("epoch 1, the oldest ended, still remembered: %v", err)
	}
	if e := h.epoch("j", 2); e.State != wire.EpochSubsumed {
		t.Fatalf("epoch 2: %+v", e.Epoch)
	}
}

// TestAuditAckPrunedAttemptTakesItsTasks: pruning an attempt deletes its
// task set with it.
func TestAuditAckPrunedAttemptTakesItsTasks(t *testing.T) {
	h := newHarness(t)
	h.putJob("p", wire.JobConfig{Retained: 1})
	for gen := uint64(1); gen <= 2; gen++ {
		a, b := task(t, "a", "input"), task(t, fmt.Sprintf("b%d", gen), "output")
		h.start("p", fmt.Sprintf("att-%d", gen), a, b)
		h.complete("p", gen, gen, a, b)
	}
	// Task keys are job, generation and task: a generation's prefix is
	// the one of an epoch of the same number.
	d := h.dump()
	if n := keysWithPrefix(d, "tasks", fsm.EpochKeyPrefix("p", 1)); n != 0 {
		t.Fatalf("pruned generation 1 keeps %d tasks", n)
	}
	if n := keysWithPrefix(d, "tasks", fsm.EpochKeyPrefix("p", 2)); n != 2 {
		t.Fatalf("generation 2 has %d tasks, want 2", n)
	}
}

// TestAuditAckTimeoutAtTheDeadline: the deadline itself has passed, as
// ExpiredEpochs lists it: a timeout stamped at it aborts the epoch.
func TestAuditAckTimeoutAtTheDeadline(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{AckTimeout: fsm.Duration(30 * time.Second)})
	h.start("j", "a1", task(t, "a", "state"))
	h.begin("j", 1, 1)
	h.now = t0.Add(30 * time.Second)
	ref := fsm.EpochRef{Job: "j", Epoch: 1}
	if exp, _ := h.f.ExpiredEpochs(h.now, 10); !slices.Equal(exp, []fsm.EpochRef{ref}) {
		t.Fatalf("expired at the deadline: %v", exp)
	}
	if got := h.timeout(ref); !slices.Equal(got, []fsm.EpochRef{ref}) {
		t.Fatalf("timeout at the deadline aborted %v", got)
	}
	if e := h.epoch("j", 1); e.State != wire.EpochAborted {
		t.Fatalf("epoch 1: %+v", e.Epoch)
	}
}

// TestAuditAckManifestRetryAndConflict: the same manifest ack again is a
// retry that changes nothing (no reference taken twice), even after its
// epoch completed; another manifest with the same payloads is a conflict.
func TestAuditAckManifestRetryAndConflict(t *testing.T) {
	h := oneIncrementalTask(t, "r", 2, "r/t/a")
	h.begin("r", 1, 1)
	ack := auditAck("r", 1, 1, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "r/t/a", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("r/t/a", 0, 1)}}})
	ack.Payloads = map[fsm.Kind][]byte{wire.KindState: []byte("s")}
	first := mustOK(t, h.mustApply(fsm.CmdTaskAck, ack)).(*wire.AckResult)
	if !first.Completed {
		t.Fatalf("ack of the only task: %+v", first)
	}
	before := h.hash()
	h.advance(time.Second)
	again := mustOK(t, h.mustApply(fsm.CmdTaskAck, ack)).(*wire.AckResult)
	if again.Completed || again.Ack.Index != first.Ack.Index || again.Ack.ContentHash != first.Ack.ContentHash || h.hash() != before {
		t.Fatalf("retried manifest ack: %+v (state changed: %v)", again.Ack, h.hash() != before)
	}
	other := ack
	m := *ack.Manifest
	m.Delta = &manifests.Delta{AddSegments: []manifests.Segment{auditSeg("r/t/a", 0, 2)}}
	other.Manifest = &m
	h.reject(wire.ErrConflict, fsm.CmdTaskAck, other)
	if refs, _ := fsm.BlobRefs(h.f); refs["r/t/a"] != 1 {
		t.Fatalf("references of r/t/a: %d, want 1", refs["r/t/a"])
	}
	h.fsck()
}

// TestAuditAckPinnedEpochNotCountedInRetention: a pinned epoch newer than
// unpinned ones does not take a place of the retained count.
func TestAuditAckPinnedEpochNotCountedInRetention(t *testing.T) {
	h := newHarness(t)
	a := task(t, "a", "input")
	h.putJob("j", wire.JobConfig{Retained: 2})
	h.start("j", "a1", a)
	h.complete("j", 1, 1, a)
	h.complete("j", 1, 2, a)
	h.pin("j", 2, "sp")
	h.complete("j", 1, 3, a)
	if j := h.job("j"); !slices.Equal(j.Retained, []uint64{1, 2, 3}) || len(j.Ended) != 0 {
		t.Fatalf("retained %v ended %v, want [1 2 3] and none", j.Retained, j.Ended)
	}
	h.complete("j", 1, 4, a)
	if j := h.job("j"); !slices.Equal(j.Retained, []uint64{2, 3, 4}) || !slices.Equal(j.Ended, []uint64{1}) {
		t.Fatalf("retained %v ended %v, want [2 3 4] and [1]", j.Retained, j.Ended)
	}
}
