package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestWriteTxnCacheMatchesFile: the write transaction's cache of point
// reads (txn.recs), and the puts it defers to its commit (txn.dirty, the
// deferredBuckets), answer what a file written directly answers, through
// random puts, deletes, prefix deletes, reads, membership tests and scans
// of the cached buckets and of one that is not cached. The same
// operations go to a transaction with the cache on one file and to one
// without it on another; after the deferred puts are made, both files
// hold the same.
func TestWriteTxnCacheMatchesFile(t *testing.T) {
	names := []bucket{bucketJobs, bucketTasks, bucketEpochs, bucketHeads, bucketLineages, bucketBlobs, bucketAcks}
	cached := &txn{tx: openWriteTx(t, "cached.db", names), recs: recCache{}, dirty: map[string]map[string]struct{}{}, deferBlobs: true}
	file := &txn{tx: openWriteTx(t, "file.db", names)}
	both := func(fn func(t *txn) error) {
		t.Helper()
		if err := fn(cached); err != nil {
			t.Fatal(err)
		}
		if err := fn(file); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	keys := []string{"a", "a\x00", "a\x001", "a\x002", "ab", "ab\x001", "b", "b\x001"}
	deferred := 0
	for i := range 20_000 {
		name := names[r.IntN(len(names))]
		key := []byte(keys[r.IntN(len(keys))])
		switch op := r.IntN(20); {
		case op < 6:
			v := fmt.Appendf(nil, "v%d", i)
			both(func(t *txn) error { return t.put(name, key, v) })
		case op < 10:
			both(func(t *txn) error { return t.del(name, key) })
		case op < 12:
			prefix := key[:1+r.IntN(len(key))]
			both(func(t *txn) error { return t.deletePrefix(name, prefix) })
		case op < 13:
			prefix := key[:r.IntN(len(key)+1)]
			if got, want := scanned(t, cached, name, prefix), scanned(t, file, name, prefix); got != want {
				t.Fatalf("op %d: scan of %s/%q: the cached transaction reads %s, the file %s", i, name, prefix, got, want)
			}
		default:
			cached.get(name, key)
		}
		for _, d := range cached.dirty {
			deferred += len(d)
		}
		for _, n := range names {
			for _, k := range keys {
				if got, want := cached.get(n, []byte(k)), file.get(n, []byte(k)); !bytes.Equal(got, want) || (got == nil) != (want == nil) {
					t.Fatalf("op %d: %s/%q: the cache answers %q, the file %q", i, n, k, got, want)
				}
				if got, want := cached.has(n, []byte(k)), file.has(n, []byte(k)); got != want {
					t.Fatalf("op %d: %s/%q: the cached transaction says present=%v, the file %v", i, n, k, got, want)
				}
			}
		}
	}
	if len(cached.recs) == 0 || deferred == 0 {
		t.Fatalf("nothing was cached (%d buckets) or deferred (%d puts waiting, summed over the operations)", len(cached.recs), deferred)
	}
	if err := cached.flushAll(); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		cached.recs, cached.dirty = nil, nil // read the file itself
		if got, want := scanned(t, cached, n, nil), scanned(t, file, n, nil); got != want {
			t.Fatalf("after the deferred puts, bucket %s holds %s; written directly, %s", n, got, want)
		}
	}
}

// openWriteTx opens a write transaction of a new file holding buckets
// names, rolled back and closed when the test ends.
func openWriteTx(t *testing.T, file string, names []bucket) *bolt.Tx {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), file), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tx, err := db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	for _, n := range names {
		if _, err := tx.CreateBucket(n); err != nil {
			t.Fatal(err)
		}
	}
	return tx
}

// scanned lists the keys and values of tx's bucket name under prefix, as
// a scan reads them.
func scanned(t *testing.T, tx *txn, name bucket, prefix []byte) string {
	t.Helper()
	var out []string
	err := tx.scan(name, prefix, func(k, v []byte) (bool, error) {
		out = append(out, fmt.Sprintf("%q=%x", k, v))
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, " ")
}

// TestCachedBucketsWrittenThroughHelpers: no code of the package writes a
// cached bucket around the helpers that keep the write transaction's
// cache (put, putRecord, del, deletePrefix): a bucket handle of one is
// taken only in schema.go's helpers, which name their bucket by variable.
func TestCachedBucketsWrittenThroughHelpers(t *testing.T) {
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]bucket{"bucketJobs": bucketJobs, "bucketTasks": bucketTasks, "bucketEpochs": bucketEpochs, "bucketHeads": bucketHeads, "bucketLineages": bucketLineages, "bucketBlobs": bucketBlobs}
	for name, b := range consts {
		if !cachedBuckets[string(b)] {
			t.Fatalf("%s is not in cachedBuckets", name)
		}
	}
	if len(consts) != len(cachedBuckets) {
		t.Fatalf("cachedBuckets has %d buckets, the test knows %d", len(cachedBuckets), len(consts))
	}
	for _, p := range paths {
		// encoding.go's migrations rewrite records in transactions of
		// their own, at open, before the state machine's write
		// transaction (and its cache) exists.
		if strings.HasSuffix(p, "_test.go") || p == "encoding.go" {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for name := range consts {
			for _, handle := range []string{".b(" + name + ")", ".Bucket(" + name + ")"} {
				if bytes.Contains(src, []byte(handle)) {
					t.Errorf("%s takes a handle of cached bucket %s (%s): write it through put, putRecord, del or deletePrefix", p, name, handle)
				}
			}
		}
	}
}

// TestDeferredPutRefusedWhereMade: a put the write transaction defers
// (deferredBuckets) is refused at the put when bbolt would refuse it, as
// an undeferred put is, not at the commit, where the refusal would fail
// every retry of the commit.
func TestDeferredPutRefusedWhereMade(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "d.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.CreateBucket(bucketEpochs); err != nil {
		t.Fatal(err)
	}
	w := &txn{tx: tx, recs: recCache{}, dirty: map[string]map[string]struct{}{}}
	if !w.deferred(bucketEpochs) {
		t.Fatal("epochs are not deferred")
	}
	for _, c := range []struct {
		key, value []byte
		want       error
	}{
		{nil, []byte("v"), bolt.ErrKeyRequired},
		{make([]byte, bolt.MaxKeySize+1), []byte("v"), bolt.ErrKeyTooLarge},
	} {
		if err := w.put(bucketEpochs, c.key, c.value); !errors.Is(err, c.want) {
			t.Errorf("deferred put of a %d-byte key: %v, want %v", len(c.key), err, c.want)
		}
	}
	if err := w.flushAll(); err != nil {
		t.Fatalf("the refused puts were kept for the commit: %v", err)
	}
}
