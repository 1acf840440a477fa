package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"time"
)

// Blob records and their reference counts, as the manifest operations
// (lineage_*.go) and the blob handlers (blobs.go) move them: a blob whose
// count falls to zero becomes a GC candidate, keyed by the time it did.

// The blob records a command reads and writes are held decoded until the
// command returns (blobCache): a committed blob is read by the ack's
// checks, its commit and each reference the ack adds, and was decoded and
// written once for each (four reads and two writes per blob, half of the
// state machine's bbolt seeks at 64 acking workers). The GC candidate
// index (gc_candidates) is derived from the record as it is written:
// a blob is a candidate, keyed by UnreferencedAt, while it is live or
// expired with no reference (what fsck checks), so the commit of a blob
// and its first reference in one ack leave that index alone instead of
// adding the blob and removing it again.

// blobCache holds the blob records of the command being applied: nil
// outside commands (reads go to the file).
type blobCache map[string]*cachedBlob

type cachedBlob struct {
	// b is the record as the command last read or wrote it; nil: none.
	b *blobRecord
	// stored is the record's GC candidate key in the file (nil: none).
	stored []byte
	dirty  bool
}

// candidateKey is a blob record's key in gc_candidates, nil when it is
// not a candidate.
func candidateKey(b *blobRecord) []byte {
	if b == nil || (b.State != blobLive && b.State != blobExpired) || b.Refs != 0 || b.UnreferencedAt == nil {
		return nil
	}
	return timeKey(*b.UnreferencedAt, b.Key)
}

func (t *txn) blob(key string) (*blobRecord, error) {
	if c, ok := t.blobs[key]; ok {
		if c.b == nil {
			return nil, nil
		}
		b := *c.b
		return &b, nil
	}
	b, err := t.storedBlob(key)
	if err == nil && b == nil {
		b, err = t.batchIntent(key)
	}
	if err != nil {
		return nil, err
	}
	if t.blobs != nil {
		t.blobs[key] = &cachedBlob{b: b, stored: candidateKey(b)}
		if b != nil {
			cp := *b
			return &cp, nil
		}
	}
	return b, nil
}

func (t *txn) storedBlob(key string) (*blobRecord, error) {
	v := t.get(bucketBlobs, []byte(key))
	if v == nil {
		return nil, nil
	}
	b, err := decodeBlob([]byte(key), v)
	if err != nil {
		return nil, fmt.Errorf("fsm: decode %s/%q: %w", bucketBlobs, key, err)
	}
	return b, nil
}

// decodeBlob decodes the record v of blob key as stored, with what it
// counts in its job's usage (putBlob moves the usage by the difference).
// The record does not hold its key since schema version 7.
func decodeBlob(key, v []byte) (*blobRecord, error) {
	var b blobRecord
	if err := decodeRecord(v, &b); err != nil {
		return nil, err
	}
	b.Key = string(key)
	b.counted = blobUsage(b.State, b.Size)
	b.countedAwaiting = b.AwaitingObservation
	return &b, nil
}

// putBlob writes a blob record (at the end of the command, flushBlobs)
// and collects the change of its job's usage (quota.go), and of its place
// among the blobs awaiting observation (unobserved.go), from what the
// record held when it was read. Only a live blob awaits observation: one
// that leaves that state (the collector's mark) no longer does.
func (t *txn) putBlob(b *blobRecord) error {
	b.ModifyIndex = t.index
	if b.State != blobLive {
		b.AwaitingObservation = false
	}
	if b.AwaitingObservation != b.countedAwaiting {
		if t.awaiting == nil {
			t.awaiting = make(map[string]bool, t.awaitingHint)
		}
		t.awaiting[b.Key] = b.AwaitingObservation
		b.countedAwaiting = b.AwaitingObservation
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
	if t.blobs == nil {
		return t.writeBlob(b, nil, true)
	}
	c, ok := t.blobs[b.Key]
	if !ok {
		stored, err := t.storedBlob(b.Key)
		if err != nil {
			return err
		}
		c = &cachedBlob{stored: candidateKey(stored)}
		t.blobs[b.Key] = c
	}
	cp := *b
	c.b, c.dirty = &cp, true
	return nil
}

// writeBlob writes b and moves its GC candidate entry from stored (when
// known) to what b is now.
func (t *txn) writeBlob(b *blobRecord, stored []byte, known bool) error {
	if !known {
		old, err := t.storedBlob(b.Key)
		if err != nil {
			return err
		}
		stored = candidateKey(old)
	}
	if want := candidateKey(b); !bytes.Equal(stored, want) {
		if stored != nil {
			if err := t.del(bucketGCCandidates, stored); err != nil {
				return err
			}
		}
		if want != nil {
			if err := t.put(bucketGCCandidates, want, nil); err != nil {
				return err
			}
		}
	}
	return t.putRecord(bucketBlobs, []byte(b.Key), b)
}

// flushBlobs writes the blob records the command changed, in key order.
// Code that reads the blobs bucket other than through blob (a scan)
// flushes first.
func (t *txn) flushBlobs() error {
	var keys []string
	for k, c := range t.blobs {
		if c.dirty {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		c := t.blobs[k]
		if err := t.writeBlob(c.b, c.stored, true); err != nil {
			return err
		}
		delete(t.blobs, k) // read again from the file if needed
	}
	return nil
}

// deleteBlob removes a blob record (a purged tombstone).
func (t *txn) deleteBlob(key string) error {
	if err := t.flushBlobs(); err != nil {
		return err
	}
	delete(t.blobs, key)
	return t.del(bucketBlobs, []byte(key))
}

// applyCommand runs c's handler in t with the blob records it reads and
// writes held decoded, and writes those it changed when it returns
// (whether it succeeded or not: a handler writes nothing before its
// checks pass). A write error is returned as the handler's: it is fatal.
//
// The two maps are kept for the transaction's next command, emptied: a
// batch of acks holds tens of blobs, and a map grown again from empty for
// every command rehashed what it held at each doubling.
func applyCommand(t *txn, c Command) (any, error) {
	outerBlobs, outerBatches := t.blobs, t.batches
	blobs, batches := t.spareBlobs, t.spareBatches
	t.spareBlobs, t.spareBatches = nil, nil
	if blobs == nil {
		blobs, batches = blobCache{}, batchCache{}
	}
	t.blobs, t.batches = blobs, batches
	v, err := handlers[c.Type].apply(t, c)
	if ferr := t.flushBlobs(); ferr != nil {
		v, err = nil, ferr
	} else if ferr := t.flushBatches(); ferr != nil {
		v, err = nil, ferr
	}
	clear(blobs)
	clear(batches)
	t.spareBlobs, t.spareBatches = blobs, batches
	t.blobs, t.batches = outerBlobs, outerBatches
	return v, err
}

func timeKey(at time.Time, key string) []byte { return append(u64(uint64(at.UnixNano())), key...) }

// unreference marks a blob whose count fell to zero as a GC candidate.
func (t *txn) unreference(b *blobRecord, now time.Time) error {
	b.UnreferencedAt = &now
	return nil
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
	if b.Refs == 0 {
		b.UnreferencedAt = nil // it leaves the GC candidates (putBlob)
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
