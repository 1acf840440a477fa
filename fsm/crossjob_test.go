package fsm_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// crossJobWorld is job jobB with epoch 1 completed (unpinned) holding a
// manifest of task agg-0 over blob jobB/agg-0/log, and job jobA whose
// attempt is ready to acknowledge epoch 1. withB false leaves jobB out.
func crossJobWorld(t *testing.T, withB bool) *harness {
	h := newHarness(t)
	if withB {
		h.putJob("jobB", wire.JobConfig{Retained: 2})
		h.start("jobB", "b1", task(t, "agg-0", "state", "incremental"))
		h.intents("jobB", 1, "jobB/agg-0/log")
		h.begin("jobB", 1, 1)
		mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "jobB", Generation: 1, Epoch: 1, Task: "agg-0", Manifest: &fsm.ManifestAck{
			Blobs: []fsm.BlobCommit{{Key: "jobB/agg-0/log", Size: 100}},
			Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: "jobB/agg-0/log", Offset: 0, Length: 100, FirstSeq: 1, LastSeq: 2}}}}}))
	}
	h.putJob("jobA", wire.JobConfig{Retained: 2})
	h.start("jobA", "a1", task(t, "agg-0", "state", "incremental"))
	h.begin("jobA", 1, 1)
	return h
}

func baseAck(job string, base fsm.BaseRef) fsm.TaskAck {
	return fsm.TaskAck{Job: job, Generation: 1, Epoch: 1, Task: "agg-0", Manifest: &fsm.ManifestAck{Base: &base}}
}

// TestCrossJobBaseNeedsSavepoint: an ack of job A naming an unpinned
// checkpoint of job B as its base is refused, with the same answer whether
// job B, its epoch or its task exist; B's pinned savepoint is accepted.
func TestCrossJobBaseNeedsSavepoint(t *testing.T) {
	with, without := crossJobWorld(t, true), crossJobWorld(t, false)
	for _, base := range []fsm.BaseRef{
		{Job: "jobB", Task: "agg-0", Epoch: 1}, // exists, not pinned
		{Job: "jobB", Task: "agg-0", Epoch: 7}, // no such epoch
		{Job: "jobB", Task: "agg-9", Epoch: 1}, // no such task
	} {
		a := with.reject(wire.ErrNotFound, fsm.CmdTaskAck, baseAck("jobA", base))
		b := without.reject(wire.ErrNotFound, fsm.CmdTaskAck, baseAck("jobA", base))
		if *a != *b {
			t.Fatalf("base %+v: the answer tells whether job B exists:\n with B:    %v\n without B: %v", base, a, b)
		}
		if pre := with.f.CheckCrossJob(ptr(baseAck("jobA", base))); pre == nil || pre.Error() != a.Error() {
			t.Fatalf("base %+v: the early check answers %v, apply %v", base, pre, a)
		}
	}
	// A restore plan of jobA from jobB's unpinned epoch is refused alike.
	for _, req := range []fsm.RestoreRequest{
		{Job: "jobA", Task: "agg-0", SourceJob: "jobB", SourceTask: "agg-0", Epoch: 1},
		{Job: "jobA", Task: "agg-0", SourceJob: "jobB", SourceTask: "agg-0"},
		{Job: "jobA", Task: "agg-0", SourceJob: "jobB", Pin: "sp"},
	} {
		_, _, ea := with.f.PlanRestore(req)
		_, _, eb := without.f.PlanRestore(req)
		if !isRule(ea, wire.ErrNotFound) || eb == nil || ea.Error() != eb.Error() {
			t.Fatalf("restore %+v: with B %v, without B %v", req, ea, eb)
		}
	}

	// Pinned, epoch 1 of jobB is a savepoint: the fork is accepted, and
	// the restore plan of jobA then lists jobB's blob.
	with.pin("jobB", 1, "sp")
	mustOK(t, with.mustApply(fsm.CmdTaskAck, baseAck("jobA", fsm.BaseRef{Job: "jobB", Task: "agg-0", Epoch: 1})))
	p := with.restore(fsm.RestoreRequest{Job: "jobB", Task: "agg-0", Pin: "sp"})
	if m := p.Kinds[wire.KindState].Manifest; m == nil || len(m.Segments) != 1 {
		t.Fatalf("savepoint plan: %+v", p)
	}
	with.fsck()
}

