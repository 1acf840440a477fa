package fsm_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"

	"github.com/metastore/metastore/fsm"
	bolt "go.etcd.io/bbolt"
)

// TestMalformedRecordsInARestoredState: a snapshot is accepted when its
// file is whole, so its keys and values can be anything. Keys and values
// shorter than their layout, and records naming records that do not exist
// or lacking a field their state implies, once made the readers and the
// commands panic (a slice out of range, a nil dereference): the
// consistency check on a gc_candidates key shorter than its 8-byte time is
// how FuzzRestore's first finding came about. Each case plants one such
// entry in a copy of the fuzz state; the restored state must answer every
// reader and a command of every type without a panic, and a backup of it
// is refused by the consistency check where that check covers it.
func TestMalformedRecordsInARestoredState(t *testing.T) {
	u64 := func(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
	put := func(bucket string, k, v []byte) func(*bolt.Tx) error {
		return func(tx *bolt.Tx) error { return tx.Bucket([]byte(bucket)).Put(k, v) }
	}
	// edit rewrites the record at bucket/key through its JSON form.
	edit := func(bucket, key string, fn func(map[string]any)) func(*bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(bucket))
			m := map[string]any{}
			js, err := fsm.RecordJSON(bucket, b.Get([]byte(key)))
			if err != nil {
				return err
			}
			if err := json.Unmarshal(js, &m); err != nil {
				return err
			}
			fn(m)
			js, err = json.Marshal(m)
			if err != nil {
				return err
			}
			raw, err := fsm.StoredRecord(bucket, js)
			if err != nil {
				return err
			}
			return b.Put([]byte(key), raw)
		}
	}
	cases := []struct {
		name  string
		plant func(*bolt.Tx) error
		// refused: PrepareRestore's consistency check names the entry.
		refused string
	}{
		{"gc candidate key shorter than its time", put("gc_candidates", []byte("x"), nil), "gc candidate key"},
		{"gc candidate key of one zero byte", put("gc_candidates", []byte{0}, nil), "gc candidate key"},
		{"record key of a lineage id alone", func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("records"))
			_, v := b.Cursor().First() // a present record, so readers go on to parse the key
			return b.Put(u64(1), append([]byte(nil), v...))
		}, "record key"},
		{"attempt key without its generation", put("attempts", []byte("inc\x00ab"), []byte{0x80}), ""},
		{"attempt id without a generation", put("attempt_ids", []byte("plain\x00b2"), []byte{1}), ""},
		{"latest completed epoch without its record", edit("jobs", "inc", func(m map[string]any) { m["latest_completed"] = 99 }), "names epoch 99"},
		{"retained epoch without its record", edit("jobs", "plain", func(m map[string]any) { m["retained"] = []int{1, 77} }), "names epoch 77"},
		{"current attempt without its record", edit("jobs", "plain", func(m map[string]any) { m["generation"] = 5 }), "attempt generation 5"},
		{"upload intent without its lease", edit("blobs", "inc/t0/next", func(m map[string]any) { delete(m, "lease_until") }), "without a lease"},
		{"gone blob without its time", edit("blobs", "plain/p0/orphan-1", func(m map[string]any) { delete(m, "gone_at") }), "without the time it went"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := newHarness(t)
			cmds := fuzzState(src)
			if err := fsm.RawUpdate(src.f, tc.plant); err != nil {
				t.Fatal(err)
			}
			snap := snapshotOf(t, src.f)

			h := newHarness(t)
			if err := h.f.RestoreFrom(bytes.NewReader(snap)); err != nil {
				t.Fatalf("a whole file is restored whatever its content: %v", err)
			}
			exerciseState(t, h.f, cmds)

			_, err := fsm.PrepareRestore(bytes.NewReader(snap), &bytes.Buffer{}, t.TempDir())
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("backup refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Fatalf("backup: got %v, want a refusal naming %q", err, tc.refused)
			}
		})
	}
}

// TestBackupOfTheFuzzStatePassesTheCheck: the consistency check that
// refuses the backups above accepts a state made by commands.
func TestBackupOfTheFuzzStatePassesTheCheck(t *testing.T) {
	h := newHarness(t)
	fuzzState(h)
	if _, err := fsm.PrepareRestore(bytes.NewReader(snapshotOf(t, h.f)), &bytes.Buffer{}, t.TempDir()); err != nil {
		t.Fatalf("backup of the fuzz state refused: %v", err)
	}
}
