package fsm

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// Every read runs in one transaction and returns the applied Raft index
// the answer reflects (Members, kept in memory, is in members.go). The
// point reads of one job (Job, Attempt, Epoch, and Blob in blobs.go) read
// every applied entry without committing the open transaction
// (viewLatest): a worker or coordinator polling an epoch, or blocking on
// it (every applied batch wakes it), would otherwise commit the state
// file once per read. They read one record and scan at most one
// attempt's tasks or one epoch's acks, while the apply waits. Lists and
// plans, which may read much more, commit first and read a read
// transaction (view), so the apply goes on meanwhile.

// Job returns a job.
func (f *FSM) Job(id string) (*wire.Job, uint64, error) {
	var out *wire.Job
	idx, err := f.viewLatest(func(t *txn) error {
		j, err := mustJob(t, id)
		out = wireJob(j)
		return err
	})
	return out, idx, err
}

// Jobs lists every job, ordered by id.
func (f *FSM) Jobs() ([]wire.Job, uint64, error) {
	out := []wire.Job{}
	idx, err := f.view(func(t *txn) error {
		return t.scan(bucketJobs, nil, func(_, v []byte) (bool, error) {
			var j jobRecord
			if err := decodeRecord(v, &j); err != nil {
				return false, err
			}
			out = append(out, *wireJob(&j))
			return true, nil
		})
	})
	return out, idx, err
}

// Attempt returns attempt gen of a job with its tasks; gen 0 means the
// current attempt.
func (f *FSM) Attempt(job string, gen uint64) (*wire.AttemptDetail, uint64, error) {
	var out *wire.AttemptDetail
	idx, err := f.viewLatest(func(t *txn) error {
		j, err := mustJob(t, job)
		if err != nil {
			return err
		}
		if gen == 0 {
			if !j.hasAttempt() {
				return ruleErr(wire.CodeNoAttempt, "generation", "job %q has no attempt yet", job)
			}
			gen = j.Generation
		}
		if gen == 0 {
			return ruleErr(wire.CodeNoAttempt, "generation", "job %q has no attempt yet", job)
		}
		a, err := t.attempt(job, gen)
		if err != nil {
			return err
		}
		if a == nil {
			return ruleErr(wire.CodeNotFound, "generation", "job %q has no attempt generation %d", job, gen)
		}
		out = &wire.AttemptDetail{Attempt: wireAttempt(a)}
		out.TaskList, err = t.tasks(job, gen)
		return err
	})
	return out, idx, err
}

// Attempts lists the attempts of a job the store keeps, newest first: the
// current one and those of the generations that retained epochs (pinned
// ones included) belong to, which a restore may still name. Older ones are
// deleted with their task sets as retention moves (pruneAttempts), so a job
// keeps at most one attempt more than its retained epochs. limit > 0 keeps
// the newest limit; withTasks adds each one's task set, read in the same
// transaction (a view of several attempts never meets one pruned between
// two reads).
func (f *FSM) Attempts(job string, limit int, withTasks bool) (*wire.AttemptList, uint64, error) {
	out := &wire.AttemptList{Attempts: []wire.AttemptEntry{}}
	idx, err := f.view(func(t *txn) error {
		if _, err := mustJob(t, job); err != nil {
			return err
		}
		err := t.scan(bucketAttempts, jobPrefix(job), func(_, v []byte) (bool, error) {
			var a attemptRecord
			if err := decodeRecord(v, &a); err != nil {
				return false, err
			}
			out.Attempts = append(out.Attempts, wire.AttemptEntry{Attempt: wireAttempt(&a)})
			return true, nil
		})
		if err != nil {
			return err
		}
		slices.Reverse(out.Attempts)
		out.Kept = len(out.Attempts)
		if limit > 0 && len(out.Attempts) > limit {
			out.Attempts = out.Attempts[:limit]
		}
		if !withTasks {
			return nil
		}
		for i := range out.Attempts {
			a := &out.Attempts[i]
			var err error
			if a.TaskList, err = t.tasks(job, a.Generation); err != nil {
				return err
			}
		}
		return nil
	})
	return out, idx, err
}

