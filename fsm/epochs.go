package fsm

import (
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

// checkAckingTask: the task of the ack's generation that acks must be in
// the attempt and expected to ack.
func checkAckingTask(tk *taskRecord, p *TaskAck) error {
	if tk == nil {
		return ruleErr(wire.CodeTaskNotInAttempt, "task", "task %q is not in attempt generation %d", p.Task, p.Generation)
	}
	if !tk.Caps.Expected() {
		return ruleErr(wire.CodeTaskNotExpected, "task", "task %q has no capabilities and is not expected to ack", p.Task)
	}
	return nil
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

// checkAckedEpoch: the acked epoch e of j must exist and belong to the
// ack's generation.
func checkAckedEpoch(j *jobRecord, e *epochRecord, p *TaskAck) error {
	if e == nil {
		return missingEpochErr(j, p.Epoch)
	}
	if e.Generation != p.Generation {
		return ruleErr(wire.CodeEpochNotPending, "epoch", "epoch %d belongs to generation %d and is %s", p.Epoch, e.Generation, e.State)
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
	ts, err := t.tombstone(id)
	if err != nil {
		return nil, err
	}
	return nil, missingJobErr(id, ts)
}

// missingJobErr is the answer to a write for job id, which does not exist:
// job_deleted when its tombstone ts names it, not_found otherwise.
func missingJobErr(id string, ts *jobTombstone) error {
	if ts != nil {
		return jobDeletedErr(id, ts)
	}
	return ruleErr(wire.CodeNotFound, "job", "job %q does not exist", id)
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
		return nil, missingEpochErr(j, n)
	}
	return e, nil
}

// missingEpochErr is the answer for epoch n of j, which has no record. An
// epoch at or below the last begun one was either forgotten (beyond the
// job's history) or skipped (epochs may be begun out of step); the state
// keeps nothing that tells the two apart, so the answer names both.
func missingEpochErr(j *jobRecord, n uint64) error {
	if n <= j.LastEpoch {
		return ruleErr(wire.CodeNotFound, "epoch", "epoch %d of job %q is no longer remembered (beyond the job's history), or was skipped and never begun", n, j.ID)
	}
	return ruleErr(wire.CodeNotFound, "epoch", "epoch %d of job %q was never begun", n, j.ID)
}

// The end of epochs (completion, aborts, retention, history, attempts)
// reads what it needs, decides every change in memory (epochWrites), and
// then writes it in one step (epochWrites.apply): the epoch records, the
// deadlines and payloads of the epochs that ended, the manifests' release
// of those epochs (epochLeft, lineage_release.go), then the history and
// the attempts that go.

// completeAckedEpoch completes pending epoch e of j, whose last expected
// ack was just written: its deadline goes, and j is written.
func completeAckedEpoch(t *txn, j *jobRecord, e *epochRecord, now time.Time) error {
	j.Pending = slices.DeleteFunc(j.Pending, func(n uint64) bool { return n == e.Epoch })
	j.UpdatedAt = now
	j.ModifyIndex = t.index
	return endEpochs(t, j, e, now, true)
}

// completeEpoch marks e completed (e is not in j.Pending any more), aborts
// older pending epochs, which can no longer complete usefully, applies
// retention, trims the history and prunes attempts. The caller writes j.
func completeEpoch(t *txn, j *jobRecord, e *epochRecord, now time.Time) error {
	return endEpochs(t, j, e, now, false)
}

// endEpochs is the completion of e (completeEpoch); acked says e was
// pending, its deadline to be deleted and j written with the rest.
func endEpochs(t *txn, j *jobRecord, e *epochRecord, now time.Time, acked bool) error {
	var older []*epochRecord
	for _, n := range j.Pending {
		if n < e.Epoch {
			o, err := t.pendingEpoch(j, n)
			if err != nil {
				return err
			}
			older = append(older, o)
		}
	}
	recs, err := t.epochRefs(j.ID, j.Retained)
	if err != nil {
		return err
	}
	gens, err := t.attemptGens(j.ID)
	if err != nil {
		return err
	}
	e.State = epochCompleted
	e.CompletedAt = &now
	e.ModifyIndex = t.index
	w := &epochWrites{index: t.index, now: now, put: []*epochRecord{e}}
	if acked {
		w.job = j
		w.deadlines = append(w.deadlines, e)
	}
	for _, o := range older {
		w.abort(j, o, fmt.Sprintf("subsumed by completed epoch %d", e.Epoch))
	}
	j.Retained = append(j.Retained, e.Epoch)
	j.LatestCompleted = e.Epoch
	recs[e.Epoch] = e
	w.retain(j, recs)
	w.trim(j)
	w.prune(j, recs, gens)
	return w.apply(t, j.ID)
}

// abortEpoch aborts pending epoch n of j and drops its payloads. The caller
// writes j.
func abortEpoch(t *txn, j *jobRecord, n uint64, now time.Time, reason string) error {
	e, err := t.pendingEpoch(j, n)
	if err != nil {
		return err
	}
	w := &epochWrites{index: t.index, now: now}
	w.abort(j, e, reason)
	return w.apply(t, j.ID)
}

// applyRetention subsumes the completed epochs beyond the job's retention
// (epochWrites.retain).
func applyRetention(t *txn, j *jobRecord, now time.Time) error {
	recs, err := t.epochRefs(j.ID, j.Retained)
	if err != nil {
		return err
	}
	w := &epochWrites{index: t.index, now: now}
	w.retain(j, recs)
	return w.apply(t, j.ID)
}

// pruneAttempts deletes the attempts (and their task sets) of old
// generations that no retained epoch references (epochWrites.prune).
func pruneAttempts(t *txn, j *jobRecord) error {
	recs, err := t.epochRefs(j.ID, j.Retained)
	if err != nil {
		return err
	}
	gens, err := t.attemptGens(j.ID)
	if err != nil {
		return err
	}
	w := &epochWrites{index: t.index}
	w.prune(j, recs, gens)
	return w.apply(t, j.ID)
}

// trimHistory forgets the oldest ended epochs beyond the job's history
// limit (epochWrites.trim).
func trimHistory(t *txn, j *jobRecord) error {
	w := &epochWrites{index: t.index}
	w.trim(j)
	return w.apply(t, j.ID)
}

// epochWrites is what the end of a job's epochs decided to write; its
// methods decide, in memory, and change the job record they are given.
type epochWrites struct {
	index uint64
	now   time.Time
	// job, when set, is the job record to write with them.
	job *jobRecord
	// put are the epoch records changed, in the order decided.
	put []*epochRecord
	// deadlines are the pending epochs that ended (aborted, or completed
	// by an ack): their deadlines go.
	deadlines []*epochRecord
	// left are the epochs no longer live, in the order they ended: their
	// payloads go and their lineages drop them (epochLeft).
	left []uint64
	// forget are the ended epochs beyond the history: their records,
	// acks and payloads go.
	forget []uint64
	// drop are the attempt generations pruned, with their task sets.
	drop []uint64
}

// abort marks pending epoch e of j aborted.
func (w *epochWrites) abort(j *jobRecord, e *epochRecord, reason string) {
	now := w.now
	e.State = epochAborted
	e.EndedAt = &now
	e.Reason = reason
	e.ModifyIndex = w.index
	w.put = append(w.put, e)
	w.deadlines = append(w.deadlines, e)
	w.left = append(w.left, e.Epoch)
	j.Pending = slices.DeleteFunc(j.Pending, func(p uint64) bool { return p == e.Epoch })
	j.Ended = append(j.Ended, e.Epoch)
	j.UpdatedAt = now
	j.ModifyIndex = w.index
}

// retain subsumes the completed epochs beyond the job's retention: the
// newest Retained unpinned completed epochs stay, pinned ones always
// stay, the rest become subsumed and lose their payloads. recs holds the
// records of j.Retained.
func (w *epochWrites) retain(j *jobRecord, recs map[uint64]*epochRecord) {
	keep := make([]uint64, 0, len(j.Retained))
	unpinned := 0
	var subsume []uint64
	for i := len(j.Retained) - 1; i >= 0; i-- {
		n := j.Retained[i]
		e := recs[n]
		if e.Pinned || unpinned < j.Config.Retained {
			if !e.Pinned {
				unpinned++
			}
			keep = append(keep, n)
			continue
		}
		now := w.now
		e.State = epochSubsumed
		e.EndedAt = &now
		e.ModifyIndex = w.index
		w.put = append(w.put, e)
		w.left = append(w.left, n)
		subsume = append(subsume, n)
	}
	if len(subsume) == 0 {
		return
	}
	// keep was built newest first.
	slices.Reverse(keep)
	j.Retained = keep
	for i := len(subsume) - 1; i >= 0; i-- {
		j.Ended = append(j.Ended, subsume[i])
	}
}

// trim forgets the oldest ended epochs beyond the job's history limit.
func (w *epochWrites) trim(j *jobRecord) {
	for len(j.Ended) > j.Config.History {
		w.forget = append(w.forget, j.Ended[0])
		j.Ended = j.Ended[1:]
	}
}

// prune drops the attempts of old generations, gens being those stored,
// that no retained epoch references (recs holds their records): no
// restore can name them any more. Only referenced attempts remain, so
// the list is short. Attempt ids are kept, so a retried start of an old
// attempt is still fenced.
func (w *epochWrites) prune(j *jobRecord, recs map[uint64]*epochRecord, gens []uint64) {
	keep := map[uint64]bool{j.Generation: true}
	for _, n := range j.Retained {
		keep[recs[n].Generation] = true
	}
	for _, g := range gens {
		if !keep[g] {
			w.drop = append(w.drop, g)
		}
	}
}

// apply writes what w decided for job's epochs.
func (w *epochWrites) apply(t *txn, job string) error {
	for _, e := range w.put {
		if err := t.putEpoch(e); err != nil {
			return err
		}
	}
	if w.job != nil {
		if err := t.putJob(w.job); err != nil {
			return err
		}
	}
	for _, e := range w.deadlines {
		if err := t.del(bucketDeadlines, deadlineKey(e.Deadline.UnixNano(), job, e.Epoch)); err != nil {
			return err
		}
	}
	for _, n := range w.left {
		if err := t.deletePrefix(bucketPayloads, jobNumKey(job, n)); err != nil {
			return err
		}
	}
	for _, n := range w.left {
		if err := epochLeft(t, job, n, w.now); err != nil {
			return err
		}
	}
	for _, n := range w.forget {
		prefix := jobNumKey(job, n)
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
	for _, g := range w.drop {
		if err := t.del(bucketAttempts, jobNumKey(job, g)); err != nil {
			return err
		}
		if err := t.deletePrefix(bucketTasks, jobNumKey(job, g)); err != nil {
			return err
		}
	}
	return nil
}
