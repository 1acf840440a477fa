package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// Test-only access to the file layout, for the black-box tests in fsm_test.

// Dump is every key/value of every top-level bucket of the file, keyed by
// bucket name then by key (raw bytes as strings, the MessagePack records
// of encoding.go as JSON).
type Dump map[string]map[string]string

// DumpBuckets reads every bucket of the state machine's file in one read
// transaction, including buckets this build does not declare, so a
// comparison of two dumps is a comparison of the whole content.
func DumpBuckets(f *FSM) (Dump, error) {
	out := Dump{}
	_, err := f.view(func(t *txn) error {
		return t.tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			kv := map[string]string{}
			out[string(name)] = kv
			return b.ForEach(func(k, v []byte) error {
				js, err := recordJSON(name, v)
				if err != nil {
					return fmt.Errorf("%s/%q: %w", name, k, err)
				}
				kv[string(k)] = string(js)
				return nil
			})
		})
	})
	return out, err
}

// RawUpdate runs fn in a write transaction on f's file, bypassing the
// commands: tests use it to plant what no command writes.
func RawUpdate(f *FSM, fn func(tx *bolt.Tx) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	err := f.db.Update(fn)
	// What fn planted is read like what commands wrote: the filter of
	// blob keys is built again from the file.
	f.txMu.Lock()
	f.blobKeys = nil
	f.txMu.Unlock()
	return err
}

// DisableBlobFilter stops the write transactions of f from using the
// filter of blob keys: every read of a blob record searches the file.
func DisableBlobFilter(f *FSM) {
	f.txMu.Lock()
	defer f.txMu.Unlock()
	f.blobFilterOff = true
	if f.wt != nil {
		f.wt.blobKeys = nil
	}
}

// WriteTxnHasBlob reports whether the state machine's write transaction
// (begun when none is open) reads a record of blob key, through the filter
// of blob keys as an apply does.
func WriteTxnHasBlob(f *FSM, key string) (bool, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.txMu.Lock()
	defer f.txMu.Unlock()
	if f.wt == nil {
		if err := f.begin(); err != nil {
			return false, err
		}
	}
	return f.wt.get(bucketBlobs, []byte(key)) != nil, nil
}

// BucketNames lists the buckets the schema declares.
func BucketNames() []string {
	out := make([]string, 0, len(allBuckets))
	for _, b := range allBuckets {
		out = append(out, string(b))
	}
	return out
}

// EpochKeyPrefix is the key prefix of every record of one epoch of a job in
// the epochs, acks and payloads buckets.
func EpochKeyPrefix(job string, epoch uint64) string { return string(jobNumKey(job, epoch)) }

// SetBootID makes the state machine see id as the machine's boot id until
// the test ends.
func SetBootID(t interface{ Cleanup(func()) }, id string) {
	prev := bootID
	bootID = func() string { return id }
	t.Cleanup(func() { bootID = prev })
}

// CloseAsCrash releases the file the way a killed process does: no sync,
// the marker left "open", the open transaction (what was applied since the
// last commit) lost.
func (f *FSM) CloseAsCrash() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.txMu.Lock()
	f.discardLocked()
	f.txMu.Unlock()
	err := f.db.Close()
	f.db = nil
	return err
}

// Trial is the outcome of TryApply.
type Trial struct {
	// Result is the command's result; Err a fatal error (the node would
	// stop, its transaction rolled back).
	Result *Result
	Err    error
	// Before and After are the state hashes around the command (After is
	// meaningless when Err is set: the transaction is rolled back).
	Before, After string
	// Fsck checks the state the command left (when Err is nil).
	Fsck *FsckReport
}

// TryApply applies data as the next log entry through the path ApplyBatch
// takes, inside a write transaction it always rolls back: the state
// machine is the same after the call, whatever data holds.
func TryApply(f *FSM, data []byte) (tr Trial, err error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	tx, err := f.db.Begin(true)
	if err != nil {
		return tr, err
	}
	defer tx.Rollback()
	t := &txn{tx: tx}
	index := t.appliedIndex() + 1
	if tr.Before, err = t.stateHash(); err != nil {
		return tr, err
	}
	t.index = index
	tr.Result, tr.Err = applyEntry(t, &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data})
	if tr.Err != nil {
		return tr, nil
	}
	if tr.After, err = t.stateHash(); err != nil {
		return tr, err
	}
	tr.Fsck = &FsckReport{Mismatches: []RefMismatch{}, Problems: []string{}}
	return tr, t.fsck(tr.Fsck, true)
}

