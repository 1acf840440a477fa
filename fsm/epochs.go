package fsm

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/metastore/metastore/wire"
)

// The epoch lifecycle as state operations: the handlers of epochs, jobs
// and attempts (cmd_epochs.go, cmd_jobs.go) decode and validate a command
// and call one of these; these check the rules against the state, then
// write, and call the manifest and reference operations (lineage_*.go) for
// what the change does to stored manifests.

// ackTask applies a task's ack of an epoch: it checks every rule
// (ackOp.check), writing nothing, then writes the ack (ackOp.write). A
// retried ack, with the content already stored, answers the stored ack.
func ackTask(t *txn, c Command, p *TaskAck) (*ackResult, error) {
	op := &ackOp{c: c, p: p}
	retry, err := op.check(t)
	if err != nil || retry != nil {
		return retry, err
	}
	return op.write(t)
}

// ackOp is an ack being applied: the command and what its checks read and
// decided.
type ackOp struct {
	c Command
	p *TaskAck
	j *jobRecord
	// tk is the acking task in the ack's generation; e the acked epoch.
	tk *taskRecord
	e  *epochRecord
	// hash identifies the ack's content (TaskAck.contentHash).
	hash string
	// plan is the manifest change (nil: none); abandoned is a manifest of
	// an earlier attempt that this attempt leaves.
	plan      *manifestPlan
	abandoned *lineageRecord
}

// check runs the rules of an ack in order and stops at the first broken
// one. It writes nothing. It answers the stored ack for a retry.
func (op *ackOp) check(t *txn) (*ackResult, error) {
	p := op.p
	var err error
	if op.j, err = writableJob(t, p.Job); err != nil {
		return nil, err
	}
	if err := checkGeneration(op.j, p.Generation); err != nil {
		return nil, err
	}
	if op.tk, err = ackingTask(t, p); err != nil {
		return nil, err
	}
	if err := checkAckCapabilities(op.tk, p); err != nil {
		return nil, err
	}
	if op.e, err = ackedEpoch(t, op.j, p); err != nil {
		return nil, err
	}
	op.hash = p.contentHash()
	if retry, err := checkAckRetry(t, p, op.e, op.hash); err != nil || retry != nil {
		return retry, err
	}
	if op.e.State != epochPending {
		return nil, ruleErr(wire.CodeEpochNotPending, "epoch", "epoch %d is %s", p.Epoch, op.e.State)
	}
	return nil, op.decideManifest(t)
}

// ackingTask is the task of the ack's generation that acks: it must be in
// the attempt and expected to ack.
func ackingTask(t *txn, p *TaskAck) (*taskRecord, error) {
	tk, err := t.task(p.Job, p.Generation, p.Task)
	if err != nil {
		return nil, err
	}
	if tk == nil {
		return nil, ruleErr(wire.CodeTaskNotInAttempt, "task", "task %q is not in attempt generation %d", p.Task, p.Generation)
	}
	if !tk.Caps.Expected() {
		return nil, ruleErr(wire.CodeTaskNotExpected, "task", "task %q has no capabilities and is not expected to ack", p.Task)
	}
	return tk, nil
}

// checkAckCapabilities: every payload kind, and a manifest (state), is a
// capability the task registered.
func checkAckCapabilities(tk *taskRecord, p *TaskAck) error {
	for _, k := range sortedKinds(p.Payloads) {
		if !tk.Caps.Has(k) {
			return ruleErr(wire.CodeCapabilityMissing, "payloads."+string(k), "task %q did not register capability %s", p.Task, k)
		}
	}
	if p.Manifest != nil && !tk.Caps.Has(wire.KindState) {
		return ruleErr(wire.CodeCapabilityMissing, "manifest", "task %q did not register capability state", p.Task)
	}
	return nil
}

// ackedEpoch is the acked epoch: it must exist and belong to the ack's
// generation.
func ackedEpoch(t *txn, j *jobRecord, p *TaskAck) (*epochRecord, error) {
	e, err := mustEpoch(t, j, p.Epoch)
	if err != nil {
		return nil, err
	}
	if e.Generation != p.Generation {
		return nil, ruleErr(wire.CodeEpochNotPending, "epoch", "epoch %d belongs to generation %d and is %s", p.Epoch, e.Generation, e.State)
	}
	return e, nil
}

