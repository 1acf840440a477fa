package fsm_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/metastore/metastore/fsm"
)

// auditBlob is a blob record of a dump, as JSON.
type auditBlob struct {
	key            string
	State          string `json:"state"`
	Refs           uint64 `json:"refs"`
	Job            string `json:"job"`
	UnreferencedAt string `json:"unreferenced_at"`
}

// auditBlobs lists the blob records of d, by key.
func auditBlobs(t *testing.T, d fsm.Dump) []auditBlob {
	t.Helper()
	var out []auditBlob
	for k, v := range d["blobs"] {
		b := auditBlob{key: k}
		if err := json.Unmarshal([]byte(v), &b); err != nil {
			t.Fatalf("blob %q: %v", k, err)
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b auditBlob) int { return strings.Compare(a.key, b.key) })
	return out
}

// editRecord rewrites the record at key of bucket in tx through its JSON
// form (RecordJSON, StoredRecord).
func editRecord(tx *bolt.Tx, bucket, key string, edit func(m map[string]any)) error {
	b := tx.Bucket([]byte(bucket))
	js, err := fsm.RecordJSON(bucket, b.Get([]byte(key)))
	if err != nil {
		return err
	}
	m := map[string]any{}
	if err := json.Unmarshal(js, &m); err != nil {
		return err
	}
	edit(m)
	if js, err = json.Marshal(m); err != nil {
		return err
	}
	raw, err := fsm.StoredRecord(bucket, js)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), raw)
}

