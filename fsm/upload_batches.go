package fsm

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/metastore/metastore/wire"
)

// Upload batches: the intents of one upload-slot request in one record.
//
// An upload-slot request of N keys (intent-create version 4) writes one
// record, the batch (upload_batches: id -> uploadBatch), and one lease
// entry (blob_leases, under the batch's first key), instead of N blob
// records and N lease entries. Its keys are derived from the batch:
//
//	<job>/<task or _>/<id: 32 hex digits><index: 8 hex digits>
//
// the shape of blobstore.NewKey (16 hex digits of time, then 24 more), so
// they sort by time like the keys of single intents. A key of a batch has
// no blob record until an ack commits it. Until then t.blob answers an
// intent record made from the batch (batchIntent), so every rule that
// reads an intent (the ack's commit check, the blob view, the orphan
// sweep's Known) reads it the same way. The commit writes the blob's
// record and sets the key's bit in Used: a used key never reads as an
// intent again, even after its record was collected and purged. When the
// lease ends, the collector's intents-expire names the batch's first key
// (its lease entry) and every unused key becomes an expired blob record,
// a GC candidate, as an expired single intent does; the batch and its
// lease entry are deleted. Deleting a job expires its batches at once.
//
// Per acknowledged blob that is one bbolt write (the batch's bitmap, once
// per command) where single intents cost four (the intent's record and
// lease entry at the request, their update and removal at the commit),
// and an upload-slot request is one Raft entry of a few dozen bytes.

// batchIDLen is the length of a batch id: 16 hex digits of the leader's
// clock (nanoseconds) and 16 of random bytes.
const batchIDLen = 32

// batchIndexLen is the length of a key's index within its batch.
const batchIndexLen = 8

// UploadKey is key i of the batch id of a task's uploads (task "" for
// uploads of no task).
func UploadKey(job, task, id string, i int) string {
	dir := task
	if dir == "" {
		dir = "_"
	}
	return job + "/" + dir + "/" + id + fmt.Sprintf("%0*x", batchIndexLen, i)
}

// UploadKeys are the keys of the batch an intent-create of version 4
// records (nil for an older request, which names its keys).
func (p *IntentCreate) UploadKeys() []string {
	if p.Batch == "" {
		return p.Keys
	}
	keys := make([]string, p.Count)
	for i := range keys {
		keys[i] = UploadKey(p.Job, p.Task, p.Batch, i)
	}
	return keys
}

