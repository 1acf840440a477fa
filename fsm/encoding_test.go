package fsm_test

import (
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/metastore/metastore/fsm"
)

// TestJSONRecordsMigrated: a file of schema version 1 (every record JSON)
// is rewritten when it is opened: its records of the binary buckets become
// MessagePack, the file records version 2, and the state hashes as the same
// state written by this build does, so members whose files have different
// histories agree. Without the rewrite the hash differs.
func TestJSONRecordsMigrated(t *testing.T) {
	h := newHarness(t)
	restore, err := fsm.WriteSchema1(h.f)
	if err != nil {
		t.Fatal(err)
	}
	fillEverything(h)
	restore()
	if err := h.f.Flush(); err != nil {
		t.Fatal(err)
	}
	if v := fsm.SchemaVersionOf(h.f); v != 1 {
		t.Fatalf("schema version %d before the reopen, want 1", v)
	}
	json := 0
	h.rawView(func(tx *bolt.Tx) {
		for _, name := range fsm.BinaryBuckets() {
			_ = tx.Bucket([]byte(name)).ForEach(func(_, v []byte) error {
				if len(v) > 0 && v[0] == '{' {
					json++
				}
				return nil
			})
		}
	})
	if json == 0 {
		t.Fatal("the version-1 file holds no JSON record to migrate")
	}
	fsm.SetMigrateChunk(t, 3) // several transactions per bucket
	h.reopen()
	if v := fsm.SchemaVersionOf(h.f); v != fsm.SchemaVersion {
		t.Fatalf("schema version %d after the reopen, want %d", v, fsm.SchemaVersion)
	}
	h.rawView(func(tx *bolt.Tx) {
		for _, name := range fsm.BinaryBuckets() {
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
}

func (h *harness) rawView(fn func(tx *bolt.Tx)) {
	h.t.Helper()
	if err := fsm.RawView(h.f, func(tx *bolt.Tx) error { fn(tx); return nil }); err != nil {
		h.t.Fatal(err)
	}
}
