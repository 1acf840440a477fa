package fsm

import (
	"encoding/binary"
	"fmt"
)

// The records layer of the state machine's transaction: records read and
// written decoded (getRecord, putRecord), through the transaction's
// caches (schema.go: the decoded records of the deferred buckets, the
// values of the cached ones, the deferred puts), and one typed accessor
// per record of the buckets an ack reads and writes (jobs, attempts,
// tasks, epochs, acks, payloads, job tombstones, heads, lineages), by the
// record's parts rather than its key. The keys are built by the functions
// of schema.go (jobNumKey, taskKey, payloadKey) and lineage.go (headKey).

// getRecord reads the record at key of bucket name into v; false when
// there is none.
func (t *txn) getRecord(name bucket, key []byte, v any) (bool, error) {
	objs := t.objsOf(name)
	if o, ok := objs[string(key)]; ok && readRecord(v, o) {
		return true, nil
	}
	raw := t.get(name, key)
	if raw == nil {
		return false, nil
	}
	if err := decodeRecord(raw, v); err != nil {
		return false, fmt.Errorf("fsm: decode %s/%q: %w", name, key, err)
	}
	if objs != nil {
		if o, ok := copyOfRecord(v); ok {
			objs[string(key)] = o
		}
	}
	return true, nil
}

// getAs reads the record at key of bucket name as a new T; nil when
// there is none.
func getAs[T any](t *txn, name bucket, key []byte) (*T, error) {
	v := new(T)
	ok, err := t.getRecord(name, key, v)
	if err != nil || !ok {
		return nil, err
	}
	return v, nil
}

// putRecord writes v as the record at key of bucket name.
func (t *txn) putRecord(name bucket, key []byte, v any) error {
	if objs := t.objsOf(name); objs != nil {
		if o, ok := copyOfRecord(v); ok {
			if err := checkPut(key, nil); err != nil {
				return err
			}
			k := string(key)
			objs[k] = o
			t.markDirty(name, k)
			return nil
		}
	}
	raw, err := encodeRecord(v)
	if err != nil {
		return fmt.Errorf("fsm: encode %s/%q: %w", name, key, err)
	}
	return t.put(name, key, raw)
}

func (t *txn) job(id string) (*jobRecord, error) {
	return getAs[jobRecord](t, bucketJobs, []byte(id))
}

func (t *txn) putJob(j *jobRecord) error { return t.putRecord(bucketJobs, []byte(j.ID), j) }

func (t *txn) epoch(job string, n uint64) (*epochRecord, error) {
	return getAs[epochRecord](t, bucketEpochs, jobNumKey(job, n))
}

// epochRef reads an epoch another record names (a job's retained or
// latest completed epoch): a missing one means the state is corrupt, not
// that the caller asked for something absent.
func (t *txn) epochRef(job string, n uint64) (*epochRecord, error) {
	e, err := t.epoch(job, n)
	if err == nil && e == nil {
		err = &corruptError{fmt.Sprintf("job %q names epoch %d, which has no record", job, n)}
	}
	return e, err
}

// pendingEpoch reads epoch n, which j lists as pending: missing or not
// pending means the state is corrupt.
func (t *txn) pendingEpoch(j *jobRecord, n uint64) (*epochRecord, error) {
	e, err := t.epoch(j.ID, n)
	if err != nil {
		return nil, err
	}
	if e == nil || e.State != epochPending {
		return nil, fmt.Errorf("fsm: job %q lists epoch %d as pending but it is not", j.ID, n)
	}
	return e, nil
}

// epochRefs reads the epochs ns of job that another record names (a
// job's retained epochs), by number.
func (t *txn) epochRefs(job string, ns []uint64) (map[uint64]*epochRecord, error) {
	recs := make(map[uint64]*epochRecord, len(ns)+1)
	for _, n := range ns {
		e, err := t.epochRef(job, n)
		if err != nil {
			return nil, err
		}
		recs[n] = e
	}
	return recs, nil
}

// attemptGens lists the generations of job's stored attempts.
func (t *txn) attemptGens(job string) ([]uint64, error) {
	var gens []uint64
	prefix := jobPrefix(job)
	err := t.scan(bucketAttempts, prefix, func(k, _ []byte) (bool, error) {
		if len(k) != len(prefix)+8 {
			return false, &corruptError{fmt.Sprintf("attempt key %q", k)}
		}
		gens = append(gens, binary.BigEndian.Uint64(k[len(prefix):]))
		return true, nil
	})
	return gens, err
}

// attemptRef reads an attempt another record names (a job's generation,
// an attempt id's): missing means the state is corrupt.
func (t *txn) attemptRef(job string, gen uint64) (*attemptRecord, error) {
	a, err := t.attempt(job, gen)
	if err == nil && a == nil {
		err = &corruptError{fmt.Sprintf("job %q names attempt generation %d, which has no record", job, gen)}
	}
	return a, err
}

func (t *txn) putEpoch(e *epochRecord) error {
	return t.putRecord(bucketEpochs, jobNumKey(e.Job, e.Epoch), e)
}

func (t *txn) attempt(job string, gen uint64) (*attemptRecord, error) {
	return getAs[attemptRecord](t, bucketAttempts, jobNumKey(job, gen))
}

func (t *txn) task(job string, gen uint64, task string) (*taskRecord, error) {
	return getAs[taskRecord](t, bucketTasks, taskKey(job, gen, task))
}

func (t *txn) ack(job string, epoch uint64, task string) (*ackRecord, error) {
	return getAs[ackRecord](t, bucketAcks, taskKey(job, epoch, task))
}

// putAck stores task a.Task's ack of epoch of job: its record and its
// inline payloads by kind.
func (t *txn) putAck(job string, epoch uint64, a *ackRecord, payloads map[Kind][]byte) error {
	if err := t.putRecord(bucketAcks, taskKey(job, epoch, a.Task), a); err != nil {
		return err
	}
	for k, v := range payloads {
		if err := t.put(bucketPayloads, payloadKey(job, epoch, a.Task, k), v); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) tombstone(job string) (*jobTombstone, error) {
	return getAs[jobTombstone](t, bucketJobTombstones, []byte(job))
}

func (t *txn) lineage(id uint64) (*lineageRecord, error) {
	return getAs[lineageRecord](t, bucketLineages, u64(id))
}

func (t *txn) putLineage(l *lineageRecord) error { return t.putRecord(bucketLineages, u64(l.ID), l) }

// headLineage is the lineage the task's next ack extends (nil: none).
func (t *txn) headLineage(job, task string) (*lineageRecord, error) {
	hid, err := t.head(job, task)
	if err != nil || hid == 0 {
		return nil, err
	}
	return t.lineage(hid)
}

func (t *txn) head(job, task string) (uint64, error) {
	raw := t.get(bucketHeads, headKey(job, task))
	if raw == nil {
		return 0, nil
	}
	if len(raw) != 8 {
		return 0, &corruptError{"head of " + job + "/" + task}
	}
	return binary.BigEndian.Uint64(raw), nil
}