// TestCrossJobBlobReference: a manifest of job A adding a segment of a blob
// of job B is refused (the same answer for a key that does not exist),
// unless the manifest inherited that blob from B's savepoint.
func TestCrossJobBlobReference(t *testing.T) {
	h := crossJobWorld(t, true)
	seg := func(key string, off uint64) *fsm.ManifestAck {
		return &fsm.ManifestAck{Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: key, Offset: off, Length: 10, FirstSeq: 3, LastSeq: 3}}}}
	}
	ack := func(epoch uint64, m *fsm.ManifestAck) fsm.TaskAck {
		return fsm.TaskAck{Job: "jobA", Generation: 1, Epoch: epoch, Task: "agg-0", Manifest: m}
	}
	real := h.reject(wire.ErrNotFound, fsm.CmdTaskAck, ack(1, seg("jobB/agg-0/log", 0)))
	if want := "blob \"jobB/agg-0/log\" is not known to job \"jobA\""; len(real.Message) < len(want) || real.Message[:len(want)] != want {
		t.Fatalf("foreign blob: %v", real)
	}
	// Committing it as if it were an upload of jobA is refused alike.
	commit := seg("jobB/agg-0/log", 0)
	commit.Blobs = []fsm.BlobCommit{{Key: "jobB/agg-0/log", Size: 100}}
	if re := h.reject(wire.ErrNotFound, fsm.CmdTaskAck, ack(1, commit)); re.Error() != real.Error() {
		t.Fatalf("commit of a foreign blob: %v, want %v", re, real)
	}
	ghost := h.reject(wire.ErrNotFound, fsm.CmdTaskAck, ack(1, seg("jobB/agg-0/nothing", 0)))
	if ghost.Code != real.Code || ghost.Field != real.Field {
		t.Fatalf("a key that does not exist is answered %v, an existing one %v", ghost, real)
	}
	if pre := h.f.CheckCrossJob(ptr(ack(1, seg("jobB/agg-0/log", 0)))); pre == nil || pre.Error() != real.Error() {
		t.Fatalf("early check: %v, want %v", pre, real)
	}

	// Forked from B's savepoint, the manifest holds B's blob: a new range
	// of it may be added, and jobA's own blobs as ever.
	h.pin("jobB", 1, "sp")
	fork := seg("jobB/agg-0/log", 50)
	fork.Base = &fsm.BaseRef{Job: "jobB", Task: "agg-0", Epoch: 1}
	mustOK(t, h.mustApply(fsm.CmdTaskAck, ack(1, fork)))
	h.intents("jobA", 1, "jobA/agg-0/own")
	own := seg("jobA/agg-0/own", 0)
	own.Blobs = []fsm.BlobCommit{{Key: "jobA/agg-0/own", Size: 10}}
	h.begin("jobA", 1, 2)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, ack(2, own)))
	// A later ack of the attempt may add another range of the inherited
	// blob: the early check finds it in the manifest the ack extends, as
	// apply does.
	h.begin("jobA", 1, 3)
	more := ack(3, &fsm.ManifestAck{Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: "jobB/agg-0/log", Offset: 70, Length: 10, FirstSeq: 4, LastSeq: 4}}}})
	if pre := h.f.CheckCrossJob(&more); pre != nil {
		t.Fatalf("early check of a range of an inherited blob: %v", pre)
	}
	mustOK(t, h.mustApply(fsm.CmdTaskAck, more))
	h.fsck()
}

// TestCrossJobOwnPrefixReadAtApply: the early check passes an ack that
// names only keys under its job's prefix without reading them; apply
// reads each record, so a blob under job A's prefix that job B's intent
// holds (the leader never makes one; an intent's keys are whatever its
// entry names) is still refused to A, with the answer for B's blob.
func TestCrossJobOwnPrefixReadAtApply(t *testing.T) {
	h := crossJobWorld(t, true)
	h.intents("jobB", 1, "jobA/agg-0/planted")
	ack := fsm.TaskAck{Job: "jobA", Generation: 1, Epoch: 1, Task: "agg-0", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: "jobA/agg-0/planted", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: "jobA/agg-0/planted", Offset: 0, Length: 10, FirstSeq: 1, LastSeq: 1}}}}}
	if pre := h.f.CheckCrossJob(&ack); pre != nil {
		t.Fatalf("early check of keys under the job's prefix: %v", pre)
	}
	re := h.reject(wire.ErrNotFound, fsm.CmdTaskAck, ack)
	if want := "blob \"jobA/agg-0/planted\" is not known to job \"jobA\""; len(re.Message) < len(want) || re.Message[:len(want)] != want {
		t.Fatalf("apply of a blob B holds under A's prefix: %v", re)
	}
	// A key outside the prefix is still read early: B's own blob.
	foreign := ack
	foreign.Manifest = &fsm.ManifestAck{Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: "jobB/agg-0/log", Offset: 0, Length: 10, FirstSeq: 1, LastSeq: 1}}}}
	if pre := h.f.CheckCrossJob(&foreign); pre == nil {
		t.Fatal("early check passed a key of another job")
	}
	// So is a commit of another job's key beside segments of the job's own.
	foreign.Manifest = &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "jobB/agg-0/log", Size: 100}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: "jobA/agg-0/own", Offset: 0, Length: 10, FirstSeq: 1, LastSeq: 1}}}}
	if pre := h.f.CheckCrossJob(&foreign); pre == nil {
		t.Fatal("early check passed a commit of another job's key")
	}
	// And a materialized base, or a full manifest, naming another job's key.
	foreign.Manifest = &fsm.ManifestAck{Delta: &manifests.Delta{Materialize: &manifests.Materialization{TruncateBefore: 2,
		Bases: []manifests.Base{{Key: "jobB/agg-0/log", Offset: 0, Length: 10}}}}}
	if pre := h.f.CheckCrossJob(&foreign); pre == nil {
		t.Fatal("early check passed a materialized base of another job's key")
	}
	foreign.Manifest = &fsm.ManifestAck{Full: &manifests.Manifest{Segments: []manifests.Segment{{Key: "jobB/agg-0/log", Offset: 0, Length: 10, FirstSeq: 1, LastSeq: 1}}}}
	if pre := h.f.CheckCrossJob(&foreign); pre == nil {
		t.Fatal("early check passed a full manifest naming another job's key")
	}
	h.fsck()
}