// Epoch returns an epoch with its statistics.
func (f *FSM) Epoch(job string, n uint64) (*wire.EpochDetail, uint64, error) {
	var out *wire.EpochDetail
	idx, err := f.viewLatest(func(t *txn) error {
		j, err := mustJob(t, job)
		if err != nil {
			return err
		}
		e, err := mustEpoch(t, j, n)
		if err != nil {
			return err
		}
		out = &wire.EpochDetail{Epoch: *wireEpoch(e), Acks: []wire.Ack{}, Stragglers: []string{}}
		acked := map[string]bool{}
		err = t.scan(bucketAcks, jobNumKey(job, n), func(_, v []byte) (bool, error) {
			var a ackRecord
			if err := decodeRecord(v, &a); err != nil {
				return false, err
			}
			acked[a.Task] = true
			out.Acks = append(out.Acks, *wireAck(&a))
			return true, nil
		})
		if err != nil {
			return err
		}
		sort.Slice(out.Acks, func(i, k int) bool { return out.Acks[i].Index < out.Acks[k].Index })
		switch {
		case e.CompletedAt != nil:
			out.Duration = Duration(e.CompletedAt.Sub(e.BeganAt))
		case e.EndedAt != nil:
			out.Duration = Duration(e.EndedAt.Sub(e.BeganAt))
		case len(out.Acks) > 0:
			out.Duration = out.Acks[len(out.Acks)-1].Delay
		}
		if e.Acked >= e.Expected {
			return nil
		}
		return t.scan(bucketTasks, jobNumKey(job, e.Generation), func(_, v []byte) (bool, error) {
			var tk taskRecord
			if err := decodeRecord(v, &tk); err != nil {
				return false, err
			}
			if tk.Caps.Expected() && !acked[tk.ID] {
				out.Stragglers = append(out.Stragglers, tk.ID)
			}
			return true, nil
		})
	})
	return out, idx, err
}

// Epochs lists the remembered epochs of a job, ascending; state filters
// when not empty.
func (f *FSM) Epochs(job string, state wire.EpochState) ([]wire.Epoch, uint64, error) {
	out := []wire.Epoch{}
	idx, err := f.view(func(t *txn) error {
		if _, err := mustJob(t, job); err != nil {
			return err
		}
		return t.scan(bucketEpochs, jobPrefix(job), func(_, v []byte) (bool, error) {
			var e epochRecord
			if err := decodeRecord(v, &e); err != nil {
				return false, err
			}
			if state == "" || e.State == epochState(state) {
				out = append(out, *wireEpoch(&e))
			}
			return true, nil
		})
	})
	return out, idx, err
}

// ExpiredEpochs lists up to max pending epochs whose ack deadline is at or
// before now, oldest deadline first.
func (f *FSM) ExpiredEpochs(now time.Time, max int) ([]EpochRef, error) {
	var out []EpochRef
	_, err := f.viewLatest(func(t *txn) error {
		c := t.b(bucketDeadlines).Cursor()
		for k, _ := c.First(); k != nil && len(out) < max; k, _ = c.Next() {
			if len(k) < 8+1+8 {
				continue
			}
			if int64(binary.BigEndian.Uint64(k[:8])) > now.UnixNano() {
				break
			}
			rest := k[8:]
			sep := bytes.IndexByte(rest, 0)
			if sep < 0 || len(rest) != sep+1+8 {
				continue
			}
			out = append(out, EpochRef{Job: string(rest[:sep]), Epoch: binary.BigEndian.Uint64(rest[sep+1:])})
		}
		return nil
	})
	return out, err
}

// NextDeadline returns the earliest ack deadline of any pending epoch.
func (f *FSM) NextDeadline() (time.Time, bool) {
	var at time.Time
	var ok bool
	_, _ = f.viewLatest(func(t *txn) error {
		if k, _ := t.b(bucketDeadlines).Cursor().First(); len(k) >= 8 {
			at, ok = time.Unix(0, int64(binary.BigEndian.Uint64(k[:8]))), true
		}
		return nil
	})
	return at, ok
}

