package fsm_test

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// worker is a model of an incremental task: it keeps its manifest whole
// and sends deltas, as a Flink-style changelog backend would.
type worker struct {
	job, task string
	gen       uint64
	seq       uint64
	m         manifests.Manifest
	// history of acknowledged manifests by epoch.
	acked map[uint64]manifests.Manifest
	base  *fsm.BaseRef // sent with the first ack of an attempt
}

func (h *harness) intents(job string, gen uint64, keys ...string) {
	h.t.Helper()
	mustOK(h.t, h.mustApply(fsm.CmdIntentCreate, fsm.IntentCreate{Job: job, Generation: gen, Keys: keys, LeaseUntil: h.now.Add(time.Hour)}))
}

// batch records an upload batch of count keys of task (as the API's
// upload-slot requests do) with a lease of an hour, and returns its keys.
func (h *harness) batch(job string, gen uint64, task, id string, count int) []string {
	h.t.Helper()
	p := fsm.IntentCreate{Job: job, Generation: gen, Task: task, Batch: id, Count: count, LeaseUntil: h.now.Add(time.Hour)}
	mustOK(h.t, h.mustApply(fsm.CmdIntentCreate, p))
	return p.UploadKeys()
}

// step makes the worker upload one changelog blob (two segments) and, on
// materialize, one base blob truncating its changelog; it returns the ack.
func (w *worker) step(h *harness, epoch uint64, materialize bool) *fsm.TaskAck {
	h.t.Helper()
	logKey := fmt.Sprintf("%s/%s/log-%d-%d", w.job, w.task, w.gen, epoch)
	keys := []string{logKey}
	var d manifests.Delta
	blobs := []fsm.BlobCommit{{Key: logKey, Size: 100, Checksum: "crc:" + logKey}}
	if materialize {
		baseKey := fmt.Sprintf("%s/%s/base-%d-%d", w.job, w.task, w.gen, epoch)
		keys = append(keys, baseKey)
		blobs = append(blobs, fsm.BlobCommit{Key: baseKey, Size: 1000})
		d.Materialize = &manifests.Materialization{Bases: []manifests.Base{{Key: baseKey, Offset: 0, Length: 1000}}, TruncateBefore: w.seq + 1}
	} else if len(w.m.Segments) > 6 {
		// Compaction without materialization: drop the oldest segment.
		oldest := slices.MinFunc(w.m.Segments, func(a, b manifests.Segment) int { return int(a.LastSeq) - int(b.LastSeq) })
		d.DropSegments = []manifests.Ref{oldest.ID()}
	}
	d.AddSegments = []manifests.Segment{
		{Key: logKey, Offset: 0, Length: 60, FirstSeq: w.seq + 1, LastSeq: w.seq + 5},
		{Key: logKey, Offset: 60, Length: 40, FirstSeq: w.seq + 6, LastSeq: w.seq + 9},
	}
	h.intents(w.job, w.gen, keys...)
	next, err := manifests.Apply(w.m, d)
	if err != nil {
		h.t.Fatalf("model: %v", err)
	}
	w.seq += 9
	w.m = next
	ack := &fsm.TaskAck{Job: w.job, Generation: w.gen, Epoch: epoch, Task: w.task, Manifest: &fsm.ManifestAck{Base: w.base, Blobs: blobs, Delta: &d}}
	w.base = nil
	res := mustOK(h.t, h.mustApply(fsm.CmdTaskAck, *ack)).(*wire.AckResult)
	if res.Ack.Lineage == 0 {
		h.t.Fatalf("%s epoch %d: ack without lineage", w.task, epoch)
	}
	w.acked[epoch] = next
	return ack
}

func sameManifest(a, b manifests.Manifest) bool {
	a.Sort()
	b.Sort()
	return reflect.DeepEqual(norm(a), norm(b))
}

func norm(m manifests.Manifest) manifests.Manifest {
	if len(m.Bases) == 0 {
		m.Bases = nil
	}
	if len(m.Segments) == 0 {
		m.Segments = nil
	}
	return m
}

