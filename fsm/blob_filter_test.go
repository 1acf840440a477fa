package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

// TestBlobFilterNeverHidesARecord: through random puts, deletes and
// prefix deletes of blob records, transactions committed and rolled back,
// and filters built again once full (a tiny one here, so that it fills,
// and answers "maybe" for absent keys often), the state machine's write
// transaction reads every blob record the file holds: the filter of blob
// keys only spares searches for keys that have none. Reads are compared
// with a transaction on the same file without the filter.
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

	// Filters sized for few keys: they fill within rounds and are built
	// again from the file.
	prev := blobFilterMin
	blobFilterMin = 8
	defer func() { blobFilterMin = prev }()
	f.blobKeys = nil

	r := rand.New(rand.NewPCG(5, 6))
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("job-%d/task/%03d", i%3, i)
	}
	var filtered, rebuilt int
	for round := range 300 {
		before := f.blobKeys
		if err := f.begin(); err != nil {
			t.Fatal(err)
		}
		if f.blobKeys != before {
			rebuilt++
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
			}
			for _, k := range keys {
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
		if r.IntN(4) == 0 {
			f.discardLocked()
		} else if err := f.commitLocked(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the filter spared %d searches; it was built %d times", filtered, rebuilt)
	if filtered == 0 || rebuilt == 0 {
		t.Fatalf("the filter spared %d searches and was built %d times: the test does not exercise it", filtered, rebuilt)
	}
}