// checkAckRetry: a task acks an epoch once. The same content again is a
// retry, answered with the stored ack (even after the epoch completed);
// other content is a conflict.
func checkAckRetry(t *txn, p *TaskAck, e *epochRecord, hash string) (*ackResult, error) {
	prev, err := t.ack(p.Job, p.Epoch, p.Task)
	if err != nil || prev == nil {
		return nil, err
	}
	if prev.ContentHash != hash {
		return nil, ruleErr(wire.CodeConflict, "task", "task %q already acknowledged epoch %d with different content", p.Task, p.Epoch)
	}
	return &ackResult{Ack: prev, Epoch: e}, nil
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
		hid, err := t.head(p.Job, p.Task)
		if err != nil {
			return err
		}
		l, err := t.lineage(hid)
		switch {
		case err != nil:
			return err
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
	op.plan, err = planManifest(t, op.j, p.Generation, p.Epoch, op.tk, m, op.c.Time, op.c.Version >= 2)
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
		if err := t.put(bucketPayloads, payloadKey(p.Job, p.Epoch, p.Task, k), v); err != nil {
			return nil, err
		}
	}
	if err := op.writeManifest(t, ack); err != nil {
		return nil, err
	}
	if err := t.putRecord(bucketAcks, taskKey(p.Job, p.Epoch, p.Task), ack); err != nil {
		return nil, err
	}
	e.Acked++
	e.ModifyIndex = t.index
	res := &ackResult{Ack: ack, Epoch: e}
	if e.Acked < e.Expected {
		return res, t.putEpoch(e)
	}
	res.Completed = true
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

// completeAckedEpoch completes pending epoch e of j, whose last expected
// ack was just written, and writes j.
func completeAckedEpoch(t *txn, j *jobRecord, e *epochRecord, now time.Time) error {
	if err := t.del(bucketDeadlines, deadlineKey(e.Deadline.UnixNano(), j.ID, e.Epoch)); err != nil {
		return err
	}
	j.Pending = slices.DeleteFunc(j.Pending, func(n uint64) bool { return n == e.Epoch })
	j.UpdatedAt = now
	j.ModifyIndex = t.index
	if err := completeEpoch(t, j, e, now); err != nil {
		return err
	}
	return t.putJob(j)
}

// checkGeneration fences writes from older attempts, and from the
// attempts of a deleted job of the same name (GenerationBase).
func checkGeneration(j *jobRecord, gen uint64) error {
	switch {
	case gen <= j.GenerationBase:
		return ruleErr(wire.CodeFenced, "generation", "generation %d belongs to a deleted job of the same name; this job's generations start above %d", gen, j.GenerationBase)
	case !j.hasAttempt():
		return ruleErr(wire.CodeNoAttempt, "generation", "job %q has no attempt yet; start one first", j.ID)
	case gen < j.Generation:
		return ruleErr(wire.CodeFenced, "generation", "generation %d was superseded by generation %d", gen, j.Generation)
	case gen > j.Generation:
		return ruleErr(wire.CodeInvalid, "generation", "generation %d does not exist (current is %d)", gen, j.Generation)
	}
	return nil
}

// writableJob is mustJob for the writes of a job's workers and operators:
// a job that was deleted answers job_deleted.
func writableJob(t *txn, id string) (*jobRecord, error) {
	j, err := t.job(id)
	if err != nil || j != nil {
		return j, err
	}
	if err := deletedJobErr(t, id); err != nil {
		return nil, err
	}
	return nil, ruleErr(wire.CodeNotFound, "job", "job %q does not exist", id)
}

func mustJob(t *txn, id string) (*jobRecord, error) {
	j, err := t.job(id)
	if err != nil {
		return nil, err
	}
	if j == nil {
		return nil, ruleErr(wire.CodeNotFound, "job", "job %q does not exist", id)
	}
	return j, nil
}

func mustEpoch(t *txn, j *jobRecord, n uint64) (*epochRecord, error) {
	e, err := t.epoch(j.ID, n)
	if err != nil {
		return nil, err
	}
	if e == nil {
		if n <= j.LastEpoch {
			return nil, ruleErr(wire.CodeNotFound, "epoch", "epoch %d of job %q is no longer remembered", n, j.ID)
		}
		return nil, ruleErr(wire.CodeNotFound, "epoch", "epoch %d of job %q was never begun", n, j.ID)
	}
	return e, nil
}

// completeEpoch marks e completed (e is not in j.Pending any more), aborts
// older pending epochs, which can no longer complete usefully, and applies
// retention. The caller writes j.
func completeEpoch(t *txn, j *jobRecord, e *epochRecord, now time.Time) error {
	e.State = epochCompleted
	e.CompletedAt = &now
	e.ModifyIndex = t.index
	if err := t.putEpoch(e); err != nil {
		return err
	}
	for _, n := range append([]uint64(nil), j.Pending...) {
		if n < e.Epoch {
			if err := abortEpoch(t, j, n, now, fmt.Sprintf("subsumed by completed epoch %d", e.Epoch)); err != nil {
				return err
			}
		}
	}
	j.Retained = append(j.Retained, e.Epoch)
	j.LatestCompleted = e.Epoch
	if err := applyRetention(t, j, now); err != nil {
		return err
	}
	if err := trimHistory(t, j); err != nil {
		return err
	}
	return pruneAttempts(t, j)
}

// abortEpoch aborts pending epoch n of j and drops its payloads. The caller
// writes j.
func abortEpoch(t *txn, j *jobRecord, n uint64, now time.Time, reason string) error {
	e, err := t.epoch(j.ID, n)
	if err != nil {
		return err
	}
	if e == nil || e.State != epochPending {
		return fmt.Errorf("fsm: job %q lists epoch %d as pending but it is not", j.ID, n)
	}
	e.State = epochAborted
	e.EndedAt = &now
	e.Reason = reason
	e.ModifyIndex = t.index
	if err := t.putEpoch(e); err != nil {
		return err
	}
	if err := t.del(bucketDeadlines, deadlineKey(e.Deadline.UnixNano(), j.ID, n)); err != nil {
		return err
	}
	if err := t.deletePrefix(bucketPayloads, jobNumKey(j.ID, n)); err != nil {
		return err
	}
	if err := epochLeft(t, j.ID, n, now); err != nil {
		return err
	}
	j.Pending = slices.DeleteFunc(j.Pending, func(p uint64) bool { return p == n })
	j.Ended = append(j.Ended, n)
	j.UpdatedAt = now
	j.ModifyIndex = t.index
	return nil
}

// applyRetention subsumes the completed epochs beyond the job's retention:
// the newest Retained unpinned completed epochs stay, pinned ones always
// stay, the rest become subsumed and lose their payloads.
func applyRetention(t *txn, j *jobRecord, now time.Time) error {
	keep := make([]uint64, 0, len(j.Retained))
	unpinned := 0
	var subsume []uint64
	for i := len(j.Retained) - 1; i >= 0; i-- {
		n := j.Retained[i]
		e, err := t.epochRef(j.ID, n)
		if err != nil {
			return err
		}
		if e.Pinned || unpinned < j.Config.Retained {
			if !e.Pinned {
				unpinned++
			}
			keep = append(keep, n)
			continue
		}
		e.State = epochSubsumed
		e.EndedAt = &now
		e.ModifyIndex = t.index
		if err := t.putEpoch(e); err != nil {
			return err
		}
		if err := t.deletePrefix(bucketPayloads, jobNumKey(j.ID, n)); err != nil {
			return err
		}
		if err := epochLeft(t, j.ID, n, now); err != nil {
			return err
		}
		subsume = append(subsume, n)
	}
	if len(subsume) == 0 {
		return nil
	}
	// keep was built newest first.
	for l, r := 0, len(keep)-1; l < r; l, r = l+1, r-1 {
		keep[l], keep[r] = keep[r], keep[l]
	}
	j.Retained = keep
	for i := len(subsume) - 1; i >= 0; i-- {
		j.Ended = append(j.Ended, subsume[i])
	}
	return nil
}

// pruneAttempts deletes the attempts (and their task sets) of old
// generations that no retained epoch references: no restore can name them
// any more. Only referenced attempts remain, so the scan is short. Attempt
// ids are kept, so a retried start of an old attempt is still fenced.
func pruneAttempts(t *txn, j *jobRecord) error {
	keep := map[uint64]bool{j.Generation: true}
	for _, n := range j.Retained {
		e, err := t.epochRef(j.ID, n)
		if err != nil {
			return err
		}
		keep[e.Generation] = true
	}
	var drop []uint64
	prefix := jobPrefix(j.ID)
	err := t.scan(bucketAttempts, prefix, func(k, _ []byte) (bool, error) {
		if len(k) != len(prefix)+8 {
			return false, &corruptError{fmt.Sprintf("attempt key %q", k)}
		}
		if gen := binary.BigEndian.Uint64(k[len(prefix):]); !keep[gen] {
			drop = append(drop, gen)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, g := range drop {
		if err := t.del(bucketAttempts, jobNumKey(j.ID, g)); err != nil {
			return err
		}
		if err := t.deletePrefix(bucketTasks, jobNumKey(j.ID, g)); err != nil {
			return err
		}
	}
	return nil
}

// trimHistory forgets the oldest ended epochs beyond the job's history
// limit: their records and acks are deleted.
func trimHistory(t *txn, j *jobRecord) error {
	for len(j.Ended) > j.Config.History {
		n := j.Ended[0]
		j.Ended = j.Ended[1:]
		prefix := jobNumKey(j.ID, n)
		if err := t.del(bucketEpochs, prefix); err != nil {
			return err
		}
		if err := t.deletePrefix(bucketAcks, prefix); err != nil {
			return err
		}
		if err := t.deletePrefix(bucketPayloads, prefix); err != nil {
			return err
		}
	}
	return nil
}
