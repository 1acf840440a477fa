package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/tinylib/msgp/msgp"
	bolt "go.etcd.io/bbolt"
)

// How records are stored. Every record of the binary buckets (jobs,
// epochs, blobs, lineages and their manifest records, upload batches,
// attempts, tasks and acks) is MessagePack, through methods msgp generated
// from records.go: an ack reads and writes several of them, and decoding
// JSON was a third of the state machine's CPU. The other records
// (members, tokens, tombstones) are JSON: they are written once per
// operator action. A map field is encoded with its keys in order
// (kindSizes): the state hash compares the bytes, and Go's map order
// differs from member to member.
//
// A record's first byte tells the two apart: every record is an object,
// '{' in JSON, a map header (0x80-0x8f, 0xde, 0xdf) in MessagePack. Files
// written before a bucket's binary encoding (binaryBuckets' since) hold
// JSON records in it; Open rewrites them once (migrateRecords), so that
// members whose files have different histories hold the same bytes.

// writeSchema makes encodeRecord write records as the file of that
// schema version held them (JSON in the buckets binary only since a later
// version); 0, the default, writes this version's. Tests build files of
// earlier versions with it.
var writeSchema uint64

// encodeRecord returns the stored form of v.
func encodeRecord(v any) ([]byte, error) {
	if b, ok := v.(*blobRecord); ok && b.Key != "" && (writeSchema == 0 || writeSchema >= keylessBlobsVersion) {
		// The bucket's key is the blob's (decodeBlob). Emptied for the
		// encoding and set again, rather than copied: this runs for
		// every blob an ack commits.
		key := b.Key
		b.Key = ""
		defer func() { b.Key = key }()
	}
	if m, ok := v.(msgp.Marshaler); ok && (writeSchema == 0 || writeSchema >= binarySince(v)) {
		return m.MarshalMsg(nil)
	}
	return json.Marshal(v)
}

// decodeRecord decodes a stored record into v, a pointer to the zero
// value of its type.
func decodeRecord(raw []byte, v any) error {
	if len(raw) == 0 {
		return errors.New("empty record")
	}
	if raw[0] == '{' {
		return json.Unmarshal(raw, v)
	}
	u, ok := v.(msgp.Unmarshaler)
	if !ok {
		return fmt.Errorf("a MessagePack record (first byte %#x) where a %T is stored as JSON", raw[0], v)
	}
	rest, err := u.UnmarshalMsg(raw)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("%d bytes after the record", len(rest))
	}
	return nil
}

// msgRecord is a record stored as MessagePack.
type msgRecord interface {
	msgp.Marshaler
	msgp.Unmarshaler
}

// binaryBuckets are the buckets whose records are MessagePack, with a new
// zero record of each and the schema version from which they are.
var binaryBuckets = []struct {
	name  bucket
	zero  func() msgRecord
	since uint64
}{
	{bucketJobs, func() msgRecord { return new(jobRecord) }, binaryRecordsVersion},
	{bucketEpochs, func() msgRecord { return new(epochRecord) }, binaryRecordsVersion},
	{bucketBlobs, func() msgRecord { return new(blobRecord) }, binaryRecordsVersion},
	{bucketLineages, func() msgRecord { return new(lineageRecord) }, binaryRecordsVersion},
	{bucketRecords, func() msgRecord { return new(record) }, binaryRecordsVersion},
	{bucketUploadBatches, func() msgRecord { return new(uploadBatch) }, binaryRecordsVersion},
	{bucketAttempts, func() msgRecord { return new(attemptRecord) }, binaryAcksVersion},
	{bucketTasks, func() msgRecord { return new(taskRecord) }, binaryAcksVersion},
	{bucketAcks, func() msgRecord { return new(ackRecord) }, binaryAcksVersion},
}

// binarySince is the schema version from which records of v's type are
// MessagePack (tests writing files of earlier versions ask).
func binarySince(v any) uint64 {
	for _, b := range binaryBuckets {
		if reflect.TypeOf(b.zero()) == reflect.TypeOf(v) {
			return b.since
		}
	}
	return binaryRecordsVersion
}

// migrateChunk is how many records one transaction of migrateRecords
// rewrites: a file of a million blobs is rewritten without holding them
// all in one transaction's dirty pages.
var migrateChunk = 10_000

