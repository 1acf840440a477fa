package fsm

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"

	"github.com/metastore/metastore/wire"
)

// MemberUpsert records a member's addresses.
type MemberUpsert struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
}

// Validate checks a record at the current version: the id, and addresses
// other members and clients can dial (CheckMemberAddr).
func (m *MemberUpsert) Validate() error {
	if err := wire.CheckID("id", m.ID); err != nil {
		return err
	}
	if err := CheckMemberAddr("raft_addr", m.RaftAddr); err != nil {
		return err
	}
	return CheckMemberAddr("http_addr", m.HTTPAddr)
}

// checkAt checks an upsert of version v as that version did.
func (m *MemberUpsert) checkAt(v uint8) error {
	if v < 2 {
		return m.validateV1()
	}
	return m.Validate()
}

// validateV1 is the check of version 1 entries: non-empty addresses of at
// most 256 bytes.
func (m *MemberUpsert) validateV1() error {
	if err := wire.CheckID("id", m.ID); err != nil {
		return err
	}
	if m.RaftAddr == "" || len(m.RaftAddr) > 256 {
		return ruleErr(wire.CodeInvalid, "raft_addr", "must be host:port")
	}
	if m.HTTPAddr == "" || len(m.HTTPAddr) > 256 {
		return ruleErr(wire.CodeInvalid, "http_addr", "must be host:port")
	}
	return nil
}

// MemberRemove forgets a member's record.
type MemberRemove struct {
	ID string `json:"id"`
}

func applyMemberUpsert(t *txn, c Command, p *MemberUpsert) (any, error) {
	m := memberRecord(*p)
	t.memberChanged(p.ID)
	return &m, t.putRecord(bucketMembers, []byte(p.ID), &m)
}

func applyMemberRemove(t *txn, c Command, p *MemberRemove) (any, error) {
	t.memberChanged(p.ID)
	return nil, t.del(bucketMembers, []byte(p.ID))
}

// JobPut creates a job or replaces its config.
type JobPut struct {
	Job    string         `json:"job"`
	Config wire.JobConfig `json:"config"`
}

func (p *JobPut) Validate() error {
	if err := wire.CheckID("job", p.Job); err != nil {
		return err
	}
	p.Config = p.Config.WithDefaults()
	return p.Config.Validate()
}

func applyJobPut(t *txn, c Command, p *JobPut) (any, error) {
	j, err := t.job(p.Job)
	if err != nil {
		return nil, err
	}
	if j == nil {
		j = &jobRecord{ID: p.Job, CreatedAt: c.Time, CreateIndex: t.index, Pending: []uint64{}, Retained: []uint64{}, Ended: []uint64{}}
		ts, err := t.tombstone(p.Job)
		if err != nil {
			return nil, err
		}
		if ts != nil {
			// The name of a deleted job, used again: the new job's
			// generations start above the deleted one's, so its workers
			// stay fenced.
			j.Generation, j.GenerationBase = ts.Generation, ts.Generation
			if err := t.del(bucketJobTombstones, []byte(p.Job)); err != nil {
				return nil, err
			}
		}
	} else if j.Config == jobConfig(p.Config) {
		return j, nil
	}
	j.Config = jobConfig(p.Config)
	j.UpdatedAt = c.Time
	j.ModifyIndex = t.index
	if err := applyRetention(t, j, c.Time); err != nil {
		return nil, err
	}
	if err := trimHistory(t, j); err != nil {
		return nil, err
	}
	if err := pruneAttempts(t, j); err != nil {
		return nil, err
	}
	return j, t.putJob(j)
}

// AttemptStart starts a new attempt of a job: it bumps the generation,
// registers the task set and aborts the epochs still pending. From version
// 2 it also records the checkpoint the attempt resumes from (the job's
// latest completed epoch, 0 for a fresh start) on the attempt, and counts
// the attempts that resumed from one on the job; an entry of version 1 is
// applied as it was written, without either. From version 3 the task
// manifests of the earlier attempts are released (releaseHeads): each
// keeps only what the job's live checkpoints hold, and goes with the last
// of them, whether or not its task is in the new attempt.
type AttemptStart struct {
	Job string `json:"job"`
	// AttemptID is chosen by the caller and makes a retried start
	// recognisable: the same id with the same tasks answers the same
	// generation.
	AttemptID string      `json:"attempt_id"`
	Tasks     []wire.Task `json:"tasks"`
}