func (h *harness) checkManifest(job string, epoch uint64, task string, want manifests.Manifest) {
	h.t.Helper()
	got, _, err := h.f.Manifest(job, epoch, task)
	if err != nil {
		h.t.Fatalf("manifest %s/%d/%s: %v", job, epoch, task, err)
	}
	if !sameManifest(*got, want) {
		h.t.Fatalf("manifest %s/%d/%s:\n got %+v\nwant %+v", job, epoch, task, *got, want)
	}
}

func (h *harness) fsck() {
	h.t.Helper()
	rep, err := h.f.Fsck()
	if err != nil {
		h.t.Fatal(err)
	}
	if !rep.OK() {
		h.t.Fatalf("fsck: mismatches %+v problems %v", rep.Mismatches, rep.Problems)
	}
}

// referenced returns the blobs with a positive count, and every blob key
// the store knows.
func (h *harness) blobKeys(keys []string) (referenced, unreferenced []string) {
	h.t.Helper()
	for _, k := range keys {
		b, _, err := h.f.Blob(k)
		if err != nil {
			h.t.Fatalf("blob %s: %v", k, err)
		}
		if b.Refs > 0 {
			referenced = append(referenced, k)
		} else {
			unreferenced = append(unreferenced, k)
		}
	}
	return referenced, unreferenced
}

