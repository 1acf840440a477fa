package fsm_test

import (
	"bytes"
	"fmt"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/metastore/metastore/fsm"
)

// TestJSONRecordsMigrated: a file of an earlier schema version holds JSON
// records in the buckets binary only since a later one (version 1: every
// record; versions 2 and 3: attempts, tasks and acks), and, before version
// 5, the rec_seq index. It is rewritten when it is opened: those records
// become MessagePack, rec_seq is deleted, the file records the current
// version, and the state hashes as the same state written by this build
// does, so members whose files have different histories agree. Without
// the rewrite the hash differs.
func TestJSONRecordsMigrated(t *testing.T) {
	for _, from := range []uint64{1, 2, 3, 4, 5} {
		t.Run(fmt.Sprintf("from-%d", from), func(t *testing.T) {
			h := newHarness(t)
			restore, err := fsm.WriteSchema(h.f, from)
			if err != nil {
				t.Fatal(err)
			}
			fillEverything(h)
			// Before version 6 the blobs awaiting observation were keys
			// of blob_unobserved, an entry of which could outlive its
			// blob, or its blob's live state (inc/w/log-1-1 is gone,
			// inc/w/log-1-2 deleting).
			if n, err := fsm.PlantUnobservedBucket(h.f, "alpha/op/gone-long-ago", "inc/w/log-1-1", "inc/w/log-1-2"); err != nil || n == 0 {
				t.Fatalf("planting blob_unobserved: %d records, %v", n, err)
			}
			restore()
			if err := h.f.Flush(); err != nil {
				t.Fatal(err)
			}
			if v := fsm.SchemaVersionOf(h.f); v != from {
				t.Fatalf("schema version %d before the reopen, want %d", v, from)
			}
			// Every bucket binary since a later version holds JSON, and
			// only those.
			migrated := 0
			h.rawView(func(tx *bolt.Tx) {
				for name, since := range fsm.BinaryBuckets() {
					json, binary := 0, 0
					_ = tx.Bucket([]byte(name)).ForEach(func(_, v []byte) error {
						if len(v) > 0 && v[0] == '{' {
							json++
						} else {
							binary++
						}
						return nil
					})
					if since > from {
						migrated += json
					}
					switch {
					case since > from && binary > 0:
						t.Errorf("%s: %d MessagePack records in a file of version %d", name, binary, from)
					case since <= from && json > 0:
						t.Errorf("%s: %d JSON records in a file of version %d", name, json, from)
					}
				}
			})
			if migrated == 0 && from < 4 {
				t.Fatalf("the version-%d file holds no JSON record to migrate", from)
			}
			// This build keeps no rec_seq; a file of an earlier version
			// has one, with an entry per present segment.
			if err := fsm.RawUpdate(h.f, func(tx *bolt.Tx) error {
				b, err := tx.CreateBucket([]byte("rec_seq"))
				if err != nil {
					return err
				}
				return b.Put([]byte("\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02e/t/log\x00\x00\x00\x00\x00\x00\x00\x00\x00"), nil)
			}); err != nil {
				t.Fatal(err)
			}
			fsm.SetMigrateChunk(t, 3) // several transactions per bucket
			h.reopen()
			if v := fsm.SchemaVersionOf(h.f); v != fsm.SchemaVersion {
				t.Fatalf("schema version %d after the reopen, want %d", v, fsm.SchemaVersion)
			}
			h.rawView(func(tx *bolt.Tx) {
				for _, gone := range []string{"rec_seq", "blob_unobserved"} {
					if tx.Bucket([]byte(gone)) != nil {
						t.Errorf("%s is still there after the migration", gone)
					}
				}
				for name := range fsm.BinaryBuckets() {
					_ = tx.Bucket([]byte(name)).ForEach(func(k, v []byte) error {
						if len(v) > 0 && v[0] == '{' {
							t.Errorf("%s/%q is still JSON after the migration", name, k)
						}
						return nil
					})
				}
			})
			if got := h.hash(); got != fillEverythingHash {
				t.Fatalf("state hash after the migration %s, want %s (the same state written by this build)", got, fillEverythingHash)
			}
			h.fsck()
		})
	}
}

func (h *harness) rawView(fn func(tx *bolt.Tx)) {
	h.t.Helper()
	if err := fsm.RawView(h.f, func(tx *bolt.Tx) error { fn(tx); return nil }); err != nil {
		h.t.Fatal(err)
	}
}

// TestBlobRecordsWithoutKeys: the blob records of a file of schema
// version 6 repeat their key, the bucket's key. Opening it rewrites them
// without it (version 7), a few records a transaction, and the state then
// hashes as the same state written by this build; without the rewrite
// the hash differs. A file a crash left half rewritten reads as before
// and is finished at the next open. fsck finds every blob's references
// under its key.
func TestBlobRecordsWithoutKeys(t *testing.T) {
	h := newHarness(t)
	restore, err := fsm.WriteSchema(h.f, 6)
	if err != nil {
		t.Fatal(err)
	}
	fillEverything(h)
	restore()
	if err := h.f.Flush(); err != nil {
		t.Fatal(err)
	}
	keyed := func() (n, total int) {
		h.rawView(func(tx *bolt.Tx) {
			_ = tx.Bucket([]byte("blobs")).ForEach(func(_, v []byte) error {
				total++
				// MessagePack "key": "" (an empty key), or the key.
				if !bytes.Contains(v, []byte("\xa3key\xa0")) {
					n++
				}
				return nil
			})
		})
		return n, total
	}
	n, total := keyed()
	if total == 0 || n != total {
		t.Fatalf("the version-6 file: %d of %d blob records hold their key, want all", n, total)
	}
	// A migration that a crash stopped after its first transaction left
	// a mix, which reads as before; the next open goes on.
	if done, err := fsm.DropBlobKeys(h.f, total/2); err != nil || done != total/2 {
		t.Fatalf("rewriting %d records before the crash: %d, %v", total/2, done, err)
	}
	if n, _ := keyed(); n != total-total/2 {
		t.Fatalf("after the first transaction %d of %d records hold their key, want %d", n, total, total-total/2)
	}
	h.fsck()
	fsm.SetMigrateChunk(t, 2) // several transactions
	h.reopen()
	if v := fsm.SchemaVersionOf(h.f); v != fsm.SchemaVersion {
		t.Fatalf("schema version %d after the reopen, want %d", v, fsm.SchemaVersion)
	}
	if n, total := keyed(); n != 0 {
		t.Errorf("after the reopen %d of %d blob records still hold their key", n, total)
	}
	if got := h.hash(); got != fillEverythingHash {
		t.Fatalf("state hash after the migration %s, want %s (the same state written by this build)", got, fillEverythingHash)
	}
	h.fsck()
}