// deleteSuffix deletes the keys of bucket ending with suffix (the index
// entries of a blob, keyed by time and blob key) and reports how many.
func deleteSuffix(tx *bolt.Tx, bucket, suffix string) (int, error) {
	b := tx.Bucket([]byte(bucket))
	var keys [][]byte
	if err := b.ForEach(func(k, _ []byte) error {
		if len(k) >= 8 && string(k[8:]) == suffix {
			keys = append(keys, bytes.Clone(k))
		}
		return nil
	}); err != nil {
		return 0, err
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}

// TestAuditFsckReportsEachInconsistency: on a sound state that fills every
// bucket fsck reports nothing; each kind of inconsistency it claims to
// detect, planted alone in a copy of that state, is reported.
func TestAuditFsckReportsEachInconsistency(t *testing.T) {
	base := newHarness(t)
	fillEverythingAndDelete(base)
	base.fsck()
	snap := snapshotOf(t, base.f)
	blobs := auditBlobs(t, base.dump())
	pick := func(what string, ok func(b auditBlob) bool) auditBlob {
		t.Helper()
		for _, b := range blobs {
			if ok(b) {
				return b
			}
		}
		t.Fatalf("the state has no %s blob", what)
		return auditBlob{}
	}
	referenced := pick("referenced live", func(b auditBlob) bool { return b.State == "live" && b.Refs > 0 })
	unreferenced := pick("unreferenced live", func(b auditBlob) bool { return b.State == "live" && b.Refs == 0 && b.UnreferencedAt != "" })
	intent := pick("intent", func(b auditBlob) bool { return b.State == "intent" })
	gone := pick("gone", func(b auditBlob) bool { return b.State == "gone" })
	batchID := "00000000000000010123456789abcdef" // fillEverythingAndDelete's upload batch
	batchKey := func(i int) string { return fsm.UploadKey("alpha", "op", batchID, i) }

	cases := []struct {
		name  string
		plant func(tx *bolt.Tx) error
		// problem is part of a problem the report must list; mismatch the
		// key of a reference count mismatch it must list.
		problem, mismatch string
	}{
		{name: "reference count", mismatch: referenced.key, plant: func(tx *bolt.Tx) error {
			return editRecord(tx, "blobs", referenced.key, func(m map[string]any) { m["refs"] = referenced.Refs + 1 })
		}},
		{name: "referenced blob not live", problem: "blob " + referenced.key + " is deleting but", plant: func(tx *bolt.Tx) error {
			return editRecord(tx, "blobs", referenced.key, func(m map[string]any) { m["state"] = "deleting"; delete(m, "awaiting_observation") })
		}},
		{name: "intent without lease", problem: "blob " + intent.key + " is an upload intent without a lease", plant: func(tx *bolt.Tx) error {
			return editRecord(tx, "blobs", intent.key, func(m map[string]any) { delete(m, "lease_until") })
		}},
		{name: "gone without time", problem: "blob " + gone.key + " is gone without the time it went", plant: func(tx *bolt.Tx) error {
			return editRecord(tx, "blobs", gone.key, func(m map[string]any) { delete(m, "gone_at") })
		}},
		{name: "unreferenced without time", problem: "blob " + unreferenced.key + " is unreferenced without the time", plant: func(tx *bolt.Tx) error {
			return editRecord(tx, "blobs", unreferenced.key, func(m map[string]any) { delete(m, "unreferenced_at") })
		}},
		{name: "candidate missing", problem: "blob " + unreferenced.key + " (live, 0 refs): candidate index says false", plant: func(tx *bolt.Tx) error {
			n, err := deleteSuffix(tx, "gc_candidates", unreferenced.key)
			if err == nil && n != 1 {
				t.Errorf("%d candidate entries of %s", n, unreferenced.key)
			}
			return err
		}},
		{name: "candidate of a referenced blob", problem: fmt.Sprintf("blob %s (live, %d refs): candidate index says true", referenced.key, referenced.Refs), plant: func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("gc_candidates")).Put(append(make([]byte, 8), referenced.key...), nil)
		}},
		{name: "records of a blob without record", mismatch: referenced.key, problem: "records reference blob " + referenced.key + ", which has no record", plant: func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("blobs")).Delete([]byte(referenced.key))
		}},
		{name: "malformed record key", problem: `record key "x" is malformed`, plant: func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("records")).Put([]byte("x"), []byte{0x80})
		}},
		{name: "short candidate key", problem: `gc candidate key "abc" is too short`, plant: func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("gc_candidates")).Put([]byte("abc"), nil)
		}},
		{name: "batch without lease entry", problem: "upload batch " + batchID + " of job alpha has no lease entry", plant: func(tx *bolt.Tx) error {
			n, err := deleteSuffix(tx, "blob_leases", batchKey(0))
			if err == nil && n != 1 {
				t.Errorf("%d lease entries of %s", n, batchKey(0))
			}
			return err
		}},
		{name: "intent without its lease entry", problem: "blob " + intent.key + " is an upload intent without its lease entry", plant: func(tx *bolt.Tx) error {
			n, err := deleteSuffix(tx, "blob_leases", intent.key)
			if err == nil && n != 1 {
				t.Errorf("%d lease entries of %s", n, intent.key)
			}
			return err
		}},
		{name: "lease entry naming nothing", problem: "lease entry of alpha/op/none names no upload intent or batch", plant: func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("blob_leases")).Put(append(make([]byte, 8), "alpha/op/none"...), nil)
		}},
		{name: "lease entry of a live blob", problem: "lease entry of " + referenced.key + " names no upload intent or batch", plant: func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("blob_leases")).Put(append(make([]byte, 8), referenced.key...), nil)
		}},
		{name: "short lease entry", problem: `lease entry "abc" is too short`, plant: func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("blob_leases")).Put([]byte("abc"), nil)
		}},
		{name: "record of an unused batch key", problem: "blob " + batchKey(1) + " is live but an unused key of upload batch " + batchID, plant: func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("blobs"))
			return b.Put([]byte(batchKey(1)), bytes.Clone(b.Get([]byte(unreferenced.key))))
		}},
		{name: "JSON record in a binary bucket", problem: "epochs holds 1 JSON records", plant: func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("epochs"))
			k := []byte(fsm.EpochKeyPrefix("gamma", 3))
			js, err := fsm.RecordJSON("epochs", b.Get(k))
			if err != nil {
				return err
			}
			return b.Put(k, js)
		}},
		{name: "retained epoch without record", problem: `job "alpha" names epoch 4, which has no record`, plant: func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("epochs")).Delete([]byte(fsm.EpochKeyPrefix("alpha", 4)))
		}},
		{name: "pending epoch without record", problem: `job "beta" names epoch 60, which has no record`, plant: func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("epochs")).Delete([]byte(fsm.EpochKeyPrefix("beta", 60)))
		}},
		{name: "latest completed epoch without record", problem: `job "gamma" names epoch 99, which has no record`, plant: func(tx *bolt.Tx) error {
			return editRecord(tx, "jobs", "gamma", func(m map[string]any) { m["latest_completed"] = 99 })
		}},
		{name: "attempt without record", problem: `job "alpha" names attempt generation 2, which has no record`, plant: func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("attempts")).Delete(binary.BigEndian.AppendUint64([]byte("alpha\x00"), 2))
		}},
		{name: "usage counted in memory", problem: `job "` + referenced.Job + `": usage counted in memory`, plant: func(tx *bolt.Tx) error {
			return editRecord(tx, "blobs", referenced.key, func(m map[string]any) { m["size"] = 1 << 40 })
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if err := h.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
				t.Fatal(err)
			}
			if err := fsm.RawUpdate(h.f, tc.plant); err != nil {
				t.Fatal(err)
			}
			rep, err := h.f.Fsck()
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() {
				t.Fatalf("fsck found nothing")
			}
			if tc.problem != "" && !slices.ContainsFunc(rep.Problems, func(p string) bool { return strings.Contains(p, tc.problem) }) {
				t.Errorf("problems %q, want one saying %q", rep.Problems, tc.problem)
			}
			if tc.mismatch != "" && !slices.ContainsFunc(rep.Mismatches, func(m fsm.RefMismatch) bool { return m.Key == tc.mismatch }) {
				t.Errorf("mismatches %+v, want one of %s", rep.Mismatches, tc.mismatch)
			}
			if tc.mismatch == "" && len(rep.Mismatches) != 0 {
				t.Errorf("mismatches %+v, want none", rep.Mismatches)
			}
		})
	}
}