func refKeys(refs []fsm.BlobRef) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.Key)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// TestIncrementalJobReferences runs the scenario at the state
// machine: 4 incremental tasks, 60 epochs, segments every epoch,
// materialization every 10, retention 2, one pinned savepoint. At every
// step the stored manifests equal the workers' own, the counts equal their
// recount, and the blobs with references are exactly those of retained and
// pinned checkpoints.
func TestIncrementalJobReferences(t *testing.T) {
	h := newHarness(t)
	h.putJob("inc", wire.JobConfig{Retained: 2})
	var tasks []wire.Task
	var workers []*worker
	for i := 0; i < 4; i++ {
		tk := task(t, fmt.Sprintf("t%d", i), "state", "incremental")
		tasks = append(tasks, tk)
		workers = append(workers, &worker{job: "inc", task: tk.ID, gen: 1, acked: map[uint64]manifests.Manifest{}})
	}
	h.start("inc", "a1", tasks...)
	var allKeys []string
	for epoch := uint64(1); epoch <= 60; epoch++ {
		h.begin("inc", 1, epoch)
		for _, w := range workers {
			ack := w.step(h, epoch, epoch%10 == 0)
			for _, b := range ack.Manifest.Blobs {
				allKeys = append(allKeys, b.Key)
			}
		}
		if epoch == 25 {
			h.pin("inc", 25, "sp")
		}
		if epoch%7 == 0 {
			h.fsck()
		}
	}
	h.fsck()
	for _, w := range workers {
		for _, e := range []uint64{25, 59, 60} {
			h.checkManifest("inc", e, w.task, w.acked[e])
		}
		p := h.restore(fsm.RestoreRequest{Job: "inc", Task: w.task})
		if p.Source.Epoch != 60 || p.Kinds[wire.KindState].Manifest == nil || p.ObjectStoreReads != len(w.m.Bases)+len(w.m.Segments) || p.ObjectStoreBytes != w.m.Bytes() {
			t.Fatalf("restore %s: %+v", w.task, p)
		}
	}
	refs, _, err := h.f.ReferencedBlobs("inc")
	if err != nil {
		t.Fatal(err)
	}
	want := refKeys(refs)
	referenced, unreferenced := h.blobKeys(allKeys)
	sort.Strings(referenced)
	if !slices.Equal(referenced, want) {
		t.Fatalf("blobs with references:\n got %v\nwant %v", referenced, want)
	}

	t.Logf("%d blobs written, %d referenced by retained and pinned checkpoints", len(allKeys), len(referenced))
	if len(referenced) == 0 || len(unreferenced) == 0 {
		t.Fatalf("degenerate scenario: %d referenced, %d unreferenced", len(referenced), len(unreferenced))
	}
	// The collector may mark exactly the unreferenced blobs.
	marked := mustOK(t, h.mustApply(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: allKeys})).([]string)
	sort.Strings(marked)
	sort.Strings(unreferenced)
	if !slices.Equal(marked, unreferenced) {
		t.Fatalf("marked deleting:\n got %v\nwant %v", marked, unreferenced)
	}
	gone := mustOK(t, h.mustApply(fsm.CmdBlobsGone, fsm.BlobKeys{Keys: marked})).([]string)
	if len(gone) != len(marked) {
		t.Fatalf("gone %d of %d", len(gone), len(marked))
	}
	h.fsck()

	// A reference to a gone blob is refused with a clear error, and changes
	// nothing.
	h.begin("inc", 1, 61)
	w := workers[0]
	res := h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "inc", Generation: 1, Epoch: 61, Task: w.task, Manifest: &fsm.ManifestAck{Delta: &manifests.Delta{
		AddSegments: []manifests.Segment{{Key: marked[0], Offset: 0, Length: 1, FirstSeq: w.seq + 1, LastSeq: w.seq + 1}}}}})
	mustRule(t, res, wire.ErrBlobGone)
	// A drop of a segment not in the manifest, an unknown blob, a range past
	// the end, a key outside the charset: each refused.
	for _, tc := range []struct {
		d    manifests.Delta
		want error
	}{
		{manifests.Delta{DropSegments: []manifests.Ref{{Key: "inc/t0/none", Offset: 0}}}, wire.ErrManifestMismatch},
		{manifests.Delta{AddSegments: []manifests.Segment{{Key: "inc/t0/unknown", Offset: 0, Length: 1, FirstSeq: 1, LastSeq: 1}}}, wire.ErrBlobUnknown},
		{manifests.Delta{AddSegments: []manifests.Segment{{Key: w.m.Segments[0].Key, Offset: 99, Length: 2, FirstSeq: 1, LastSeq: 1}}}, wire.ErrInvalid},
		{manifests.Delta{AddSegments: []manifests.Segment{{Key: "../escape", Offset: 0, Length: 1, FirstSeq: 1, LastSeq: 1}}}, wire.ErrInvalid},
	} {
		d := tc.d
		h.reject(tc.want, fsm.CmdTaskAck, fsm.TaskAck{Job: "inc", Generation: 1, Epoch: 61, Task: w.task, Manifest: &fsm.ManifestAck{Delta: &d}})
	}

	// Epoch 61 gets acks from two tasks, then a new attempt aborts it; the
	// new attempt continues from epoch 60: what 61 added is gone.
	workers[0].step(h, 61, false)
	workers[1].step(h, 61, false)
	h.fsck()
	h.start("inc", "a2", tasks...)
	for _, w := range workers {
		w.gen = 2
		w.m = w.acked[60]
		w.base = &fsm.BaseRef{Job: "inc", Task: w.task, Epoch: 60}
	}
	h.begin("inc", 2, 62)
	for _, w := range workers {
		w.step(h, 62, false)
	}
	h.fsck()
	for _, w := range workers {
		h.checkManifest("inc", 62, w.task, w.acked[62])
		for _, k := range []string{fmt.Sprintf("inc/%s/log-1-61", w.task)} {
			if b, _, err := h.f.Blob(k); err == nil && b.Refs != 0 {
				t.Fatalf("blob %s of the aborted epoch still has %d refs", k, b.Refs)
			}
		}
	}

	// Another job restores from the savepoint and shares its blobs.
	h.putJob("copy", wire.JobConfig{Retained: 1})
	h.start("copy", "c1", tasks[0])
	cw := &worker{job: "copy", task: "t0", gen: 1, acked: map[uint64]manifests.Manifest{}, m: workers[0].acked[25], seq: 1000,
		base: &fsm.BaseRef{Job: "inc", Task: "t0", Epoch: 25}}
	h.begin("copy", 1, 1)
	cw.step(h, 1, false)
	h.checkManifest("copy", 1, "t0", cw.acked[1])
	h.fsck()
	shared := workers[0].acked[25].Blobs()
	h.unpin("inc", 25)
	h.fsck()
	for _, k := range shared {
		if b, _, _ := h.f.Blob(k); b.Refs == 0 {
			t.Fatalf("shared blob %s lost its references while the copy job holds it", k)
		}
	}
	// The copy job materializes twice: its retained checkpoint no longer
	// holds the savepoint's blobs, which lose their last references.
	h.begin("copy", 1, 2)
	cw.step(h, 2, true)
	h.begin("copy", 1, 3)
	cw.step(h, 3, true)
	h.fsck()
	for _, k := range shared {
		b, _, _ := h.f.Blob(k)
		if b.Refs != 0 {
			t.Fatalf("savepoint blob %s still has %d refs after both jobs let go", k, b.Refs)
		}
	}
}