// checkBatchID checks the shape of a batch id.
func checkBatchID(id string) error {
	if len(id) != batchIDLen || !isLowerHex(id) {
		return ruleErr(wire.CodeInvalid, "batch", "a batch id is %d lowercase hex digits", batchIDLen)
	}
	return nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// parseBatchKey splits a key of the batch shape into its batch id and
// index; ok is false for any other key.
func parseBatchKey(key string) (id string, i int, ok bool) {
	name := key[strings.LastIndexByte(key, '/')+1:]
	if len(name) != batchIDLen+batchIndexLen || !isLowerHex(name) {
		return "", 0, false
	}
	n, err := strconv.ParseUint(name[batchIDLen:], 16, 32)
	if err != nil {
		return "", 0, false
	}
	return name[:batchIDLen], int(n), true
}

func (ub *uploadBatch) key(i int) string { return UploadKey(ub.Job, ub.Task, ub.ID, i) }

func (ub *uploadBatch) used(i int) bool { return ub.Used[i/8]&(1<<(i%8)) != 0 }

func (ub *uploadBatch) use(i int) { ub.Used[i/8] |= 1 << (i % 8) }

// unused is the number of keys no ack committed.
func (ub *uploadBatch) unused() int {
	n := ub.Count
	for i := range ub.Count {
		if ub.used(i) {
			n--
		}
	}
	return n
}

// leaseKey is the batch's entry in blob_leases.
func (ub *uploadBatch) leaseKey() []byte { return timeKey(ub.LeaseUntil, ub.key(0)) }

// batchCache holds the batches the command being applied read or wrote,
// written back in key order when it returns (applyCommand), like the blob
// records (blobCache): an ack of three keys of one batch reads and
// writes the batch once.
type batchCache map[string]*cachedBatch

type cachedBatch struct {
	ub    *uploadBatch // nil: none (or deleted)
	dirty bool
}

// uploadBatch reads batch id (nil when there is none).
func (t *txn) uploadBatch(id string) (*uploadBatch, error) {
	if c, ok := t.batches[id]; ok {
		return c.ub, nil
	}
	var ub uploadBatch
	found, err := t.getRecord(bucketUploadBatches, []byte(id), &ub)
	if err != nil {
		return nil, err
	}
	var out *uploadBatch
	if found {
		if len(ub.Used) != (ub.Count+7)/8 {
			return nil, &corruptError{fmt.Sprintf("upload batch %s of %d keys has a bitmap of %d bytes", id, ub.Count, len(ub.Used))}
		}
		out = &ub
	}
	if t.batches != nil {
		t.batches[id] = &cachedBatch{ub: out}
	}
	return out, nil
}

// putUploadBatch writes ub (at the end of the command).
func (t *txn) putUploadBatch(ub *uploadBatch) error {
	ub.ModifyIndex = t.index
	if t.batches == nil {
		return t.putRecord(bucketUploadBatches, []byte(ub.ID), ub)
	}
	t.batches[ub.ID] = &cachedBatch{ub: ub, dirty: true}
	return nil
}

// deleteUploadBatch removes batch id (at the end of the command).
func (t *txn) deleteUploadBatch(id string) error {
	if t.batches == nil {
		return t.del(bucketUploadBatches, []byte(id))
	}
	t.batches[id] = &cachedBatch{dirty: true}
	return nil
}

// flushBatches writes the batches the command changed, in key order.
// Code that scans the bucket flushes first.
func (t *txn) flushBatches() error {
	var ids []string
	for id, c := range t.batches {
		if c.dirty {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		c := t.batches[id]
		var err error
		if c.ub == nil {
			err = t.del(bucketUploadBatches, []byte(id))
		} else {
			err = t.putRecord(bucketUploadBatches, []byte(id), c.ub)
		}
		if err != nil {
			return err
		}
		delete(t.batches, id)
	}
	return nil
}

// batchIntent is the intent record of key when it is an unused key of a
// batch, nil otherwise. The record is not stored: an ack that commits the
// key writes it (commitBlob), a lease that ends writes it expired
// (expireBatch).
func (t *txn) batchIntent(key string) (*blobRecord, error) {
	id, i, ok := parseBatchKey(key)
	if !ok {
		return nil, nil
	}
	ub, err := t.uploadBatch(id)
	if err != nil || ub == nil || i >= ub.Count || ub.used(i) || ub.key(i) != key {
		return nil, err
	}
	return ub.intent(i), nil
}

// intent is the record key i of the batch reads as while it is unused.
func (ub *uploadBatch) intent(i int) *blobRecord {
	lease := ub.LeaseUntil
	return &blobRecord{
		Key: ub.key(i), Job: ub.Job, Task: ub.Task, Generation: ub.Generation,
		State: blobIntent, LeaseUntil: &lease, CreatedAt: ub.CreatedAt,
		counted: JobUsage{Intents: 1}, batch: ub.ID, batchIndex: i,
	}
}

// createBatch records the batch of an intent-create of version 4. A
// retried request (the same batch) answers what the first one recorded.
func createBatch(t *txn, c Command, p *IntentCreate) (any, error) {
	if !c.Time.Before(p.LeaseUntil) {
		return nil, ruleErr(wire.CodeInvalid, "lease_until", "the lease ends at %s, before the request was recorded (%s)", p.LeaseUntil.Format(time.RFC3339Nano), c.Time.Format(time.RFC3339Nano))
	}
	old, err := t.uploadBatch(p.Batch)
	if err != nil {
		return nil, err
	}
	if old != nil {
		if old.Job == p.Job && old.Task == p.Task && old.Generation == p.Generation && old.Count == p.Count && old.LeaseUntil.Equal(p.LeaseUntil) {
			return p.UploadKeys(), nil // a retried request
		}
		return nil, ruleErr(wire.CodeConflict, "batch", "upload batch %s is already in use", p.Batch)
	}
	ub := &uploadBatch{
		ID: p.Batch, Job: p.Job, Task: p.Task, Generation: p.Generation, Count: p.Count,
		LeaseUntil: p.LeaseUntil, CreatedAt: c.Time, Used: make([]byte, (p.Count+7)/8),
	}
	// A key with a record is not the batch's to hand out. Ids are unique
	// (time and random bytes), so this finds nothing but a replay of a
	// batch whose record is gone (it expired, its keys' records remain).
	// The lease check above refuses most such replays; not one stamped
	// by a proposer whose clock is behind the lease, which only this
	// check refuses.
	for _, k := range []string{ub.key(0), ub.key(ub.Count - 1)} {
		if b, err := t.storedBlob(k); err != nil {
			return nil, err
		} else if b != nil {
			return nil, ruleErr(wire.CodeConflict, "batch", "blob key %q is already in use", k)
		}
	}
	if err := t.putUploadBatch(ub); err != nil {
		return nil, err
	}
	if err := t.put(bucketBlobLeases, ub.leaseKey(), nil); err != nil {
		return nil, err
	}
	t.addUsage(ub.Job, JobUsage{Intents: ub.Count})
	return p.UploadKeys(), nil
}

// useBatchKey marks key i of batch id committed.
func (t *txn) useBatchKey(id string, i int) error {
	ub, err := t.uploadBatch(id)
	if err != nil {
		return err
	}
	if ub == nil || i >= ub.Count || ub.used(i) {
		return &corruptError{fmt.Sprintf("key %d of upload batch %s was committed, but the batch does not hold it unused", i, id)}
	}
	cp := *ub
	cp.Used = slices.Clone(ub.Used)
	cp.use(i)
	return t.putUploadBatch(&cp)
}

// expireBatch ends a batch: each unused key becomes an expired blob
// record, unreferenced since at (a GC candidate), and the batch and its
// lease entry are deleted. It returns the keys it expired.
func (t *txn) expireBatch(ub *uploadBatch, at time.Time) ([]string, error) {
	var out []string
	for i := range ub.Count {
		if ub.used(i) {
			continue
		}
		b := ub.intent(i)
		b.State = blobExpired
		b.batch = ""
		if err := t.unreference(b, at); err != nil {
			return nil, err
		}
		if err := t.putBlob(b); err != nil {
			return nil, err
		}
		out = append(out, b.Key)
	}
	if err := t.del(bucketBlobLeases, ub.leaseKey()); err != nil {
		return nil, err
	}
	return out, t.deleteUploadBatch(ub.ID)
}

// expiredBatch is the batch whose lease entry names key (its first key),
// nil when key is not one.
func (t *txn) expiredBatch(key string) (*uploadBatch, error) {
	id, i, ok := parseBatchKey(key)
	if !ok || i != 0 {
		return nil, nil
	}
	ub, err := t.uploadBatch(id)
	if err != nil || ub == nil || ub.key(0) != key {
		return nil, err
	}
	return ub, nil
}

// jobBatches lists the batches of job.
func (t *txn) jobBatches(job string) ([]*uploadBatch, error) {
	var out []*uploadBatch
	err := t.scanBatches(func(ub *uploadBatch) error {
		if ub.Job == job {
			out = append(out, ub)
		}
		return nil
	})
	return out, err
}

// scanBatches calls fn for every batch, in id order.
func (t *txn) scanBatches(fn func(ub *uploadBatch) error) error {
	if err := t.flushBatches(); err != nil {
		return err
	}
	return t.scan(bucketUploadBatches, nil, func(k, v []byte) (bool, error) {
		var ub uploadBatch
		if err := decodeRecord(v, &ub); err != nil {
			return false, fmt.Errorf("fsm: decode %s/%q: %w", bucketUploadBatches, k, err)
		}
		if len(ub.Used) != (ub.Count+7)/8 {
			return false, &corruptError{fmt.Sprintf("upload batch %s of %d keys has a bitmap of %d bytes", k, ub.Count, len(ub.Used))}
		}
		return true, fn(&ub)
	})
}

// addUsage adds d to job's usage (quota.go).
func (t *txn) addUsage(job string, d JobUsage) {
	if t.usage == nil {
		t.usage = map[string]JobUsage{}
	}
	u := t.usage[job]
	u.add(d)
	t.usage[job] = u
}