// RestoreRequest chooses the checkpoint a task restores from.
type RestoreRequest struct {
	Job  string
	Task string
	// Epoch names a completed (retained or pinned) epoch; 0 means the
	// latest completed one.
	Epoch uint64
	// Pin names a savepoint instead of an epoch.
	Pin string
	// SourceJob and SourceTask map the restore onto another job's or
	// task's checkpoint (a resume point); empty means Job and Task.
	SourceJob  string
	SourceTask string
}

// PlanRestore plans the restore of a task.
func (f *FSM) PlanRestore(req RestoreRequest) (*wire.RestorePlan, uint64, error) {
	var out *wire.RestorePlan
	idx, err := f.view(func(t *txn) error {
		p, err := restorePlan(t, req)
		out = p
		return err
	})
	return out, idx, err
}

func restorePlan(t *txn, req RestoreRequest) (*wire.RestorePlan, error) {
	if err := wire.CheckID("job", req.Job); err != nil {
		return nil, err
	}
	if err := wire.CheckID("task", req.Task); err != nil {
		return nil, err
	}
	if req.Epoch != 0 && req.Pin != "" {
		return nil, ruleErr(wire.CodeInvalid, "pin", "name an epoch or a pin, not both")
	}
	srcJob, srcTask := req.Job, req.Task
	if req.SourceJob != "" {
		if err := wire.CheckID("source_job", req.SourceJob); err != nil {
			return nil, err
		}
		srcJob = req.SourceJob
	}
	if req.SourceTask != "" {
		if err := wire.CheckID("source_task", req.SourceTask); err != nil {
			return nil, err
		}
		srcTask = req.SourceTask
	}
	if _, err := mustJob(t, req.Job); err != nil {
		return nil, err
	}
	src, err := t.job(srcJob)
	if err != nil {
		return nil, err
	}
	foreign := srcJob != req.Job
	if src == nil {
		if foreign {
			return nil, errForeignSource(req, srcJob) // crossjob.go
		}
		return nil, ruleErr(wire.CodeNotFound, "source_job", "job %q does not exist", srcJob)
	}
	plan := &wire.RestorePlan{Job: req.Job, Task: req.Task, Kinds: map[Kind]wire.KindRestore{}}
	plan.Source.Job, plan.Source.Task = srcJob, srcTask

	var e *epochRecord
	switch {
	case foreign:
		// Another job's checkpoint: only a savepoint (crossjob.go), and
		// every refusal is the same answer.
		if req.Pin == "" && req.Epoch == 0 {
			return nil, errForeignSource(req, srcJob)
		}
		for _, n := range src.Retained {
			c, err := t.epochRef(srcJob, n)
			if err != nil {
				return nil, err
			}
			if c.Pinned && c.State == epochCompleted && (c.PinName == req.Pin && req.Pin != "" || c.Epoch == req.Epoch) {
				e = c
			}
		}
		if e == nil {
			return nil, errForeignSource(req, srcJob)
		}
	case req.Pin != "":
		for _, n := range src.Retained {
			c, err := t.epochRef(srcJob, n)
			if err != nil {
				return nil, err
			}
			if c.Pinned && c.PinName == req.Pin {
				e = c
			}
		}
		if e == nil {
			return nil, ruleErr(wire.CodeNotFound, "pin", "job %q has no savepoint named %q", srcJob, req.Pin)
		}
	case req.Epoch != 0:
		e, err = mustEpoch(t, src, req.Epoch)
		if err != nil {
			return nil, err
		}
		if e.State != epochCompleted {
			return nil, ruleErr(wire.CodeEpochNotCompleted, "epoch", "epoch %d of job %q is %s; restore needs a completed, retained epoch", req.Epoch, srcJob, e.State)
		}
	case src.LatestCompleted == 0:
		plan.Status = wire.RestoreNoCheckpoint
		for _, k := range wire.Kinds {
			plan.Kinds[k] = wire.KindRestore{Status: wire.RestoreNoPriorState}
		}
		return plan, nil
	default:
		if e, err = t.epochRef(srcJob, src.LatestCompleted); err != nil {
			return nil, err
		}
	}
	plan.Source.Epoch, plan.Source.Generation, plan.Source.Pin = e.Epoch, e.Generation, e.PinName

	tk, err := t.task(srcJob, e.Generation, srcTask)
	if err != nil {
		return nil, err
	}
	if tk == nil {
		plan.Status = wire.RestoreNoPriorState
		for _, k := range wire.Kinds {
			plan.Kinds[k] = wire.KindRestore{Status: wire.RestoreNoPriorState}
		}
		return plan, nil
	}
	plan.Status = wire.RestoreRestored
	if !tk.Caps.Expected() {
		plan.Status = wire.RestoreNothing
	}
	caps := tk.Caps
	plan.Capabilities = &caps
	for _, k := range wire.Kinds {
		if !caps.Has(k) {
			plan.Kinds[k] = wire.KindRestore{Status: wire.RestoreNothing}
			continue
		}
		v := t.b(bucketPayloads).Get(payloadKey(srcJob, e.Epoch, srcTask, k))
		kr := wire.KindRestore{Status: wire.RestoreRestored, Bytes: len(v)}
		if len(v) > 0 {
			kr.Payload = bytes.Clone(v)
		}
		plan.InlineBytes += len(v)
		if k == wire.KindState {
			a, err := t.ack(srcJob, e.Epoch, srcTask)
			if err != nil {
				return nil, err
			}
			if a != nil && a.Lineage != 0 {
				m, err := readManifest(t, a.Lineage, e.Epoch)
				if err != nil {
					return nil, err
				}
				// A plan lists segments in the order a restore replays
				// them: by sequence (the lineage keeps them by key).
				slices.SortStableFunc(m.Segments, func(a, b manifests.Segment) int {
					return cmp.Or(cmp.Compare(a.FirstSeq, b.FirstSeq), cmp.Compare(a.LastSeq, b.LastSeq),
						strings.Compare(a.Key, b.Key), cmp.Compare(a.Offset, b.Offset))
				})
				kr.Manifest = m
				// At most the largest int: the state machine takes any
				// declared size.
				kr.Bytes += int(min(m.Bytes(), uint64(math.MaxInt-kr.Bytes)))
				plan.ObjectStoreReads += len(m.Bases) + len(m.Segments)
				plan.ObjectStoreBytes += m.Bytes()
				keys := make([]string, 0, len(m.Bases)+len(m.Segments))
				for _, b := range m.Bases {
					keys = append(keys, b.Key)
				}
				for _, sg := range m.Segments {
					keys = append(keys, sg.Key)
				}
				if plan.FlaggedBlobs, err = flaggedIn(t, keys); err != nil {
					return nil, err
				}
			}
		}
		plan.Kinds[k] = kr
	}
	return plan, nil
}