// TestAbandonedManifest checks that a task whose new attempt acknowledges
// without a manifest lets go of its old manifest once no checkpoint holds
// it.
func TestAbandonedManifest(t *testing.T) {
	h := newHarness(t)
	h.putJob("ab", wire.JobConfig{Retained: 1})
	tk := task(t, "t", "state", "incremental")
	h.start("ab", "a1", tk)
	w := &worker{job: "ab", task: "t", gen: 1, acked: map[uint64]manifests.Manifest{}}
	h.begin("ab", 1, 1)
	w.step(h, 1, false)
	keys := w.m.Blobs()
	h.start("ab", "a2", tk)
	for e := uint64(2); e <= 3; e++ {
		h.begin("ab", 2, e)
		h.ack("ab", 2, e, "t", map[fsm.Kind][]byte{wire.KindState: []byte("inline")})
	}
	h.fsck()
	for _, k := range keys {
		if b, _, _ := h.f.Blob(k); b.Refs != 0 {
			t.Fatalf("blob %s of the abandoned manifest still has %d refs", k, b.Refs)
		}
	}
}

// TestReferencesToDeletingAndExpiredBlobs: an ack cannot reference a blob
// the collector marked deleting, nor commit an upload whose intent expired.
func TestReferencesToDeletingAndExpiredBlobs(t *testing.T) {
	h := newHarness(t)
	h.putJob("d", wire.JobConfig{Retained: 1})
	h.start("d", "a1", task(t, "t", "state", "incremental"))
	w := &worker{job: "d", task: "t", gen: 1, acked: map[uint64]manifests.Manifest{}}
	h.begin("d", 1, 1)
	w.step(h, 1, false)
	h.begin("d", 1, 2)
	w.step(h, 2, true) // materializes: epoch 1's log blob is dropped
	old := "d/t/log-1-1"
	if b, _, _ := h.f.Blob(old); b.Refs != 0 {
		t.Fatalf("%s still referenced", old)
	}
	if got := mustOK(t, h.mustApply(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: []string{old}})).([]string); len(got) != 1 {
		t.Fatalf("marked %v", got)
	}
	h.begin("d", 1, 3)
	seg := manifests.Segment{Key: old, Offset: 0, Length: 10, FirstSeq: w.seq + 1, LastSeq: w.seq + 1}
	h.reject(wire.ErrBlobDeleting, fsm.CmdTaskAck, fsm.TaskAck{Job: "d", Generation: 1, Epoch: 3, Task: "t",
		Manifest: &fsm.ManifestAck{Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg}}}})

	h.intents("d", 1, "d/t/late")
	h.advance(2 * time.Hour)
	late := manifests.Segment{Key: "d/t/late", Offset: 0, Length: 10, FirstSeq: w.seq + 1, LastSeq: w.seq + 1}
	h.reject(wire.ErrBlobExpired, fsm.CmdTaskAck, fsm.TaskAck{Job: "d", Generation: 1, Epoch: 3, Task: "t",
		Manifest: &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "d/t/late", Size: 10}}, Delta: &manifests.Delta{AddSegments: []manifests.Segment{late}}}})
	h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: []string{"d/t/late"}})
	h.reject(wire.ErrBlobExpired, fsm.CmdTaskAck, fsm.TaskAck{Job: "d", Generation: 1, Epoch: 3, Task: "t",
		Manifest: &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "d/t/late", Size: 10}}, Delta: &manifests.Delta{AddSegments: []manifests.Segment{late}}}})
	h.fsck()
}

