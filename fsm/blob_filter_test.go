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
	// A follower's transactions defer the puts of blob records to the
	// commit (deferredBuckets), a leader's do not.
	for _, leading := range []bool{false, true} {
		t.Run(fmt.Sprintf("leading=%v", leading), func(t *testing.T) { testBlobFilterNeverHidesARecord(t, leading) })
	}
}

func testBlobFilterNeverHidesARecord(t *testing.T, leading bool) {
	f, err := Open(filepath.Join(t.TempDir(), "fsm.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.SetLeading(leading)
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
	var filtered, shared, rolledBack, failed, pending int
	// committed and cur model the blob records: the file's after the
	// last commit, and the open transaction's (whose puts are deferred to
	// its commit, or to a flush of the bucket).
	committed := map[string]string{}
	for round := range 300 {
		if err := f.begin(); err != nil {
			t.Fatal(err)
		}
		cur := maps.Clone(committed)
		w, plain := f.wt, &txn{tx: f.wt.tx}
		for i := range 20 {
			k := []byte(keys[r.IntN(len(keys))])
			switch op := r.IntN(11); {
			case op < 3:
				v := fmt.Sprintf("v%d.%d", round, i)
				if err := w.put(bucketBlobs, k, []byte(v)); err != nil {
					t.Fatal(err)
				}
				cur[string(k)] = v
			case op < 5:
				if err := w.del(bucketBlobs, k); err != nil {
					t.Fatal(err)
				}
				delete(cur, string(k))
			case op < 6:
				prefix := string(k[:len("job-0/task/0")])
				if err := w.deletePrefix(bucketBlobs, []byte(prefix)); err != nil {
					t.Fatal(err)
				}
				maps.DeleteFunc(cur, func(k, _ string) bool { return strings.HasPrefix(k, prefix) })
			case op < 8:
				// Another bucket's writes leave the filter alone.
				if err := w.put(bucketTasks, k, []byte("t")); err != nil {
					t.Fatal(err)
				}
			case op < 9:
				if err := w.del(bucketTasks, k); err != nil {
					t.Fatal(err)
				}
			case op < 10:
				// The deferred puts made in the file, as a scan of the
				// bucket makes them.
				if err := w.flush(bucketBlobs); err != nil {
					t.Fatal(err)
				}
			}
			pending += len(w.dirty[string(bucketBlobs)])
			for _, k := range keys {
				if got, want := w.get(bucketTasks, []byte(k)), plain.get(bucketTasks, []byte(k)); !bytes.Equal(got, want) {
					t.Fatalf("round %d: task %q: the write transaction reads %q, the file holds %q", round, k, got, want)
				}
				spared := w.ops.Spared
				v, ok := cur[k]
				if got := w.get(bucketBlobs, []byte(k)); (got == nil) == ok || string(got) != v {
					t.Fatalf("round %d: blob %q: the write transaction reads %q, want %q (present %v)", round, k, got, v, ok)
				}
				if _, dirty := w.dirty[string(bucketBlobs)][k]; !dirty {
					if got, want := w.get(bucketBlobs, []byte(k)), plain.get(bucketBlobs, []byte(k)); !bytes.Equal(got, want) {
						t.Fatalf("round %d: blob %q: the write transaction reads %q, the file holds %q", round, k, got, want)
					}
				}
				// Searches the filter answered (absent keys read from
				// the file, not from the cache).
				filtered += int(w.ops.Spared - spared)
				if r.IntN(2) == 0 {
					// The next read goes to the filter and the file; or
					// the cache keeps what this one found (an absent key
					// too), as the apply's reads before a put do. (What a
					// deferred put holds stays: it is in no file yet.)
					for name, m := range w.recs {
						maps.DeleteFunc(m, func(k string, _ []byte) bool {
							_, dirty := w.dirty[name][k]
							return !dirty
						})
					}
				}
				if got := w.has(bucketBlobs, []byte(k)); got != ok {
					t.Fatalf("round %d: blob %q: the write transaction says present=%v, want %v", round, k, got, ok)
				}
			}
		}
		outcome := "committed"
		switch r.IntN(8) {
		case 0, 1:
			f.discardLocked()
			rolledBack++
			outcome = "rolled back"
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
			outcome = "failed"
		default:
			if err := f.commitLocked(CommitDue); err != nil {
				t.Fatal(err)
			}
		}
		if outcome == "committed" {
			committed = cur
		}
		if got := fileBlobs(t, f); !maps.Equal(got, committed) {
			t.Fatalf("round %d (%s): the file holds the blob records %v, want %v", round, outcome, got, committed)
		}
		shared = max(shared, countsMatchFile(t, f, round))
	}
	t.Logf("the filter spared %d searches; %d transactions rolled back, %d commits failed; at most %d records shared a fingerprint; %d deferred puts seen pending",
		filtered, rolledBack, failed, shared, pending)
	if leading != (pending == 0) {
		t.Fatalf("leading=%v: %d deferred puts of blob records seen pending", leading, pending)
	}
	if filtered == 0 || shared < 2 || rolledBack == 0 || failed == 0 {
		t.Fatalf("the filter spared %d searches, %d transactions rolled back, %d commits failed, at most %d records shared a fingerprint, %d deferred puts pending: the test does not exercise it",
			filtered, rolledBack, failed, shared, pending)
	}
	if builds := f.filterBuilds.Load(); builds != 2 {
		t.Fatalf("the filter was built from the file %d times, want 2 (at open, and after the test cleared it)", builds)
	}
}

// fileBlobs is the blob records of f's file, by key.
func fileBlobs(t *testing.T, f *FSM) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := f.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBlobs).ForEach(func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
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
