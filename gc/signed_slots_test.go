package gc

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// signedAck is the ack of epoch n of w committing key (one segment),
// stamped with the time at.
func (e *env) signedAck(w *worker, n uint64, key string, at time.Time) *fsm.Result {
	e.t.Helper()
	e.do(fsm.CmdEpochBegin, fsm.EpochBegin{Job: w.job, Generation: w.gen, Epoch: n})
	w.seq++
	d := manifests.Delta{AddSegments: []manifests.Segment{{Key: key, Length: logSize, FirstSeq: w.seq, LastSeq: w.seq}}}
	cmd, err := fsm.Encode(fsm.CmdTaskAck, at, fsm.TaskAck{Job: w.job, Generation: w.gen, Epoch: n, Task: w.task,
		Manifest: &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: key, Size: logSize}}, Delta: &d}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.applyLocked(cmd)
}

// TestOrphanSweepSignedSlots: the orphan sweep never deletes the upload
// of a signed slot (fsm/upload_slots.go) an ack may still commit, however
// old the object looks; once its lease is behind the sweep's cut-off it
// deletes the uncommitted ones and keeps the committed; and an ack that
// comes while the sweep deletes, stamped by a clock that says the lease
// still runs, is refused, so nothing referenced is ever deleted.
func TestOrphanSweepSignedSlots(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 1)
	slotKey := bytes.Repeat([]byte{3}, fsm.SlotKeyLen)
	e.do(fsm.CmdSlotKeyInit, fsm.SlotKeyInit{Key: slotKey})
	issued := e.clock.Now()
	lease := issued.Add(time.Hour)
	keys := fsm.NewSlotSigner(slotKey).Keys("j", "t0", 1, lease, 9, 3)
	lost, acked, late := keys[0], keys[1], keys[2]
	for _, k := range keys {
		e.put(k, logSize)
		e.age(k, issued.Add(-3*time.Hour)) // older than the orphan grace
	}
	c := e.collector(baseConfig())

	rep := e.runOnce(c, RunOptions{Orphans: true})
	if rep.OrphansDeleted != 0 {
		t.Fatalf("swept %d objects of slots whose lease runs: %+v", rep.OrphansDeleted, rep)
	}
	for _, k := range keys {
		if !e.has(k) {
			t.Fatalf("%s swept while its slot's lease runs", k)
		}
	}
	if res := e.signedAck(w, 1, acked, e.clock.Now()); res.Err != nil {
		t.Fatal(res.Err)
	}

	// Two hours on, the sweep's cut-off (its clock minus the hour of
	// grace) is past the lease. An ack of the late key arrives while the
	// sweep deletes, stamped by a clock before the lease's end.
	e.clock.Advance(2*time.Hour + time.Minute)
	gate := make(chan struct{})
	e.store.set(func(s *testStore) { s.gate = gate })
	done := make(chan *Report)
	go func() {
		rep, err := c.RunOnce(t.Context(), RunOptions{Orphans: true})
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	<-e.store.entered
	res := e.signedAck(w, 2, late, issued.Add(time.Minute))
	var re *wire.RuleError
	if !errors.As(res.Err, &re) || re.Code != wire.CodeBlobExpired {
		t.Errorf("an ack of a slot behind the cut-off, during the sweep: %v, want blob_expired", res.Err)
	}
	close(gate)
	rep = <-done
	if rep.OrphansDeleted != 2 {
		t.Fatalf("swept %d, want the two uncommitted uploads: %+v", rep.OrphansDeleted, rep)
	}
	if e.has(lost) || e.has(late) {
		t.Fatal("an uncommitted upload of an ended slot was not swept")
	}
	if !e.has(acked) {
		t.Fatal("the committed upload was swept")
	}
	e.checkReferencedPresent("j")
	if cut, err := e.f.SlotCutoff(); err != nil || !cut.Equal(e.clock.Now().Add(-time.Hour)) {
		t.Fatalf("slot cut-off %v %v, want the sweep's clock minus the grace", cut, err)
	}
	e.fsck()
}

// TestOrphanSweepDryRunProposesNoCutoff: a dry run reports what a sweep
// would delete and proposes nothing, not even the cut-off.
func TestOrphanSweepDryRunProposesNoCutoff(t *testing.T) {
	e := newEnv(t)
	e.startJob("j", 1)
	slotKey := bytes.Repeat([]byte{3}, fsm.SlotKeyLen)
	e.do(fsm.CmdSlotKeyInit, fsm.SlotKeyInit{Key: slotKey})
	k := fsm.NewSlotSigner(slotKey).Keys("j", "t0", 1, e.clock.Now().Add(time.Hour), 9, 1)[0]
	e.put(k, logSize)
	e.age(k, e.clock.Now())
	e.clock.Advance(3 * time.Hour)
	c := e.collector(baseConfig())
	proposed := e.proposedCount()
	rep := e.runOnce(c, RunOptions{DryRun: true, Orphans: true})
	if rep.OrphansDeleted != 1 || e.proposedCount() != proposed || !e.has(k) {
		t.Fatalf("dry run: %+v, %d proposals (were %d), object kept %v", rep, e.proposedCount(), proposed, e.has(k))
	}
}