// TestReusedReferenceRefused reproduces a reference reused while an older
// checkpoint holds its dropped record: refused with a rule error, and
// unpinning afterwards applies cleanly (it used to corrupt the lineage and
// stop every member).
func TestReusedReferenceRefused(t *testing.T) {
	h := oneIncrementalTask(t, "r", 1, "r/t/blob")
	seg := manifests.Segment{Key: "r/t/blob", Offset: 0, Length: 10, FirstSeq: 1, LastSeq: 1}
	ack := func(epoch uint64, d manifests.Delta, commit bool) *fsm.Result {
		m := &fsm.ManifestAck{Delta: &d}
		if commit {
			m.Blobs = []fsm.BlobCommit{{Key: "r/t/blob", Size: 100}}
		}
		return h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "r", Generation: 1, Epoch: epoch, Task: "t", Manifest: m})
	}
	h.begin("r", 1, 1)
	mustOK(t, ack(1, manifests.Delta{AddSegments: []manifests.Segment{seg}}, true))
	h.pin("r", 1, "sp")
	h.begin("r", 1, 2)
	mustOK(t, ack(2, manifests.Delta{DropSegments: []manifests.Ref{seg.ID()}}, false))
	h.begin("r", 1, 3)
	again := seg
	again.FirstSeq, again.LastSeq = 2, 2
	mustRule(t, ack(3, manifests.Delta{AddSegments: []manifests.Segment{again}}, false), wire.ErrManifestMismatch)
	// The same data at a new offset is fine.
	again.Offset = 10
	mustOK(t, ack(3, manifests.Delta{AddSegments: []manifests.Segment{again}}, false))
	h.unpin("r", 1)
	h.fsck()
}

// TestBaseAtATruncatedSegmentsReference: a materialization may name as its
// base the very range of a segment it truncates (a task whose changelog
// blob becomes its snapshot). A base and a segment are different records,
// so the base is new to the lineage and the segment is dropped.
func TestBaseAtATruncatedSegmentsReference(t *testing.T) {
	h := oneIncrementalTask(t, "m", 2, "m/t/log")
	seg := manifests.Segment{Key: "m/t/log", Offset: 0, Length: 10, FirstSeq: 1, LastSeq: 1}
	h.begin("m", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "m", Generation: 1, Epoch: 1, Task: "t",
		Manifest: &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "m/t/log", Size: 10}},
			Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg}}}}))
	h.begin("m", 1, 2)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "m", Generation: 1, Epoch: 2, Task: "t",
		Manifest: &fsm.ManifestAck{Delta: &manifests.Delta{Materialize: &manifests.Materialization{
			Bases: []manifests.Base{{Key: "m/t/log", Offset: 0, Length: 10}}, TruncateBefore: 2}}}}))
	m, _, err := h.f.Manifest("m", 2, "t")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Bases) != 1 || m.Bases[0].ID() != seg.ID() || len(m.Segments) != 0 {
		t.Fatalf("manifest of epoch 2: %+v", m)
	}
	h.fsck()
}

// TestMaterializationTruncatesBelowItsSequence: a materialization drops
// the present segments whose last sequence number is below its
// truncate_before, and keeps the one that ends at it, also when an older
// live checkpoint still holds dropped segments of the lineage.
func TestMaterializationTruncatesBelowItsSequence(t *testing.T) {
	h := oneIncrementalTask(t, "m", 3, "m/t/a", "m/t/b", "m/t/c", "m/t/base")
	seg := func(key string, first, last uint64) manifests.Segment {
		return manifests.Segment{Key: key, Offset: 0, Length: 10, FirstSeq: first, LastSeq: last}
	}
	ack := func(epoch uint64, m *fsm.ManifestAck) {
		t.Helper()
		mustOK(t, h.mustApply(fsm.CmdTaskAck, fsm.TaskAck{Job: "m", Generation: 1, Epoch: epoch, Task: "t", Manifest: m}))
	}
	h.begin("m", 1, 1)
	ack(1, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "m/t/a", Size: 10}, {Key: "m/t/b", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg("m/t/a", 1, 1), seg("m/t/b", 2, 3)}}})
	h.begin("m", 1, 2)
	ack(2, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "m/t/c", Size: 10}},
		Delta: &manifests.Delta{DropSegments: []manifests.Ref{{Key: "m/t/a"}}, AddSegments: []manifests.Segment{seg("m/t/c", 4, 5)}}})
	h.begin("m", 1, 3)
	ack(3, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "m/t/base", Size: 10}},
		Delta: &manifests.Delta{Materialize: &manifests.Materialization{
			Bases: []manifests.Base{{Key: "m/t/base", Offset: 0, Length: 10}}, TruncateBefore: 5}}})
	m, _, err := h.f.Manifest("m", 3, "t")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Segments) != 1 || m.Segments[0].Key != "m/t/c" || len(m.Bases) != 1 {
		t.Fatalf("manifest of epoch 3: %+v, want m/t/c (last seq 5) and the base", m)
	}
	if m, _, err := h.f.Manifest("m", 1, "t"); err != nil || len(m.Segments) != 2 {
		t.Fatalf("manifest of epoch 1: %+v, %v", m, err)
	}
	h.fsck()
}