// migrateRecords rewrites, in a file of a schema version before
// SchemaVersion, the JSON records of the buckets binary since a later
// version as MessagePack, then deletes the buckets of earlier versions
// and records SchemaVersion, in one transaction. A crash in between
// leaves a mix, which every reader accepts; the next open goes on where
// this one stopped. It returns how many records it rewrote and the
// version the file had.
func migrateRecords(db *bolt.DB) (int, uint64, error) {
	var version uint64
	if err := db.View(func(tx *bolt.Tx) error {
		version = schemaVersionOf(tx)
		return nil
	}); err != nil {
		return 0, 0, err
	}
	if version >= SchemaVersion {
		return 0, version, nil
	}
	total := 0
	for _, b := range binaryBuckets {
		if b.since <= version {
			continue
		}
		var from []byte
		for {
			var next []byte
			err := db.Update(func(tx *bolt.Tx) error {
				bk := tx.Bucket(b.name)
				var keys, vals [][]byte
				c := bk.Cursor()
				k, v := c.First()
				if from != nil {
					k, v = c.Seek(from)
				}
				for ; k != nil && len(keys) < migrateChunk; k, v = c.Next() {
					if len(v) == 0 || v[0] != '{' {
						continue
					}
					z := b.zero()
					if err := json.Unmarshal(v, z); err != nil {
						return fmt.Errorf("fsm: migrate %s/%q: %w", b.name, k, err)
					}
					// encodeRecord: a blob's record is written without its
					// key already, so the step below leaves it alone.
					raw, err := encodeRecord(z)
					if err != nil {
						return fmt.Errorf("fsm: migrate %s/%q: %w", b.name, k, err)
					}
					keys, vals = append(keys, bytes.Clone(k)), append(vals, raw)
				}
				if k != nil {
					next = bytes.Clone(k)
				}
				for i := range keys {
					if err := bk.Put(keys[i], vals[i]); err != nil {
						return err
					}
				}
				total += len(keys)
				return nil
			})
			if err != nil {
				return total, version, err
			}
			if next == nil {
				break
			}
			from = next
		}
	}
	// Version 6 keeps no blob_unobserved index: its live blobs say so in
	// their records.
	for more := true; more; {
		if err := db.Update(func(tx *bolt.Tx) error {
			var err error
			more, err = moveUnobserved(tx, migrateChunk)
			return err
		}); err != nil {
			return total, version, fmt.Errorf("fsm: move bucket %s of schema version %d into the blob records: %w", bucketBlobUnobserved, version, err)
		}
	}
	// Version 7's blob records leave their key out.
	if version < keylessBlobsVersion {
		for from := []byte{}; from != nil; {
			var n int
			if err := db.Update(func(tx *bolt.Tx) error {
				var err error
				from, n, err = dropBlobKeys(tx, from, migrateChunk)
				return err
			}); err != nil {
				return total, version, fmt.Errorf("fsm: rewrite the blob records of schema version %d without their keys: %w", version, err)
			}
			total += n
		}
	}
	return total, version, db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketBlobUnobserved) != nil {
			if err := tx.DeleteBucket(bucketBlobUnobserved); err != nil {
				return fmt.Errorf("fsm: delete bucket %s of schema version %d: %w", bucketBlobUnobserved, version, err)
			}
		}
		// Version 5 keeps no rec_seq index.
		if tx.Bucket(bucketRecSeq) != nil {
			if err := tx.DeleteBucket(bucketRecSeq); err != nil {
				return fmt.Errorf("fsm: delete bucket %s of schema version %d: %w", bucketRecSeq, version, err)
			}
		}
		// A file of version 1 or 2 holds no upload batch (initSchema
		// marks version 2 as 3 for that reason): with its records
		// rewritten it is of the current version.
		return tx.Bucket(bucketMeta).Put(metaSchema, u64(SchemaVersion))
	})
}

