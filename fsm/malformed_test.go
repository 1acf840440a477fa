package fsm_test

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	"github.com/metastore/metastore/fsm"
	bolt "go.etcd.io/bbolt"
)

// TestMalformedKeysInARestoredState: a snapshot is accepted when its
// file is whole, so its keys and values can be anything. Keys and values
// shorter than their layout once made the readers and the commands panic
// (a slice out of range): the consistency check on a gc_candidates key
// shorter than its 8-byte time, which is how FuzzRestore's first finding
// came about. Each case plants one such entry in a copy of the fuzz
// state; the restored state must answer every reader and command without
// a panic, and a backup of it is refused by the consistency check where
// that check covers the bucket.
func TestMalformedKeysInARestoredState(t *testing.T) {
	u64 := func(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
	cases := []struct {
		name, bucket string
		key, value   []byte
		// refused: PrepareRestore's consistency check names the entry.
		refused string
	}{
		{"gc candidate key shorter than its time", "gc_candidates", []byte("x"), nil, "gc candidate key"},
		{"gc candidate key of one zero byte", "gc_candidates", []byte{0}, nil, "gc candidate key"},
		{"record key of a lineage id alone", "records", u64(1), nil, "record key"},
		{"rec_seq key without its sequence", "rec_seq", append(u64(1), 1, 2), nil, ""},
		{"attempt key without its generation", "attempts", []byte("inc\x00ab"), []byte(`{}`), ""},
		{"attempt id without a generation", "attempt_ids", []byte("plain\x00b2"), []byte{1}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := newHarness(t)
			cmds := fuzzState(src)
			err := fsm.RawUpdate(src.f, func(tx *bolt.Tx) error {
				b := tx.Bucket([]byte(tc.bucket))
				v := tc.value
				if tc.bucket == "records" {
					// A present record's value, so the readers go on
					// to parse the key.
					_, v = b.Cursor().First()
					v = append([]byte(nil), v...)
				}
				return b.Put(tc.key, v)
			})
			if err != nil {
				t.Fatal(err)
			}
			snap := snapshotOf(t, src.f)

			h := newHarness(t)
			if err := h.f.RestoreFrom(bytes.NewReader(snap)); err != nil {
				t.Fatalf("a whole file is restored whatever its content: %v", err)
			}
			exerciseState(t, h.f, cmds)
			_, err = fsm.PrepareRestore(bytes.NewReader(snap), &bytes.Buffer{}, t.TempDir())
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("backup refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Fatalf("backup: got %v, want a refusal naming %q", err, tc.refused)
			}
			// The untouched fuzz state passes the same check.
			if _, err := fsm.PrepareRestore(bytes.NewReader(snapshotOf(t, newFuzzFSM(t))), &bytes.Buffer{}, t.TempDir()); err != nil {
				t.Fatalf("backup of the fuzz state refused: %v", err)
			}
		})
	}
}

func newFuzzFSM(t *testing.T) *fsm.FSM {
	h := &harness{t: t, path: filepath.Join(t.TempDir(), "fsm.db"), now: t0}
	h.f = openFSM(t, h.path)
	t.Cleanup(func() { h.f.Close() })
	fuzzState(h)
	return h.f
}