// TestSupersededUploadSlotRefused: an upload slot handed to a worker of
// attempt 1 cannot be committed by an ack of attempt 2.
func TestSupersededUploadSlotRefused(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{})
	h.start("j", "a1", task(t, "t", "state", "incremental"))
	h.intents("j", 1, "j/t/old")
	h.start("j", "a2", task(t, "t", "state", "incremental"))
	h.begin("j", 2, 1)
	m := &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: "j/t/old", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: "j/t/old", Offset: 0, Length: 10, FirstSeq: 1, LastSeq: 1}}}}
	re := h.reject(wire.ErrFenced, fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 2, Epoch: 1, Task: "t", Manifest: m})
	if re.Field != "manifest.blobs" {
		t.Fatalf("superseded slot: %v", re)
	}
	h.intents("j", 2, "j/t/new")
	m.Blobs[0].Key, m.Delta.AddSegments[0].Key = "j/t/new", "j/t/new"
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 2, Epoch: 1, Task: "t", Manifest: m}))
}

// TestCrossJobRulesKeepOldEntries: entries written before the rules (task
// ack and intent-create version 1) apply as they did, so a member that
// replays an old log computes the state every other member has.
func TestCrossJobRulesKeepOldEntries(t *testing.T) {
	h := crossJobWorld(t, true)
	// The version-1 entry an older leader wrote.
	data, err := fsm.EncodeVersion(fsm.CmdTaskAck, 1, h.now, baseAck("jobA", fsm.BaseRef{Job: "jobB", Task: "agg-0", Epoch: 1}))
	if err != nil {
		t.Fatal(err)
	}
	res, ok := h.f.Apply(h.nextLog(data)).(*fsm.Result)
	if !ok || res.Err != nil {
		t.Fatalf("version-1 ack of another job's checkpoint: %+v", res)
	}
}

func ptr[T any](v T) *T { return &v }