// BlobRefs reads the reference count of every blob record.
func BlobRefs(f *FSM) (map[string]uint64, error) {
	out := map[string]uint64{}
	_, err := f.view(func(t *txn) error {
		return t.scan(bucketBlobs, nil, func(k, v []byte) (bool, error) {
			var b blobRecord
			if err := decodeRecord(v, &b); err != nil {
				return false, err
			}
			out[string(k)] = b.Refs
			return true, nil
		})
	})
	return out, err
}

// StoredRecord returns the stored form, in the bucket's encoding, of a
// record of the named bucket given as JSON.
func StoredRecord(bucket string, js []byte) ([]byte, error) {
	z := binaryZero([]byte(bucket))
	if z == nil {
		return js, nil
	}
	if err := json.Unmarshal(js, z); err != nil {
		return nil, err
	}
	return encodeRecord(z)
}

// RecordJSON returns a stored record of the named bucket as JSON.
func RecordJSON(bucket string, raw []byte) ([]byte, error) { return recordJSON([]byte(bucket), raw) }

// WriteSchema makes the state machine write its records as a file of
// schema version v held them (JSON in the buckets binary only since a
// later version, encoding.go) and record version v in f's file, until the
// returned function is called.
func WriteSchema(f *FSM, v uint64) (restore func(), err error) {
	writeSchema = v
	err = RawUpdate(f, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(metaSchema, u64(v))
	})
	return func() { writeSchema = 0 }, err
}

// SchemaVersionOf reads the schema version f's file records.
func SchemaVersionOf(f *FSM) (v uint64) {
	_, _ = f.view(func(t *txn) error {
		v = schemaVersionOf(t.tx)
		return nil
	})
	return v
}

// BinaryBuckets names the buckets whose records are MessagePack, with
// the schema version from which they are.
func BinaryBuckets() map[string]uint64 {
	out := map[string]uint64{}
	for _, b := range binaryBuckets {
		out[string(b.name)] = b.since
	}
	return out
}

// RawView runs fn in a read transaction of f's committed file.
func RawView(f *FSM, fn func(tx *bolt.Tx) error) error {
	_, err := f.view(func(t *txn) error { return fn(t.tx) })
	return err
}

// DropBlobKeys rewrites up to n blob records without their key, as one
// transaction of the migration to schema version 7 does, leaving the
// file's version as it is: a migration a crash stopped after it. It
// returns how many it rewrote.
func DropBlobKeys(f *FSM, n int) (int, error) {
	var done int
	err := RawUpdate(f, func(tx *bolt.Tx) error {
		var err error
		_, done, err = dropBlobKeys(tx, []byte{}, n)
		return err
	})
	return done, err
}

// SetMigrateChunk sets how many records a transaction of the migration of
// an older schema version's records rewrites, until the test ends.
func SetMigrateChunk(t interface{ Cleanup(func()) }, n int) {
	prev := migrateChunk
	migrateChunk = n
	t.Cleanup(func() { migrateChunk = prev })
}

// HoldFile takes the lock a restore takes while it swaps the file (every
// read of the file waits for it) and returns its release.
func HoldFile(f *FSM) (release func()) {
	f.mu.Lock()
	return f.mu.Unlock
}

// binaryZero returns a new zero record of a binary bucket, nil for a
// bucket whose records are JSON.
func binaryZero(name []byte) msgRecord {
	for _, b := range binaryBuckets {
		if string(b.name) == string(name) {
			return b.zero()
		}
	}
	return nil
}

// recordJSON returns a stored record of bucket name as JSON (a JSON record
// as it is), for dumps.
func recordJSON(name, raw []byte) ([]byte, error) {
	z := binaryZero(name)
	if z == nil || len(raw) == 0 || raw[0] == '{' {
		return raw, nil
	}
	if err := decodeRecord(raw, z); err != nil {
		return nil, err
	}
	return json.Marshal(z)
}