// moveUnobserved moves up to n entries of blob_unobserved (a file of a
// schema version before 6) into the records of their blobs, marked as
// awaiting observation, and deletes them; it reports whether entries are
// left. The records are otherwise unchanged (their modify index too): the
// state is the same, stored once. An entry of a blob no longer live
// awaited nothing (an observation of it changed nothing). A crash between
// two calls leaves some entries moved, and the next open moves the rest.
func moveUnobserved(tx *bolt.Tx, n int) (bool, error) {
	old := tx.Bucket(bucketBlobUnobserved)
	if old == nil {
		return false, nil
	}
	blobs := tx.Bucket(bucketBlobs)
	var keys [][]byte
	c := old.Cursor()
	for k, _ := c.First(); k != nil && len(keys) < n; k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := old.Delete(k); err != nil {
			return false, err
		}
		raw := blobs.Get(k)
		if raw == nil {
			continue
		}
		var b blobRecord
		if err := decodeRecord(raw, &b); err != nil {
			return false, fmt.Errorf("blob %q: %w", k, err)
		}
		if b.State != blobLive || b.AwaitingObservation {
			continue
		}
		b.AwaitingObservation = true
		v, err := encodeRecord(&b)
		if err != nil {
			return false, fmt.Errorf("blob %q: %w", k, err)
		}
		if err := blobs.Put(k, v); err != nil {
			return false, err
		}
	}
	return len(keys) == n, nil
}

// dropBlobKeys rewrites, from key from on, up to n blob records that
// repeat their key (a file of a schema version before 7) without it, and
// returns the key to go on from (nil: none left) and how many it
// rewrote. Nothing else of a record changes. A crash between two calls
// leaves some records rewritten, which every reader accepts, and the
// next open goes over them again.
func dropBlobKeys(tx *bolt.Tx, from []byte, n int) ([]byte, int, error) {
	blobs := tx.Bucket(bucketBlobs)
	var keys, vals [][]byte
	c := blobs.Cursor()
	k, v := c.Seek(from)
	for seen := 0; k != nil && seen < n; k, v = c.Next() {
		seen++
		var b blobRecord
		if err := decodeRecord(v, &b); err != nil {
			return nil, 0, fmt.Errorf("blob %q: %w", k, err)
		}
		if b.Key == "" {
			continue // written without it
		}
		raw, err := encodeRecord(&b)
		if err != nil {
			return nil, 0, fmt.Errorf("blob %q: %w", k, err)
		}
		keys, vals = append(keys, bytes.Clone(k)), append(vals, raw)
	}
	var next []byte
	if k != nil {
		next = bytes.Clone(k)
	}
	for i := range keys {
		if err := blobs.Put(keys[i], vals[i]); err != nil {
			return nil, 0, err
		}
	}
	return next, len(keys), nil
}

// kindSizes is an ack's inline payload size per kind. Its MessagePack
// form lists the kinds in order: a map encoded in Go's map order would
// differ from member to member, and the state hash compares the bytes.
type kindSizes map[Kind]int

// MarshalMsg appends the sizes as a MessagePack map, kinds ascending
// (nil as nil).
func (s kindSizes) MarshalMsg(b []byte) ([]byte, error) {
	if s == nil {
		return msgp.AppendNil(b), nil
	}
	kinds := make([]Kind, 0, len(s))
	for k := range s {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	b = msgp.AppendMapHeader(b, uint32(len(kinds)))
	for _, k := range kinds {
		b = msgp.AppendString(b, string(k))
		b = msgp.AppendInt(b, s[k])
	}
	return b, nil
}

// UnmarshalMsg reads the sizes: nil as nil, an empty map as an empty map,
// as their JSON forms read.
func (s *kindSizes) UnmarshalMsg(b []byte) ([]byte, error) {
	if msgp.IsNil(b) {
		*s = nil
		return msgp.ReadNilBytes(b)
	}
	n, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return b, msgp.WrapError(err, "sizes")
	}
	m := make(kindSizes, n)
	for range n {
		var k string
		var v int
		if k, b, err = msgp.ReadStringBytes(b); err != nil {
			return b, msgp.WrapError(err, "sizes")
		}
		if v, b, err = msgp.ReadIntBytes(b); err != nil {
			return b, msgp.WrapError(err, "sizes", k)
		}
		m[Kind(k)] = v
	}
	*s = m
	return b, nil
}

// Msgsize is an upper bound of the encoded size.
func (s kindSizes) Msgsize() int {
	n := msgp.MapHeaderSize
	for k := range s {
		n += msgp.StringPrefixSize + len(k) + msgp.IntSize
	}
	return n
}
