package fsm

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/metastore/metastore/wire"
)

// Deleting a job (job-delete, type 21): every reference the job holds is
// released (its lineages die, their records drop their blob references, so
// blobs nothing else holds become GC candidates; its upload intents
// expire), its records are deleted, and a tombstone stays under its name.
// The tombstone answers a repeated delete with the same result, answers
// the writes of the deleted job's workers job_deleted (410), and gives a
// job created again under the name its first generation: above the
// deleted job's last, so those workers stay fenced.

// JobDelete deletes a job. Without Force a job with pinned savepoints is
// refused (job_pinned).
type JobDelete struct {
	Job   string `json:"job"`
	Force bool   `json:"force,omitempty"`
}

func (p *JobDelete) Validate() error { return wire.CheckID("job", p.Job) }

// pinRef is a pinned savepoint a forced delete released.
type pinRef struct {
	Epoch uint64 `json:"epoch"`
	Name  string `json:"name,omitempty"`
}

// jobTombstone is what remains of a deleted job; wire.JobDeletion shows
// it as the answer to its delete.
type jobTombstone struct {
	Job string `json:"job"`
	// Generation is the deleted job's last attempt generation: writes of
	// it or an older one are refused, and a job created again under the
	// name starts above it.
	Generation uint64 `json:"generation"`
	// LastEpoch is the highest epoch the deleted job began.
	LastEpoch uint64 `json:"last_epoch"`
	Forced    bool   `json:"forced,omitempty"`
	// Pins lists the savepoints the delete released (forced).
	Pins []pinRef `json:"pins,omitempty"`
	// Lineages counts the task manifests (lineages) released; Intents the
	// upload intents expired.
	Lineages  int       `json:"lineages"`
	Intents   int       `json:"intents"`
	DeletedAt time.Time `json:"deleted_at"`
	Index     uint64    `json:"index"`
}

// deletedJobErr is the answer to a write for a job that does not exist:
// job_deleted when a tombstone names it, nil otherwise (the caller answers
// not_found).
func deletedJobErr(t *txn, job string) error {
	ts, err := t.tombstone(job)
	if err != nil || ts == nil {
		return err
	}
	return jobDeletedErr(job, ts)
}

// jobDeletedErr is job_deleted for job, whose tombstone is ts.
func jobDeletedErr(job string, ts *jobTombstone) error {
	return ruleErr(wire.CodeJobDeleted, "job", "job %q was deleted at %s (its last generation was %d); its workers must stop", job, ts.DeletedAt.Format(time.RFC3339), ts.Generation)
}

func applyJobDelete(t *txn, c Command, p *JobDelete) (any, error) {
	return deleteJob(t, p, c.Time)
}

// deleteJob checks, then deletes. A repeated delete answers the tombstone.
func deleteJob(t *txn, p *JobDelete, now time.Time) (*jobTombstone, error) {
	j, err := t.job(p.Job)
	if err != nil {
		return nil, err
	}
	if j == nil {
		ts, err := t.tombstone(p.Job)
		if err != nil || ts != nil {
			return ts, err
		}
		return nil, ruleErr(wire.CodeNotFound, "job", "job %q does not exist", p.Job)
	}
	pins, err := jobPins(t, j)
	if err != nil {
		return nil, err
	}
	if len(pins) > 0 && !p.Force {
		names := make([]string, len(pins))
		for i, pn := range pins {
			names[i] = fmt.Sprintf("epoch %d", pn.Epoch)
			if pn.Name != "" {
				names[i] += fmt.Sprintf(" (%q)", pn.Name)
			}
		}
		return nil, ruleErr(wire.CodeJobPinned, "force", "job %q has pinned savepoints: %s; unpin them, or delete with force=true to release them too", p.Job, strings.Join(names, ", "))
	}

	// Every check is done: from here on, writes.
	ts := &jobTombstone{Job: j.ID, Generation: j.Generation, LastEpoch: j.LastEpoch, Forced: p.Force, DeletedAt: now, Index: t.index}
	if p.Force {
		ts.Pins = pins
	}
	if ts.Lineages, err = releaseJobLineages(t, j, now); err != nil {
		return nil, err
	}
	if ts.Intents, err = expireJobIntents(t, j.ID, now); err != nil {
		return nil, err
	}
	for _, n := range j.Pending {
		e, err := t.epochRef(j.ID, n)
		if err != nil {
			return nil, err
		}
		if err := t.del(bucketDeadlines, deadlineKey(e.Deadline.UnixNano(), j.ID, n)); err != nil {
			return nil, err
		}
	}
	prefix := jobPrefix(j.ID)
	// attempt_ids stay: a retried start of one of the deleted job's
	// attempts stays fenced if the name is used again.
	for _, b := range []bucket{bucketEpochs, bucketAcks, bucketPayloads, bucketAttempts, bucketTasks, bucketHeads} {
		if err := t.deletePrefix(b, prefix); err != nil {
			return nil, err
		}
	}
	if err := t.del(bucketJobs, []byte(j.ID)); err != nil {
		return nil, err
	}
	return ts, t.putRecord(bucketJobTombstones, []byte(j.ID), ts)
}