// EncodeVersion builds a command envelope of an earlier payload version,
// as an older leader wrote it.
func EncodeVersion(t CommandType, v uint8, now time.Time, payload any) ([]byte, error) {
	return encodeVersion(t, v, now, payload)
}

// BucketFill is the share of the leaf pages of a bucket that its keys and
// values fill, as of the file's last commit.
func BucketFill(f *FSM, name string) (float64, error) {
	var fill float64
	_, err := f.view(func(t *txn) error {
		b := t.tx.Bucket([]byte(name))
		if b == nil {
			return fmt.Errorf("no bucket %s", name)
		}
		st := b.Stats()
		if st.LeafAlloc == 0 {
			return fmt.Errorf("bucket %s has no leaf page of its own", name)
		}
		fill = float64(st.LeafInuse) / float64(st.LeafAlloc)
		return nil
	})
	return fill, err
}

// PlanReadsRecords plans the manifest of ack as its apply would, on every
// applied entry and writing nothing, and reports whether planning read a
// record of the records bucket (a transaction's point-read cursor of a
// bucket exists once a read used it), with planning's error.
func PlanReadsRecords(f *FSM, ack TaskAck, now time.Time) (bool, error) {
	var read bool
	_, err := f.viewLatest(func(t *txn) error {
		t.blobs, t.batches = blobCache{}, batchCache{}
		op := &ackOp{p: &ack}
		if err := op.load(t); err != nil {
			return err
		}
		if op.j == nil {
			return missingJobErr(ack.Job, op.ts)
		}
		if err := checkAckingTask(op.tk, &ack); err != nil {
			return err
		}
		_, err := planManifest(t, op.j, ack.Generation, ack.Epoch, op.tk, op.head, ack.Manifest, now, true, true)
		read = t.cursors[string(bucketRecords)] != nil
		return err
	})
	return read, err
}

// PlantUnobservedBucket stores f's blobs awaiting observation as a file of
// schema version 5 held them, in the records' encoding of that version
// (WriteSchema): listed in a blob_unobserved bucket, their records not
// marked. The bucket also gets an entry for extra keys (a version-5 entry
// can outlive its blob). It returns how many records it unmarked.
func PlantUnobservedBucket(f *FSM, extra ...string) (int, error) {
	n := 0
	err := RawUpdate(f, func(tx *bolt.Tx) error {
		old, err := tx.CreateBucketIfNotExists(bucketBlobUnobserved)
		if err != nil {
			return err
		}
		blobs := tx.Bucket(bucketBlobs)
		var keys, vals [][]byte
		err = blobs.ForEach(func(k, v []byte) error {
			var b blobRecord
			if err := decodeRecord(v, &b); err != nil {
				return err
			}
			if !b.AwaitingObservation {
				return nil
			}
			b.AwaitingObservation = false
			raw, err := encodeRecord(&b)
			keys, vals = append(keys, bytes.Clone(k)), append(vals, raw)
			return err
		})
		if err != nil {
			return err
		}
		for i := range keys {
			if err := blobs.Put(keys[i], vals[i]); err != nil {
				return err
			}
			if err := old.Put(keys[i], []byte{1}); err != nil {
				return err
			}
		}
		for _, k := range extra {
			if err := old.Put([]byte(k), []byte{1}); err != nil {
				return err
			}
		}
		n = len(keys)
		return nil
	})
	return n, err
}

// MarkAwaiting sets the AwaitingObservation of key's blob record in f's
// file, bypassing the commands and the index in memory.
func MarkAwaiting(f *FSM, key string, awaiting bool) error {
	return RawUpdate(f, func(tx *bolt.Tx) error {
		blobs := tx.Bucket(bucketBlobs)
		var b blobRecord
		if err := decodeRecord(blobs.Get([]byte(key)), &b); err != nil {
			return err
		}
		b.AwaitingObservation = awaiting
		raw, err := encodeRecord(&b)
		if err != nil {
			return err
		}
		return blobs.Put([]byte(key), raw)
	})
}
