package fsm

import (
	"bytes"
	"fmt"
	"slices"
)

// typedBlobs holds the blob records decoded, by key, in place of the
// blobs bucket: the first typed structure of the state layer planned in
// DESIGN.md ("The state layer's next step"). A transaction that has one
// (txn.blobsTyped) reads and writes the records through it without
// encoding them (storedBlob, writeBlob); the other readers of the bucket
// (scans, the state hash, dumps) see it as a bucket of encoded records
// in key order (typedBlobBucket). The state machine does not use it yet:
// ApplyInMemory does, so that TestCommandsOnMemory compares it bucket
// for bucket with the file and BenchmarkReplayAcks measures it.
//
// The records are the table's own: get returns a copy, put stores one.
// A record's pointer fields (times, the observation) are replaced by the
// commands, never changed in place, so a shallow copy is a copy.
type typedBlobs struct {
	m map[string]*blobRecord
}

func newTypedBlobs() *typedBlobs { return &typedBlobs{m: map[string]*blobRecord{}} }

// get returns a copy of key's record, with what it counts (as decodeBlob
// sets), nil when there is none.
func (tb *typedBlobs) get(key string) *blobRecord {
	b, ok := tb.m[key]
	if !ok {
		return nil
	}
	cp := *b
	cp.counted = blobUsage(cp.State, cp.Size)
	cp.countedAwaiting = cp.AwaitingObservation
	return &cp
}

// put stores a copy of b under b.Key.
func (tb *typedBlobs) put(b *blobRecord) {
	cp := *b
	cp.counted, cp.countedAwaiting = JobUsage{}, false
	cp.batch, cp.batchIndex, cp.signed = "", 0, false
	tb.m[b.Key] = &cp
}

// typedBlobBucket shows a typedBlobs as the blobs bucket: records encoded
// as the file holds them (without their key), keys in order.
type typedBlobBucket struct{ tb *typedBlobs }

func (b typedBlobBucket) Get(key []byte) []byte {
	r, ok := b.tb.m[string(key)]
	if !ok {
		return nil
	}
	return encodeBlobRecord(r)
}

// encodeBlobRecord is the stored form of r.
func encodeBlobRecord(r *blobRecord) []byte {
	raw, err := encodeRecord(r)
	if err != nil {
		// The records were written by the commands and encoded before.
		panic(fmt.Sprintf("fsm: encoding blob %q: %v", r.Key, err))
	}
	return raw
}

func (b typedBlobBucket) Put(key, value []byte) error {
	if err := checkPut(key, value); err != nil {
		return err
	}
	r, err := decodeBlob(key, value)
	if err != nil {
		return fmt.Errorf("fsm: decode %s/%q: %w", bucketBlobs, key, err)
	}
	b.tb.put(r)
	return nil
}

func (b typedBlobBucket) Delete(key []byte) error {
	delete(b.tb.m, string(key))
	return nil
}

func (b typedBlobBucket) KeyN() int { return len(b.tb.m) }

// Cursor walks the keys in order: it sorts them when made (a scan of
// the blobs is rare on the apply's path: a job's deletion).
func (b typedBlobBucket) Cursor() kvCursor {
	keys := make([]string, 0, len(b.tb.m))
	for k := range b.tb.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return &typedBlobCursor{tb: b.tb, keys: keys, i: -1}
}

// typedBlobCursor walks the keys the table held when it was made; a key
// deleted since is skipped.
type typedBlobCursor struct {
	tb   *typedBlobs
	keys []string
	i    int
}

func (c *typedBlobCursor) First() (key, value []byte) { c.i = -1; return c.Next() }

func (c *typedBlobCursor) Seek(key []byte) (k, v []byte) {
	c.i, _ = slices.BinarySearchFunc(c.keys, key, func(a string, b []byte) int { return bytes.Compare([]byte(a), b) })
	c.i--
	return c.Next()
}

func (c *typedBlobCursor) Next() (key, value []byte) {
	for c.i++; c.i < len(c.keys); c.i++ {
		if r, ok := c.tb.m[c.keys[c.i]]; ok {
			return []byte(c.keys[c.i]), encodeBlobRecord(r)
		}
	}
	return nil, nil
}

func (c *typedBlobCursor) Delete() error {
	if c.i >= 0 && c.i < len(c.keys) {
		delete(c.tb.m, c.keys[c.i])
	}
	return nil
}