// StateHash digests every record of the state machine except the applied
// index, which it returns beside the digest. Two members at the same index
// must have the same digest.
func (f *FSM) StateHash() (uint64, string, error) {
	var sum string
	idx, err := f.view(func(t *txn) error {
		var err error
		sum, err = t.stateHash()
		return err
	})
	return idx, sum, err
}

// stateHash digests every record visible in t except the applied index.
func (t *txn) stateHash() (string, error) {
	h := sha256.New()
	for i, name := range allBuckets {
		if i >= optionalFrom {
			if k, _ := t.b(name).Cursor().First(); k == nil {
				continue
			}
		}
		h.Write(name)
		h.Write([]byte{0})
		err := t.scan(name, nil, func(k, v []byte) (bool, error) {
			if bytes.Equal(name, bucketMeta) && bytes.Equal(k, metaAppliedIndex) {
				return true, nil
			}
			h.Write(u64(uint64(len(k))))
			h.Write(k)
			h.Write(u64(uint64(len(v))))
			h.Write(v)
			return true, nil
		})
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// tasks reads the task set of a job's attempt, ordered by task id.
func (t *txn) tasks(job string, gen uint64) ([]wire.Task, error) {
	out := []wire.Task{}
	err := t.scan(bucketTasks, jobNumKey(job, gen), func(_, v []byte) (bool, error) {
		var tk taskRecord
		if err := decodeRecord(v, &tk); err != nil {
			return false, err
		}
		out = append(out, wireTask(&tk))
		return true, nil
	})
	return out, err
}