// oneIncrementalTask is a harness holding job, retaining retained
// checkpoints, whose first attempt runs one task "t" (state,
// incremental), with upload intents for keys.
func oneIncrementalTask(t *testing.T, job string, retained int, keys ...string) *harness {
	h := newHarness(t)
	h.putJob(job, wire.JobConfig{Retained: retained})
	h.start(job, "a1", task(t, "t", "state", "incremental"))
	h.intents(job, 1, keys...)
	return h
}

// TestPlanReadsNoRecordOfUnreferencedBlobs: planning segments of blobs
// that hold no reference yet (the blobs an ack commits) reads no record,
// as no record can name such a blob; a segment of a blob that holds one is
// read, and is refused when the manifest has it already.
func TestPlanReadsNoRecordOfUnreferencedBlobs(t *testing.T) {
	h := oneIncrementalTask(t, "p", 2, "p/t/a", "p/t/b", "p/t/c")
	seg := func(key string, off, seq uint64) manifests.Segment {
		return manifests.Segment{Key: key, Offset: off, Length: 5, FirstSeq: seq, LastSeq: seq}
	}
	ack := func(epoch uint64, m *fsm.ManifestAck) fsm.TaskAck {
		return fsm.TaskAck{Job: "p", Generation: 1, Epoch: epoch, Task: "t", Manifest: m}
	}
	h.begin("p", 1, 1)
	mustOK(t, h.mustApply(fsm.CmdTaskAck, ack(1, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "p/t/a", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg("p/t/a", 0, 1)}}})))
	h.begin("p", 1, 2)

	fresh := ack(2, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "p/t/b", Size: 10}, {Key: "p/t/c", Size: 10}},
		Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg("p/t/b", 0, 2), seg("p/t/c", 0, 3), seg("p/t/c", 5, 4)}}})
	if read, err := fsm.PlanReadsRecords(h.f, fresh, h.now); err != nil || read {
		t.Fatalf("planning segments of blobs the ack commits: read a record %v, error %v", read, err)
	}
	// p/t/a holds a reference: its segments are read.
	same := ack(2, &fsm.ManifestAck{Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg("p/t/a", 0, 2)}}})
	if read, err := fsm.PlanReadsRecords(h.f, same, h.now); !read || !isRule(err, wire.ErrManifestMismatch) {
		t.Fatalf("planning a segment of a referenced blob: read a record %v, error %v", read, err)
	}
	re := h.reject(wire.ErrManifestMismatch, fsm.CmdTaskAck, same)
	if !strings.Contains(re.Message, "already in the manifest") {
		t.Fatalf("a segment added twice: %v", re)
	}
	other := ack(2, &fsm.ManifestAck{Delta: &manifests.Delta{AddSegments: []manifests.Segment{seg("p/t/a", 5, 2)}}})
	if read, err := fsm.PlanReadsRecords(h.f, other, h.now); !read || err != nil {
		t.Fatalf("planning a new segment of a referenced blob: read a record %v, error %v", read, err)
	}
	mustOK(t, h.mustApply(fsm.CmdTaskAck, fresh))
	h.fsck()

	// A materialization's new base is not read either; its truncated
	// segments are scanned, not read one by one.
	h.intents("p", 1, "p/t/base")
	h.begin("p", 1, 3)
	mat := ack(3, &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: "p/t/base", Size: 10}},
		Delta: &manifests.Delta{Materialize: &manifests.Materialization{
			Bases: []manifests.Base{{Key: "p/t/base", Offset: 0, Length: 10}}, TruncateBefore: 4}}})
	if read, err := fsm.PlanReadsRecords(h.f, mat, h.now); err != nil || read {
		t.Fatalf("planning a materialization onto a new base: read a record %v, error %v", read, err)
	}
	mustOK(t, h.mustApply(fsm.CmdTaskAck, mat))
	h.fsck()
}
