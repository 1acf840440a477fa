package fsm_test

import (
	"strings"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// Audit of the cross-job rules (crossjob.go): every way an ack can name
// another job's blob is refused, by apply and by the early check alike.

// refusedAlike checks that apply refuses ack with not_found (writing
// nothing) and that the early check gives the same answer.
func refusedAlike(t *testing.T, h *harness, what string, ack fsm.TaskAck) *wire.RuleError {
	t.Helper()
	re := h.reject(wire.ErrNotFound, fsm.CmdTaskAck, ack)
	if pre := h.f.CheckCrossJob(&ack); pre == nil || pre.Error() != re.Error() {
		t.Fatalf("%s: the early check answers %v, apply %v", what, pre, re)
	}
	return re
}

// TestAuditCrossJobEveryPlaceOfAKey: job A may not name job B's blob as
// a commit alone (no segment), as a materialized base, or as a base of a
// full manifest; the answer is the one for a key of B that does not
// exist.
func TestAuditCrossJobEveryPlaceOfAKey(t *testing.T) {
	h := crossJobWorld(t, true)
	h.putJob("jobF", wire.JobConfig{Retained: 1})
	h.start("jobF", "f1", task(t, "agg-0", "state"))
	h.begin("jobF", 1, 1)
	ack := func(m *fsm.ManifestAck) fsm.TaskAck {
		return fsm.TaskAck{Job: "jobA", Generation: 1, Epoch: 1, Task: "agg-0", Manifest: m}
	}
	for _, key := range []string{"jobB/agg-0/log", "jobB/agg-0/nothing"} {
		commit := refusedAlike(t, h, "commit of "+key, ack(&fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: key, Size: 100}}, Delta: &manifests.Delta{}}))
		base := refusedAlike(t, h, "materialized base "+key, ack(&fsm.ManifestAck{Delta: &manifests.Delta{
			Materialize: &manifests.Materialization{Bases: []manifests.Base{{Key: key, Offset: 0, Length: 100}}, TruncateBefore: 1}}}))
		// A task without the incremental capability sends full manifests.
		full := refusedAlike(t, h, "full manifest's base "+key, fsm.TaskAck{Job: "jobF", Generation: 1, Epoch: 1, Task: "agg-0",
			Manifest: &fsm.ManifestAck{Full: &manifests.Manifest{Bases: []manifests.Base{{Key: key, Offset: 0, Length: 100}}}}})
		for _, re := range []*wire.RuleError{commit, base, full} {
			if re.Field != "manifest" || !strings.Contains(re.Message, `blob "`+key+`" is not known to job "job`) {
				t.Fatalf("%s: refused with %v", key, re)
			}
		}
	}
	h.fsck()
}