// jobPins lists the pinned savepoints of j, by epoch.
func jobPins(t *txn, j *jobRecord) ([]pinRef, error) {
	var pins []pinRef
	for _, n := range j.Retained {
		e, err := t.epochRef(j.ID, n)
		if err != nil {
			return nil, err
		}
		if e.Pinned {
			pins = append(pins, pinRef{Epoch: n, Name: e.PinName})
		}
	}
	return pins, nil
}

// releaseJobLineages deletes every lineage of j: the tasks' heads and the
// lineages its live epochs (pending and retained) hold. Each record drops
// its blob reference; another job's fork holds its own references.
func releaseJobLineages(t *txn, j *jobRecord, now time.Time) (int, error) {
	var lids []uint64
	seen := map[uint64]bool{}
	add := func(lid uint64) {
		if lid != 0 && !seen[lid] {
			seen[lid] = true
			lids = append(lids, lid)
		}
	}
	err := t.scan(bucketHeads, jobPrefix(j.ID), func(_, v []byte) (bool, error) {
		if len(v) != 8 {
			return false, &corruptError{"head of job " + j.ID}
		}
		add(binary.BigEndian.Uint64(v))
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	for _, n := range append(append([]uint64(nil), j.Pending...), j.Retained...) {
		err := t.scan(bucketAcks, jobNumKey(j.ID, n), func(_, v []byte) (bool, error) {
			var a ackRecord
			if err := decodeRecord(v, &a); err != nil {
				return false, err
			}
			add(a.Lineage)
			return true, nil
		})
		if err != nil {
			return 0, err
		}
	}
	released := 0
	for _, lid := range lids {
		l, err := t.lineage(lid)
		if err != nil {
			return 0, err
		}
		if l == nil {
			return 0, &corruptError{fmt.Sprintf("job %q names lineage %d, which has no record", j.ID, lid)}
		}
		if err := deleteLineage(t, l, now); err != nil {
			return 0, err
		}
		released++
	}
	return released, nil
}

// expireJobIntents ends the job's upload intents now: they become GC
// candidates, unreferenced from now. Every key the store hands out starts
// with the job's id and a slash.
func expireJobIntents(t *txn, job string, now time.Time) (int, error) {
	var intents []*blobRecord
	if err := t.flushBlobs(); err != nil {
		return 0, err
	}
	err := t.scan(bucketBlobs, []byte(job+"/"), func(k, v []byte) (bool, error) {
		b, err := decodeBlob(k, v)
		if err != nil {
			return false, err
		}
		if b.Job == job && b.State == blobIntent {
			intents = append(intents, b)
		}
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	for _, b := range intents {
		if b.LeaseUntil != nil {
			if err := t.del(bucketBlobLeases, timeKey(*b.LeaseUntil, b.Key)); err != nil {
				return 0, err
			}
		}
		b.State = blobExpired
		if err := t.unreference(b, now); err != nil {
			return 0, err
		}
		if err := t.putBlob(b); err != nil {
			return 0, err
		}
	}
	n := len(intents)
	batches, err := t.jobBatches(job)
	if err != nil {
		return 0, err
	}
	for _, ub := range batches {
		keys, err := t.expireBatch(ub, now)
		if err != nil {
			return 0, err
		}
		n += len(keys)
	}
	return n, nil
}
