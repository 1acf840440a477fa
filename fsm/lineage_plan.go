package fsm

import (
	"fmt"
	"time"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// Planning a state ack's manifest: every rule is checked against the
// stored state and the writes are decided, before anything is written.

// manifestPlan is what applyManifest decided, before it writes.
type manifestPlan struct {
	mode   string // continue, rollback, fork, fresh
	head   *lineageRecord
	source *lineageRecord // fork: the lineage copied from
	at     uint64         // rollback, fork: the base epoch
	change manifests.Change
	commit []BlobCommit
	strict bool // task-ack version 2 rules
}

// planManifest checks a state ack's manifest against the stored state and
// decides what to write. It writes nothing. head is the task's head
// lineage, as the ack read it (nil: none). strict applies the rules of
// task-ack version 2 (crossjob.go): another job's checkpoint is a base only
// when it is pinned, another job's blobs are referenced only when inherited
// from such a base, and upload slots of an earlier attempt are refused.
// distinct applies the rule of task-ack version 4: the manifest left holds
// no base and segment at one reference (manifests.Plan); entries of earlier
// versions replay without it (manifests.PlanSharingRefs).
func planManifest(t *txn, j *jobRecord, gen, epoch uint64, tk *taskRecord, head *lineageRecord, m *ManifestAck, now time.Time, strict, distinct bool) (*manifestPlan, error) {
	if m.Delta != nil && !tk.Caps.Incremental() {
		return nil, ruleErr(wire.CodeInvalid, "manifest.delta", "task %q does not have the incremental capability: send the full manifest", tk.ID)
	}
	if m.Full != nil && tk.Caps.Incremental() {
		return nil, ruleErr(wire.CodeInvalid, "manifest.full", "task %q has the incremental capability: send a delta", tk.ID)
	}
	p := &manifestPlan{head: head, commit: m.Blobs, strict: strict}
	var err error
	view := lineageView{t: t, read: map[recordID]*record{}}
	switch {
	case p.head != nil && p.head.Generation == gen:
		if m.Base != nil {
			return nil, ruleErr(wire.CodeConflict, "manifest.base", "the base is given on the first ack of an attempt only; this attempt already acknowledged epoch %d", p.head.LastEpoch)
		}
		if epoch <= p.head.LastEpoch {
			return nil, ruleErr(wire.CodeEpochNotIncreasing, "epoch", "task %q already acknowledged epoch %d; acks of a task go in epoch order", tk.ID, p.head.LastEpoch)
		}
		p.mode, view.lid = "continue", p.head.ID
	case m.Base == nil:
		p.mode = "fresh"
	default:
		src, err := baseLineage(t, j.ID, m.Base, strict)
		if err != nil {
			return nil, err
		}
		p.source, p.at = src, m.Base.Epoch
		view.lid, view.at = src.ID, m.Base.Epoch
		p.mode = "fork"
		if p.head != nil && src.ID == p.head.ID && len(src.Epochs) > 0 && src.Epochs[len(src.Epochs)-1] == m.Base.Epoch {
			p.mode = "rollback"
		}
	}
	d := m.delta()
	if m.Full != nil && view.lid != 0 {
		cur, err := view.manifest()
		if err != nil {
			return nil, err
		}
		d = manifests.Diff(*cur, *m.Full)
	}
	if err := view.noteUnreferenced(d); err != nil {
		return nil, err
	}
	plan := manifests.Plan
	if !distinct {
		plan = manifests.PlanSharingRefs
	}
	if p.change, err = plan(view, d); err != nil {
		return nil, manifestErr("manifest", err)
	}
	if strict {
		if err := checkForeignBlobs(t, j.ID, func() (lineageView, error) { return view, nil }, p.change, m.Blobs); err != nil {
			return nil, err
		}
	}
	if p.mode == "continue" || p.mode == "rollback" {
		if err := checkReuse(t, p, view); err != nil {
			return nil, err
		}
	}
	committing := map[string]BlobCommit{}
	for _, bc := range m.Blobs {
		b, err := t.blob(bc.Key)
		if err == nil && b == nil {
			b, err = t.signedIntent(bc.Key)
		}
		if err != nil {
			return nil, err
		}
		if err := checkCommit(b, bc, j.ID, gen, now, strict); err != nil {
			return nil, err
		}
		committing[bc.Key] = bc
	}
	err = p.change.CheckRanges(func(key string) (uint64, error) {
		if bc, ok := committing[key]; ok {
			return bc.Size, nil
		}
		b, err := t.blob(key)
		if err != nil {
			return 0, err
		}
		return referenceable(b, key, now)
	})
	if err != nil {
		return nil, manifestErr("manifest", err)
	}
	return p, nil
}

// checkReuse refuses to add a segment or base whose reference (blob key and
// offset) still has a record in the lineage: a record dropped from the
// current manifest but held by an older live checkpoint, or one this very
// change drops. A record is keyed by its reference, so reusing one would
// overwrite the interval an older checkpoint depends on. Records a rollback
// is about to delete do not count.
func checkReuse(t *txn, p *manifestPlan, view lineageView) error {
	dropped := map[manifests.Ref]bool{}
	for _, r := range p.change.DropSegments {
		dropped[r] = true
	}
	for _, b := range p.change.DropBases {
		dropped[b.ID()] = true
	}
	check := func(kind byte, ref manifests.Ref) error {
		r, err := view.record(kind, ref)
		if err != nil || r == nil {
			return err
		}
		if p.mode == "rollback" && r.Added > p.at {
			return nil
		}
		if !view.present(r) || dropped[ref] {
			return ruleErr(wire.CodeManifestMismatch, "manifest", "%s: this reference was dropped from the task's manifest and an older checkpoint still holds it; a reference cannot be reused: write the data at a new key or offset", ref)
		}
		return nil
	}
	for _, b := range p.change.AddBases {
		if err := check(kindBase, b.ID()); err != nil {
			return err
		}
	}
	for _, sg := range p.change.AddSegments {
		if err := check(kindSegment, sg.ID()); err != nil {
			return err
		}
	}
	return nil
}

// baseLineage resolves the checkpoint a task restored from to the lineage
// holding its manifest.
func baseLineage(t *txn, job string, base *BaseRef, strict bool) (*lineageRecord, error) {
	if strict && base.Job != job {
		if err := checkForeignBase(t, job, base); err != nil {
			return nil, err
		}
	}
	bj, err := t.job(base.Job)
	if err != nil {
		return nil, err
	}
	if bj == nil {
		return nil, ruleErr(wire.CodeNotFound, "manifest.base.job", "job %q does not exist", base.Job)
	}
	e, err := t.epoch(base.Job, base.Epoch)
	if err != nil {
		return nil, err
	}
	if e == nil || e.State != epochCompleted {
		state := "not remembered"
		if e != nil {
			state = string(e.State)
		}
		return nil, ruleErr(wire.CodeEpochNotCompleted, "manifest.base.epoch", "base epoch %d of job %q is %s; a base is a completed, retained epoch", base.Epoch, base.Job, state)
	}
	a, err := t.ack(base.Job, base.Epoch, base.Task)
	if err != nil {
		return nil, err
	}
	if a == nil || a.Lineage == 0 {
		return nil, ruleErr(wire.CodeNotFound, "manifest.base.task", "epoch %d of job %q holds no manifest for task %q", base.Epoch, base.Job, base.Task)
	}
	l, err := t.lineage(a.Lineage)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, &corruptError{fmt.Sprintf("ack names missing lineage %d", a.Lineage)}
	}
	return l, nil
}

