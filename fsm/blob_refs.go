package fsm

import (
	"fmt"
	"time"
)

// Blob records and their reference counts, as the manifest operations
// (lineage_*.go) and the blob handlers (blobs.go) move them: a blob whose
// count falls to zero becomes a GC candidate, keyed by the time it did.

func (t *txn) blob(key string) (*blobRecord, error) {
	v := t.b(bucketBlobs).Get([]byte(key))
	if v == nil {
		return nil, nil
	}
	b, err := decodeBlob(v)
	if err != nil {
		return nil, fmt.Errorf("fsm: decode %s/%q: %w", bucketBlobs, key, err)
	}
	return b, nil
}

// decodeBlob decodes a blob record as stored, with what it counts in its
// job's usage (putBlob moves the usage by the difference).
func decodeBlob(v []byte) (*blobRecord, error) {
	var b blobRecord
	if err := decodeRecord(v, &b); err != nil {
		return nil, err
	}
	b.counted = blobUsage(b.State, b.Size)
	return &b, nil
}

// putBlob writes a blob record and collects the change of its job's usage
// (quota.go) from what the record counted when it was read.
func (t *txn) putBlob(b *blobRecord) error {
	b.ModifyIndex = t.index
	if err := t.putRecord(bucketBlobs, []byte(b.Key), b); err != nil {
		return err
	}
	now := blobUsage(b.State, b.Size)
	if d := usageDelta(b.counted, now); !d.zero() {
		if t.usage == nil {
			t.usage = map[string]JobUsage{}
		}
		u := t.usage[b.Job]
		u.add(d)
		t.usage[b.Job] = u
	}
	b.counted = now
	return nil
}

func timeKey(at time.Time, key string) []byte { return append(u64(uint64(at.UnixNano())), key...) }

// unreference marks a blob whose count fell to zero as a GC candidate.
func (t *txn) unreference(b *blobRecord, now time.Time) error {
	b.UnreferencedAt = &now
	return t.b(bucketGCCandidates).Put(timeKey(now, b.Key), nil)
}

// addRef and dropRef move a blob's reference count.
func (t *txn) addRef(key string) error {
	b, err := t.blob(key)
	if err != nil {
		return err
	}
	if b == nil || b.State != blobLive {
		return errCorruptRef(key, b)
	}
	if b.Refs == 0 && b.UnreferencedAt != nil {
		if err := t.del(bucketGCCandidates, timeKey(*b.UnreferencedAt, key)); err != nil {
			return err
		}
		b.UnreferencedAt = nil
	}
	b.Refs++
	return t.putBlob(b)
}

func (t *txn) dropRef(key string, now time.Time) error {
	b, err := t.blob(key)
	if err != nil {
		return err
	}
	if b == nil || b.State != blobLive || b.Refs == 0 {
		return errCorruptRef(key, b)
	}
	b.Refs--
	if b.Refs == 0 {
		if err := t.unreference(b, now); err != nil {
			return err
		}
	}
	return t.putBlob(b)
}

func errCorruptRef(key string, b *blobRecord) error {
	state := "missing"
	if b != nil {
		state = string(b.State)
	}
	return &corruptError{"reference count of blob " + key + " moved while it is " + state}
}

// markUnobserved queues a blob that an ack just committed for the leader's
// look at the object store. The value is not empty on purpose: bbolt's Get
// answers nil for a key put with a nil value in the same transaction and
// an empty value in later ones, so a test of Get against nil would depend
// on how entries were batched into transactions, which differs between
// members. Presence is tested with has all the same.
func (t *txn) markUnobserved(key string) error {
	return t.b(bucketBlobUnobserved).Put([]byte(key), []byte{1})
}
