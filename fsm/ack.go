package fsm

import "github.com/metastore/metastore/wire"

// A task's ack of an epoch as a state operation, in three steps:
//
//   - load reads, once, every record the ack's rules need: the job (or
//     its tombstone), the acking task, the acked epoch, the task's
//     earlier ack of it, and the task's head lineage when the task has
//     state (records_store.go, lineage.go);
//   - decide checks every rule, in order, on what load read, touching no
//     storage, and plans the writes; a state task's manifest change is
//     planned by planManifest (lineage_plan.go), which reads the
//     lineage's records and the blobs it needs;
//   - write applies them: the payloads, the manifest change and its
//     references (lineage_apply.go, blob_refs.go), the ack record and the
//     epoch's count, and the epoch's completion when this ack is its
//     last (epochs.go).
//
// A rule broken is answered before the first write, so the command writes
// nothing (the batch's transaction is not rolled back for a rule error).

// ackTask applies a task's ack of an epoch. A retried ack, with the
// content already stored, answers the stored ack.
func ackTask(t *txn, c Command, p *TaskAck) (*ackResult, error) {
	op := &ackOp{c: c, p: p}
	if err := op.load(t); err != nil {
		return nil, err
	}
	retry, err := op.decide(t)
	if err != nil || retry != nil {
		return retry, err
	}
	return op.write(t)
}

// ackOp is an ack being applied: the command, what load read and what
// decide planned.
type ackOp struct {
	c Command
	p *TaskAck

	// j is the job; nil when it does not exist, ts then its tombstone
	// (nil: none). Nothing else is read for a missing job.
	j  *jobRecord
	ts *jobTombstone
	// tk is the acking task in the ack's generation, e the acked epoch,
	// prev the task's earlier ack of it (each nil: none).
	tk   *taskRecord
	e    *epochRecord
	prev *ackRecord
	// head is the task's head lineage, read when the task has state (nil:
	// none).
	head *lineageRecord

	// hash identifies the ack's content (TaskAck.contentHash).
	hash string
	// plan is the manifest change (nil: none); abandoned is a manifest of
	// an earlier attempt that this attempt leaves.
	plan      *manifestPlan
	abandoned *lineageRecord
}

// load reads the records the ack's rules need. It checks nothing.
func (op *ackOp) load(t *txn) error {
	p := op.p
	var err error
	if op.j, err = t.job(p.Job); err != nil {
		return err
	}
	if op.j == nil {
		op.ts, err = t.tombstone(p.Job)
		return err
	}
	if op.tk, err = t.task(p.Job, p.Generation, p.Task); err != nil {
		return err
	}
	if op.e, err = t.epoch(p.Job, p.Epoch); err != nil {
		return err
	}
	if op.prev, err = t.ack(p.Job, p.Epoch, p.Task); err != nil {
		return err
	}
	if op.tk != nil && op.tk.Caps.Has(wire.KindState) {
		op.head, err = t.headLineage(p.Job, p.Task)
	}
	return err
}

// decide runs the rules of an ack in order on what load read, and stops
// at the first broken one; then it plans the manifest change. It writes
// nothing. It answers the stored ack for a retry.
func (op *ackOp) decide(t *txn) (*ackResult, error) {
	p := op.p
	if op.j == nil {
		return nil, missingJobErr(p.Job, op.ts)
	}
	if err := checkGeneration(op.j, p.Generation); err != nil {
		return nil, err
	}
	if err := checkAckingTask(op.tk, p); err != nil {
		return nil, err
	}
	if err := checkAckCapabilities(op.tk, p); err != nil {
		return nil, err
	}
	if err := checkAckedEpoch(op.j, op.e, p); err != nil {
		return nil, err
	}
	op.hash = p.contentHash()
	if op.prev != nil {
		// A task acks an epoch once. The same content again is a retry,
		// answered with the stored ack (even after the epoch completed);
		// other content is a conflict.
		if op.prev.ContentHash != op.hash {
			return nil, ruleErr(wire.CodeConflict, "task", "task %q already acknowledged epoch %d with different content", p.Task, p.Epoch)
		}
		return &ackResult{Ack: op.prev, Epoch: op.e}, nil
	}
	if op.e.State != epochPending {
		return nil, ruleErr(wire.CodeEpochNotPending, "epoch", "epoch %d is %s", p.Epoch, op.e.State)
	}
	return nil, op.decideManifest(t)
}

// decideManifest decides the manifest change of a state task's ack
// (planManifest in lineage_plan.go checks its rules). A state task without
// a manifest in this ack keeps its manifest unchanged, if this attempt has
// one. A manifest of an earlier attempt that this attempt does not continue
// is abandoned: it lives on only in the checkpoints that hold it.
func (op *ackOp) decideManifest(t *txn) error {
	p := op.p
	m := p.Manifest
	if m == nil && !op.tk.Caps.Has(wire.KindState) {
		return nil
	}
	if m == nil {
		switch l := op.head; {
		case l != nil && l.Generation == p.Generation:
			m = &ManifestAck{}
		case l != nil:
			op.abandoned = l
		}
	}
	if m == nil {
		return nil
	}
	var err error
	op.plan, err = planManifest(t, op.j, p.Generation, p.Epoch, op.tk, op.head, m, op.c.Time, op.c.Version >= 2, op.c.Version >= 4)
	return err
}

// write records a checked ack: its payloads, its manifest change and the
// references that moves, the ack record, and the epoch's count; the ack
// that brings the count to the expected one completes the epoch.
func (op *ackOp) write(t *txn) (*ackResult, error) {
	p, e, now := op.p, op.e, op.c.Time
	ack := &ackRecord{Task: p.Task, At: now, Delay: Duration(now.Sub(e.BeganAt)), Sizes: map[Kind]int{}, ContentHash: op.hash, Index: t.index}
	for k, v := range p.Payloads {
		ack.Sizes[k] = len(v)
		e.PayloadBytes += int64(len(v))
	}
	e.Acked++
	e.ModifyIndex = t.index
	res := &ackResult{Ack: ack, Epoch: e, Completed: e.Acked >= e.Expected}
	if err := op.writeManifest(t, ack); err != nil {
		return nil, err
	}
	if err := t.putAck(p.Job, p.Epoch, ack, p.Payloads); err != nil {
		return nil, err
	}
	if !res.Completed {
		return res, t.putEpoch(e)
	}
	return res, completeAckedEpoch(t, op.j, e, now)
}

// writeManifest applies the planned manifest change (the lineage's
// records and blob references) and detaches an abandoned manifest.
func (op *ackOp) writeManifest(t *txn, ack *ackRecord) error {
	p := op.p
	if op.plan != nil {
		var err error
		if ack.Lineage, err = applyManifest(t, op.j, p.Generation, p.Epoch, p.Task, op.plan, op.c.Time); err != nil {
			return err
		}
	}
	if op.abandoned == nil {
		return nil
	}
	if err := t.del(bucketHeads, headKey(p.Job, p.Task)); err != nil {
		return err
	}
	return detach(t, op.abandoned, op.c.Time)
}