func (p *AttemptStart) Validate() error {
	if err := wire.CheckID("job", p.Job); err != nil {
		return err
	}
	if err := wire.CheckID("attempt_id", p.AttemptID); err != nil {
		return err
	}
	if len(p.Tasks) == 0 {
		return ruleErr(wire.CodeInvalid, "tasks", "an attempt needs at least one task")
	}
	if len(p.Tasks) > wire.MaxTasks {
		return ruleErr(wire.CodeInvalid, "tasks", "%d tasks is above the limit of %d", len(p.Tasks), wire.MaxTasks)
	}
	seen := make(map[string]bool, len(p.Tasks))
	for i, tk := range p.Tasks {
		if err := wire.CheckID("tasks[].id", tk.ID); err != nil {
			return err
		}
		if seen[tk.ID] {
			return ruleErr(wire.CodeInvalid, "tasks[].id", "task %q listed twice (index %d)", tk.ID, i)
		}
		seen[tk.ID] = true
		if !tk.Caps.Valid() {
			return ruleErr(wire.CodeInvalid, "tasks[].capabilities", "task %q: capabilities %#x are not a valid set (incremental requires state)", tk.ID, uint8(tk.Caps))
		}
	}
	return nil
}

// contentHash identifies the task set regardless of the order it was sent.
func (p *AttemptStart) contentHash() string {
	tasks := append([]wire.Task(nil), p.Tasks...)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID < tasks[j].ID })
	h := sha256.New()
	for _, tk := range tasks {
		h.Write([]byte(tk.ID))
		h.Write([]byte{0, byte(tk.Caps)})
	}
	return hexSum(h)
}

func applyAttemptStart(t *txn, c Command, p *AttemptStart) (any, error) {
	j, err := t.job(p.Job)
	if err != nil {
		return nil, err
	}
	if j == nil {
		if err := deletedJobErr(t, p.Job); err != nil {
			return nil, err
		}
		return nil, ruleErr(wire.CodeNotFound, "job", "job %q does not exist; create it first", p.Job)
	}
	hash := p.contentHash()
	if raw := t.b(bucketAttemptIDs).Get(append(jobPrefix(p.Job), p.AttemptID...)); raw != nil {
		if len(raw) != 8 {
			return nil, &corruptError{fmt.Sprintf("generation of attempt %q of job %q", p.AttemptID, p.Job)}
		}
		gen := binary.BigEndian.Uint64(raw)
		if gen <= j.GenerationBase {
			return nil, ruleErr(wire.CodeFenced, "attempt_id", "attempt %q (generation %d) belongs to a deleted job of the same name", p.AttemptID, gen)
		}
		if gen != j.Generation {
			return nil, ruleErr(wire.CodeFenced, "attempt_id", "attempt %q (generation %d) was superseded by generation %d", p.AttemptID, gen, j.Generation)
		}
		a, err := t.attemptRef(p.Job, gen)
		if err != nil {
			return nil, err
		}
		if a.ContentHash != hash {
			return nil, ruleErr(wire.CodeConflict, "tasks", "attempt %q already started with a different task set", p.AttemptID)
		}
		return a, nil
	}

	gen := j.Generation + 1
	a := &attemptRecord{Job: p.Job, Generation: gen, AttemptID: p.AttemptID, StartedAt: c.Time, Tasks: len(p.Tasks), ContentHash: hash, Index: t.index}
	if c.Version >= 2 {
		// The epoch a restore of the job reads now (PlanRestore's default):
		// the newest completed epoch, which retention always keeps.
		from := j.LatestCompleted
		a.RestoredFrom = &from
		if j.RestoresCountedFrom == 0 {
			j.RestoresCountedFrom = gen
		}
		if from != 0 {
			j.RestoredAttempts++
		}
	}
	for i := range p.Tasks {
		tk := taskRecord(p.Tasks[i])
		if tk.Caps.Expected() {
			a.Expected++
		}
		if err := t.putRecord(bucketTasks, taskKey(p.Job, gen, tk.ID), &tk); err != nil {
			return nil, err
		}
	}
	if err := t.putRecord(bucketAttempts, jobNumKey(p.Job, gen), a); err != nil {
		return nil, err
	}
	if err := t.put(bucketAttemptIDs, append(jobPrefix(p.Job), p.AttemptID...), u64(gen)); err != nil {
		return nil, err
	}
	for _, n := range append([]uint64(nil), j.Pending...) {
		if err := abortEpoch(t, j, n, c.Time, "superseded by attempt generation "+strconv.FormatUint(gen, 10)); err != nil {
			return nil, err
		}
	}
	if c.Version >= 3 {
		if err := releaseHeads(t, j.ID, c.Time); err != nil {
			return nil, err
		}
	}
	j.Generation = gen
	j.AttemptID = p.AttemptID
	j.UpdatedAt = c.Time
	j.ModifyIndex = t.index
	if err := trimHistory(t, j); err != nil {
		return nil, err
	}
	if err := pruneAttempts(t, j); err != nil {
		return nil, err
	}
	return a, t.putJob(j)
}
