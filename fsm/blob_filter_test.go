package fsm

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestBlobFilterNeverHidesARecord: through random puts, deletes and
// prefix deletes of blob records (with puts and deletes of another
// bucket's records among them), in transactions committed and rolled
// back, the state machine's write transaction reads every blob record the
// file holds: the filter of blob keys only spares searches for keys that
// have none. Reads of both buckets are compared with a transaction on the
// same file without the filter. Fingerprints here are 8 bits, so that
// keys share them and absent keys are often answered "maybe". After every
// commit, every rollback and every failed commit the filter counts each
// fingerprint as many times as the file's records have it.
func TestBlobFilterNeverHidesARecord(t *testing.T) {
	f, err := Open(filepath.Join(t.TempDir(), "fsm.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.txMu.Lock()
	defer f.txMu.Unlock()

	prev := blobFilterMask
	blobFilterMask = 0xff
	defer func() { blobFilterMask = prev }()
	f.blobKeys = nil

	r := rand.New(rand.NewPCG(5, 6))
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("job-%d/task/%03d", i%3, i)
	}
	var filtered, shared, rolledBack, failed int
	for round := range 300 {
		if err := f.begin(); err != nil {
			t.Fatal(err)
		}
		w, plain := f.wt, &txn{tx: f.wt.tx}
		for range 20 {
			k := []byte(keys[r.IntN(len(keys))])
			switch op := r.IntN(10); {
			case op < 3:
				if err := w.put(bucketBlobs, k, []byte("v")); err != nil {
					t.Fatal(err)
				}
			case op < 5:
				if err := w.del(bucketBlobs, k); err != nil {
					t.Fatal(err)
				}
			case op < 6:
				if err := w.deletePrefix(bucketBlobs, k[:len("job-0/task/0")]); err != nil {
					t.Fatal(err)
				}
			case op < 8:
				// Another bucket's writes leave the filter alone.
				if err := w.put(bucketTasks, k, []byte("t")); err != nil {
					t.Fatal(err)
				}
			case op < 9:
				if err := w.del(bucketTasks, k); err != nil {
					t.Fatal(err)
				}
			}
			for _, k := range keys {
				if got, want := w.get(bucketTasks, []byte(k)), plain.get(bucketTasks, []byte(k)); !bytes.Equal(got, want) {
					t.Fatalf("round %d: task %q: the write transaction reads %q, the file holds %q", round, k, got, want)
				}
				seeks := w.ops.Seeks
				got, want := w.get(bucketBlobs, []byte(k)), plain.get(bucketBlobs, []byte(k))
				if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
					t.Fatalf("round %d: blob %q: the write transaction reads %q, the file holds %q", round, k, got, want)
				}
				if w.ops.Seeks == seeks && want == nil {
					filtered++
				}
				if r.IntN(2) == 0 {
					// The next read goes to the filter and the file; or
					// the cache keeps what this one found (an absent key
					// too), as the apply's reads before a put do.
					w.recs = recCache{}
				}
				if got, want := w.has(bucketBlobs, []byte(k)), plain.has(bucketBlobs, []byte(k)); got != want {
					t.Fatalf("round %d: blob %q: the write transaction says present=%v, the file %v", round, k, got, want)
				}
			}
		}
		switch r.IntN(8) {
		case 0, 1:
			f.discardLocked()
			rolledBack++
		case 2:
			// A commit that fails (as on a full disk): a deferred put
			// that bbolt refuses when the transaction writes it.
			huge := strings.Repeat("k", bolt.MaxKeySize+1)
			w.recsOf(bucketJobs)[huge] = []byte("v")
			w.markDirty(bucketJobs, huge)
			if err := f.commitLocked(CommitDue); err == nil {
				t.Fatalf("round %d: a commit with a key of %d bytes succeeded", round, len(huge))
			}
			failed++
		default:
			if err := f.commitLocked(CommitDue); err != nil {
				t.Fatal(err)
			}
		}
		shared = max(shared, countsMatchFile(t, f, round))
	}
	t.Logf("the filter spared %d searches; %d transactions rolled back, %d commits failed; at most %d records shared a fingerprint",
		filtered, rolledBack, failed, shared)
	if filtered == 0 || shared < 2 || rolledBack == 0 || failed == 0 {
		t.Fatalf("the filter spared %d searches, %d transactions rolled back, %d commits failed, at most %d records shared a fingerprint: the test does not exercise it",
			filtered, rolledBack, failed, shared)
	}
	if builds := f.filterBuilds.Load(); builds != 2 {
		t.Fatalf("the filter was built from the file %d times, want 2 (at open, and after the test cleared it)", builds)
	}
}

// countsMatchFile fails t unless f's filter of blob keys counts each
// fingerprint as many times as the file's blob records have it; it
// returns the most records that share one.
func countsMatchFile(t *testing.T, f *FSM, round int) int {
	t.Helper()
	want := map[uint32]uint32{}
	var n uint64
	err := f.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBlobs).ForEach(func(k, v []byte) error {
			want[f.blobKeys.fingerprint(k)]++
			n++
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(f.blobKeys.counts, want) || f.blobKeys.keys() != n {
		t.Fatalf("round %d: the filter counts %d keys by fingerprint %v; the file holds %d: %v",
			round, f.blobKeys.keys(), f.blobKeys.counts, n, want)
	}
	most := 0
	for _, c := range want {
		most = max(most, int(c))
	}
	return most
}