// TestBlobObservation: a blob an ack commits waits for the leader's look at
// the object store; the observation is kept in its record, a size that
// differs from the declared one flags it in the record and in restore
// plans, and a repeated observation changes nothing.
func TestBlobObservation(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{})
	h.start("j", "a1", task(t, "t", "state", "incremental"))
	h.intents("j", 1, "j/t/a", "j/t/b")
	h.begin("j", 1, 1)
	segs := []manifests.Segment{{Key: "j/t/a", Offset: 0, Length: 10, FirstSeq: 1, LastSeq: 1}, {Key: "j/t/b", Offset: 0, Length: 10, FirstSeq: 2, LastSeq: 2}}
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: "j/t/a", Size: 10}, {Key: "j/t/b", Size: 10}},
		Delta: &manifests.Delta{AddSegments: segs}}}))
	if keys, err := h.f.Unobserved(10); err != nil || len(keys) != 2 {
		t.Fatalf("unobserved after the ack: %v %v", keys, err)
	}
	// The count (metastore_blobs_unobserved) reads the last commit.
	unobserved := func() int {
		t.Helper()
		if err := h.f.Flush(); err != nil {
			t.Fatal(err)
		}
		n, err := h.f.UnobservedCount()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := unobserved(); n != 2 {
		t.Fatalf("unobserved count after the ack: %d, want 2", n)
	}
	obs := fsm.BlobsObserved{Blobs: []fsm.BlobObservation{{Key: "j/t/a", Size: 10, ETag: "e1"}, {Key: "j/t/b", Size: 99, ETag: "e2"}}}
	res := mustOK(t, h.mustApply(fsm.CmdBlobsObserved, obs)).(*fsm.ObservedResult)
	if len(res.Observed) != 2 || len(res.Flagged) != 1 || res.Flagged[0] != "j/t/b" {
		t.Fatalf("observed: %+v", res)
	}
	b, _, err := h.f.Blob("j/t/b")
	if err != nil || !b.Flagged || b.Observed == nil || b.Observed.Size != 99 || b.Observed.ETag != "e2" {
		t.Fatalf("flagged blob record: %+v %v", b, err)
	}
	if a, _, _ := h.f.Blob("j/t/a"); a.Flagged || a.Observed == nil || a.Observed.ETag != "e1" {
		t.Fatalf("matching blob record: %+v", a)
	}
	p := h.restore(fsm.RestoreRequest{Job: "j", Task: "t"})
	if len(p.FlaggedBlobs) != 1 || p.FlaggedBlobs[0].Key != "j/t/b" || p.FlaggedBlobs[0].Declared != 10 {
		t.Fatalf("restore plan flags: %+v", p.FlaggedBlobs)
	}
	before := h.hash()
	again := mustOK(t, h.mustApply(fsm.CmdBlobsObserved, fsm.BlobsObserved{Blobs: []fsm.BlobObservation{{Key: "j/t/a", Size: 1, ETag: "other"}}})).(*fsm.ObservedResult)
	if len(again.Observed) != 0 || h.hash() != before {
		t.Fatalf("a second observation changed the state: %+v", again)
	}
	if keys, _ := h.f.Unobserved(10); len(keys) != 0 {
		t.Fatalf("still unobserved: %v", keys)
	}
	if n := unobserved(); n != 0 {
		t.Fatalf("unobserved count after the observation: %d, want 0", n)
	}
	h.reopen()
	if b, _, _ := h.f.Blob("j/t/b"); !b.Flagged {
		t.Fatalf("flag lost on reopen: %+v", b)
	}
	// An ack of version 1 (written before observations) commits a blob
	// the leader does not look at.
	h.intents("j", 1, "j/t/c")
	h.begin("j", 1, 2)
	data, err := fsm.EncodeVersion(fsm.CmdTaskAck, 1, h.now, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 2, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: "j/t/c", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: "j/t/c", Offset: 0, Length: 10, FirstSeq: 3, LastSeq: 3}}}}})
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, h.f.Apply(h.nextLog(data)).(*fsm.Result))
	if keys, _ := h.f.Unobserved(10); len(keys) != 0 {
		t.Fatalf("unobserved after a version-1 ack: %v", keys)
	}
	if c, _, _ := h.f.Blob("j/t/c"); c.State != wire.BlobLive || c.AwaitingObservation {
		t.Fatalf("blob of a version-1 ack: %+v", c)
	}
	// A missing object is flagged even when its size (0, as the collector
	// reports a missing one) is the declared size.
	h.intents("j", 1, "j/t/empty")
	h.begin("j", 1, 3)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 3, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: "j/t/empty", Size: 0}}, Delta: &manifests.Delta{}}}))
	gone := mustOK(t, h.mustApply(fsm.CmdBlobsObserved, fsm.BlobsObserved{Blobs: []fsm.BlobObservation{{Key: "j/t/empty", Missing: true}}})).(*fsm.ObservedResult)
	if !slices.Equal(gone.Flagged, []string{"j/t/empty"}) {
		t.Fatalf("a missing blob of the declared size: %+v", gone)
	}
	if e, _, _ := h.f.Blob("j/t/empty"); !e.Flagged || e.Observed == nil || !e.Observed.Missing {
		t.Fatalf("missing blob record: %+v", e)
	}
	h.fsck()
}

// TestFsckComparesUnobservedIndex: the keys awaiting observation kept in
// memory are checked against the blob records, both ways.
func TestFsckComparesUnobservedIndex(t *testing.T) {
	h := oneIncrementalTask(t, "j", 1, "j/t/a")
	h.begin("j", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "t", Manifest: &fsm.ManifestAck{
		Blobs: []fsm.BlobCommit{{Key: "j/t/a", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{{Key: "j/t/a", Offset: 0, Length: 10, FirstSeq: 1, LastSeq: 1}}}}}))
	h.fsck()
	problems := func(want string) {
		t.Helper()
		if err := h.f.Flush(); err != nil {
			t.Fatal(err)
		}
		rep, err := h.f.Fsck()
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], want) {
			t.Fatalf("fsck problems %q, want one saying %q", rep.Problems, want)
		}
	}
	if err := h.f.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := fsm.MarkAwaiting(h.f, "j/t/a", false); err != nil {
		t.Fatal(err)
	}
	problems(`lists blob "j/t/a" as awaiting observation; its record does not`)
	h.reopen()
	h.fsck()
	if err := fsm.MarkAwaiting(h.f, "j/t/a", true); err != nil {
		t.Fatal(err)
	}
	problems(`blob "j/t/a" awaits observation and is missing from the index`)
}
