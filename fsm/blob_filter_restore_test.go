package fsm_test

import (
	"bytes"
	"io"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// TestBlobFilterFollowsTheFile: the filter of blob keys that spares the
// write transaction its searches for absent blobs is the file's own after
// a restore replaced the file, after a restart, and after a record was
// planted around the commands: it counts as many keys as the file holds
// blob records, and the write transaction reads every one. A filter left from the replaced file would
// answer "no record" for the restored blobs, and the next ack of one
// would count its references from zero.
func TestBlobFilterFollowsTheFile(t *testing.T) {
	src := newHarness(t)
	fillEverything(src)
	refs, err := fsm.BlobRefs(src.f)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) == 0 {
		t.Fatal("fillEverything wrote no blob")
	}
	snapshot := snapshotOf(t, src.f)

	sees := func(h *harness, when string, want bool) {
		t.Helper()
		var records uint64
		err := fsm.RawView(h.f, func(tx *bolt.Tx) error {
			records = uint64(tx.Bucket([]byte("blobs")).Stats().KeyN)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := h.f.CommitStats().FilterKeys; got != records {
			t.Fatalf("%s: the filter of blob keys counts %d keys, the file holds %d blob records", when, got, records)
		}
		for k := range refs {
			got, err := fsm.WriteTxnHasBlob(h.f, k)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("%s: the write transaction reads a record of blob %q: %v, want %v", when, k, got, want)
			}
		}
	}
	dst := newHarness(t)
	dst.putJob("unrelated", wire.JobConfig{})
	sees(dst, "before the restore", false) // its filter is of its own file
	if err := dst.f.Restore(io.NopCloser(bytes.NewReader(snapshot))); err != nil {
		t.Fatal(err)
	}
	sees(dst, "after the restore", true)
	dst.reopen()
	sees(dst, "after a restart", true)

	const planted = "planted/blob"
	if ok, err := fsm.WriteTxnHasBlob(dst.f, planted); err != nil || ok {
		t.Fatalf("blob %q read before it was planted (%v, %v)", planted, ok, err)
	}
	dst.reopen() // commits nothing; closes the write transaction the check opened
	var some []byte
	for k := range refs {
		err := fsm.RawView(dst.f, func(tx *bolt.Tx) error {
			some = bytes.Clone(tx.Bucket([]byte("blobs")).Get([]byte(k)))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	err = fsm.RawUpdate(dst.f, func(tx *bolt.Tx) error { return tx.Bucket([]byte("blobs")).Put([]byte(planted), some) })
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := fsm.WriteTxnHasBlob(dst.f, planted); err != nil || !ok {
		t.Fatalf("blob %q planted in the file, the write transaction reads it: %v (%v)", planted, ok, err)
	}
}