// checkCommit checks that an ack may commit blob b: an intent of this job
// whose lease has not ended (strict: and that this attempt asked for), or a
// blob already committed with the same size.
func checkCommit(b *blobRecord, bc BlobCommit, job string, gen uint64, now time.Time, strict bool) error {
	field := "manifest.blobs"
	switch {
	case b == nil:
		return ruleErr(wire.CodeBlobUnknown, field, "blob %q has no upload intent; ask for an upload slot first", bc.Key)
	case b.State == blobIntent:
		if b.Job != job {
			return ruleErr(wire.CodeInvalid, field, "blob %q is an upload of job %q", bc.Key, b.Job)
		}
		if b.LeaseUntil != nil && now.After(*b.LeaseUntil) {
			return ruleErr(wire.CodeBlobExpired, field, "the upload intent of blob %q expired at %s", bc.Key, b.LeaseUntil.Format(time.RFC3339))
		}
		if strict && b.Generation != 0 && b.Generation != gen {
			return ruleErr(wire.CodeFenced, field, "blob %q is an upload slot of attempt generation %d, superseded by generation %d: its upload URL was handed to a worker of that attempt; ask for new upload slots", bc.Key, b.Generation, gen)
		}
		return nil
	case b.State == blobLive:
		if b.Size != bc.Size {
			return ruleErr(wire.CodeConflict, field, "blob %q was committed with size %d, not %d", bc.Key, b.Size, bc.Size)
		}
		return nil
	}
	return blobStateErr(b, field)
}

// referenceable returns the size of a blob a manifest may reference.
func referenceable(b *blobRecord, key string, now time.Time) (uint64, error) {
	field := "manifest"
	switch {
	case b == nil:
		return 0, ruleErr(wire.CodeBlobUnknown, field, "blob %q is not known", key)
	case b.State == blobLive:
		return b.Size, nil
	case b.State == blobIntent:
		return 0, ruleErr(wire.CodeInvalid, "manifest.blobs", "blob %q is an upload not yet committed: list it in manifest.blobs with its size", key)
	}
	return 0, blobStateErr(b, field)
}

func blobStateErr(b *blobRecord, field string) error {
	switch b.State {
	case blobDeleting:
		return ruleErr(wire.CodeBlobDeleting, field, "blob %q is being deleted by the garbage collector and cannot be referenced", b.Key)
	case blobGone:
		return ruleErr(wire.CodeBlobGone, field, "blob %q was deleted by the garbage collector", b.Key)
	case blobExpired:
		return ruleErr(wire.CodeBlobExpired, field, "the upload intent of blob %q expired before it was committed", b.Key)
	}
	return ruleErr(wire.CodeConflict, field, "blob %q is %s", b.Key, b.State)
}
