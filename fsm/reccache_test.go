package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestWriteTxnCacheMatchesFile: the write transaction's cache of point
// reads (txn.recs) answers what the file answers, through random puts,
// deletes, prefix deletes and reads of the cached buckets and of one that
// is not cached, read through the cache and read from the file by a
// transaction without one.
func TestWriteTxnCacheMatchesFile(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "c.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	names := []bucket{bucketJobs, bucketTasks, bucketEpochs, bucketHeads, bucketLineages, bucketBlobs, bucketAcks}
	tx, err := db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, n := range names {
		if _, err := tx.CreateBucket(n); err != nil {
			t.Fatal(err)
		}
	}
	cached, file := &txn{tx: tx, recs: recCache{}}, &txn{tx: tx}
	r := rand.New(rand.NewPCG(3, 4))
	keys := []string{"a", "a\x00", "a\x001", "a\x002", "ab", "ab\x001", "b", "b\x001"}
	for i := range 20_000 {
		name := names[r.IntN(len(names))]
		key := []byte(keys[r.IntN(len(keys))])
		switch op := r.IntN(10); {
		case op < 3:
			v := fmt.Appendf(nil, "v%d", i)
			if err := cached.put(name, key, v); err != nil {
				t.Fatal(err)
			}
		case op < 5:
			if err := cached.del(name, key); err != nil {
				t.Fatal(err)
			}
		case op < 6:
			if err := cached.deletePrefix(name, key[:1+r.IntN(len(key))]); err != nil {
				t.Fatal(err)
			}
		default:
			cached.get(name, key)
		}
		for _, n := range names {
			for _, k := range keys {
				if got, want := cached.get(n, []byte(k)), file.get(n, []byte(k)); !bytes.Equal(got, want) || (got == nil) != (want == nil) {
					t.Fatalf("op %d: %s/%q: the cache answers %q, the file %q", i, n, k, got, want)
				}
			}
		}
	}
	if len(cached.recs) == 0 {
		t.Fatal("nothing was cached")
	}
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