// TestAuditCrossJobForkHoldsOnlyTheSavepoint: a fork from job B's
// savepoint may add ranges of the blobs that savepoint's manifest holds,
// a base's blob as a segment's, but not of a blob B's lineage dropped
// before it (still live for B's older checkpoint); a fork from that
// older savepoint may.
func TestAuditCrossJobForkHoldsOnlyTheSavepoint(t *testing.T) {
	h := crossJobWorld(t, true)
	h.intents("jobB", 1, "jobB/agg-0/base")
	h.begin("jobB", 1, 2)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "jobB", Generation: 1, Epoch: 2, Task: "agg-0", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: "jobB/agg-0/base", Size: 1000}},
		Delta: &manifests.Delta{Materialize: &manifests.Materialization{Bases: []manifests.Base{{Key: "jobB/agg-0/base", Offset: 0, Length: 1000}}, TruncateBefore: 3}}}}))
	h.pin("jobB", 1, "sp1")
	h.pin("jobB", 2, "sp2")
	if n := h.refsOf([]string{"jobB/agg-0/log"})["jobB/agg-0/log"]; n != 1 {
		t.Fatalf("jobB/agg-0/log has %d references, want epoch 1's", n)
	}
	forkAt := func(epoch uint64, key string) fsm.TaskAck {
		return fsm.TaskAck{Job: "jobA", Generation: 1, Epoch: 1, Task: "agg-0", Manifest: &fsm.ManifestAck{
			Base:  &fsm.BaseRef{Job: "jobB", Task: "agg-0", Epoch: epoch},
			Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: key, Offset: 500, Length: 10, FirstSeq: 3, LastSeq: 3}}}}}
	}
	fork := func(key string) fsm.TaskAck { return forkAt(2, key) }
	// Epoch 1's manifest, which epoch 2 dropped the blob from, holds it.
	if old := forkAt(1, "jobB/agg-0/log"); h.f.CheckCrossJob(&old) != nil {
		t.Fatalf("early check of a fork from epoch 1 adding a range of its blob: %v", h.f.CheckCrossJob(&old))
	}
	re := refusedAlike(t, h, "a blob the savepoint dropped", fork("jobB/agg-0/log"))
	if !strings.Contains(re.Message, `blob "jobB/agg-0/log" is not known to job "jobA"`) {
		t.Fatalf("a blob the savepoint dropped: refused with %v", re)
	}
	ok := fork("jobB/agg-0/base")
	if pre := h.f.CheckCrossJob(&ok); pre != nil {
		t.Fatalf("early check of a range of the savepoint's base blob: %v", pre)
	}
	mustOK(t, h.mustApply(fsm.CmdTaskAck, ok))
	h.fsck()
}

// TestAuditCrossJobBaseNeedsAManifest: a task of B's savepoint that acked
// without a manifest (inline payloads only) is no base for job A: the
// answer is the one for a task that does not exist.
func TestAuditCrossJobBaseNeedsAManifest(t *testing.T) {
	h := crossJobWorld(t, false)
	h.putJob("jobC", wire.JobConfig{Retained: 1})
	src := task(t, "src", "input")
	h.start("jobC", "c1", src)
	h.begin("jobC", 1, 1)
	h.ack("jobC", 1, 1, "src", payloadsFor(src, 1))
	h.pin("jobC", 1, "sp")
	for _, tk := range []string{"src", "none"} {
		base := fsm.BaseRef{Job: "jobC", Task: tk, Epoch: 1}
		re := h.reject(wire.ErrNotFound, fsm.CmdTaskAck, baseAck("jobA", base))
		if re.Field != "manifest.base" || !strings.Contains(re.Message, `with a manifest of task "`+tk+`"`) {
			t.Fatalf("base %+v: refused with %v", base, re)
		}
	}
}

// TestAuditCrossJobNewAttemptInheritsNothing: the first ack of a new
// attempt that names no base starts from an empty manifest, so a blob of
// job B that the previous attempt's fork inherited is foreign to it: the
// early check refuses it as apply does.
func TestAuditCrossJobNewAttemptInheritsNothing(t *testing.T) {
	h := crossJobWorld(t, true)
	h.pin("jobB", 1, "sp")
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "jobA", Generation: 1, Epoch: 1, Task: "agg-0", Manifest: &fsm.ManifestAck{
		Base:  &fsm.BaseRef{Job: "jobB", Task: "agg-0", Epoch: 1},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: "jobB/agg-0/log", Offset: 50, Length: 10, FirstSeq: 3, LastSeq: 3}}}}}))
	h.start("jobA", "a2", task(t, "agg-0", "state", "incremental"))
	h.begin("jobA", 2, 2)
	re := refusedAlike(t, h, "a new attempt's first ack", fsm.TaskAck{Job: "jobA", Generation: 2, Epoch: 2, Task: "agg-0", Manifest: &fsm.ManifestAck{
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: "jobB/agg-0/log", Offset: 70, Length: 10, FirstSeq: 4, LastSeq: 4}}}}})
	if !strings.Contains(re.Message, `blob "jobB/agg-0/log" is not known to job "jobA"`) {
		t.Fatalf("refused with %v", re)
	}
}
