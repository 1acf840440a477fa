package gc

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
)

// TestObserveListsNewKeys: on S3, the new blobs of a task whose keys
// blobstore.NewKey made within a listing window are observed with one
// listing, not a HEAD each: an object of the declared size is recorded as
// found with its ETag, one of another size and a missing one are flagged.
// Keys of other shapes, and a window's only key, are HEADed. A pass reads
// the store once for its blobs however many entries it proposes: the
// window is listed once for entries of 3 blobs. The store is a
// cmd/s3server process on loopback.
func TestObserveListsNewKeys(t *testing.T) {
	e := newEnv(t)
	store, ops := countedS3(t, "obs")
	w := e.startJob("j", 100)
	at := time.Unix(1_800_000_000, 0)
	var keys []string
	for i := range 6 {
		keys = append(keys, blobstore.NewKey("j/t0", at.Add(time.Duration(i)*time.Millisecond)))
	}
	lone := blobstore.NewKey("j/t0", at.Add(time.Hour)) // alone in its window
	other := "j/t0/log-1"                               // not NewKey's shape
	keys = append(keys, lone, other)
	ctx := context.Background()
	// keys[0] and the lone and other keys hold 100 bytes as declared;
	// keys[1] holds 7; keys[2] is missing; the rest hold 100.
	for i, k := range keys {
		size := 100
		switch i {
		case 1:
			size = 7
		case 2:
			continue
		}
		if err := store.Put(ctx, k, bytes.NewReader(make([]byte, size)), int64(size)); err != nil {
			t.Fatal(err)
		}
	}
	// An object in the listing's window that no blob names.
	if err := store.Put(ctx, blobstore.NewKey("j/t0", at.Add(3*time.Millisecond)), bytes.NewReader(nil), 0); err != nil {
		t.Fatal(err)
	}
	e.do(fsm.CmdEpochBegin, fsm.EpochBegin{Job: w.job, Generation: w.gen, Epoch: 1})
	e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: w.job, Generation: w.gen, Task: w.task, Keys: keys, LeaseUntil: e.clock.Now().Add(time.Hour)})
	var blobs []fsm.BlobCommit
	d := &manifests.Delta{}
	for i, k := range keys {
		blobs = append(blobs, fsm.BlobCommit{Key: k, Size: 100})
		d.AddSegments = append(d.AddSegments, manifests.Segment{Key: k, Length: 100, FirstSeq: uint64(i + 1), LastSeq: uint64(i + 1)})
	}
	e.do(fsm.CmdTaskAck, fsm.TaskAck{Job: w.job, Generation: w.gen, Epoch: 1, Task: w.task, Manifest: &fsm.ManifestAck{Blobs: blobs, Delta: d}})

	ops.reset()
	cfg2 := baseConfig()
	cfg2.ObserveBatch = 3
	c := e.collectorWith(cfg2, store)
	rep, err := c.Observe(ctx)
	if err != nil || rep.Observed != len(keys) || rep.Flagged != 2 || rep.Errors != 0 {
		t.Fatalf("observe: %+v %v; want %d observed, 2 flagged", rep, err, len(keys))
	}
	lists, heads := ops.get(blobstore.OpList), ops.get(blobstore.OpHead)
	if lists != 1 || heads != 2 {
		t.Fatalf("%d listings and %d HEADs; want 1 listing for the six keys of one window and 2 HEADs (the lone key, the other shape)", lists, heads)
	}
	if entries := e.observedEntries(); len(entries) != 3 {
		t.Fatalf("%d blobs-observed entries for %d blobs in entries of 3", len(entries), len(keys))
	}
	for i, k := range keys {
		b, _, err := e.f.Blob(k)
		if err != nil || b == nil || b.Observed == nil {
			t.Fatalf("%s: %+v %v", k, b, err)
		}
		wantFlag := i == 1 || i == 2
		if b.Flagged != wantFlag || b.Observed.Missing != (i == 2) {
			t.Errorf("%s: flagged %v, observed %+v", k, b.Flagged, *b.Observed)
		}
		if i != 2 && (b.Observed.ETag == "" || (i == 1) != (b.Observed.Size == 7)) {
			t.Errorf("%s: observed %+v", k, *b.Observed)
		}
	}
}

// TestListGroups: keys of one directory and window share a listing; a
// window's only key, another directory's and other shapes are HEADed.
func TestListGroups(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	a1 := blobstore.NewKey("j/a", at)
	a2 := blobstore.NewKey("j/a", at.Add(time.Second))
	a3 := blobstore.NewKey("j/a", at.Add(time.Minute)) // another window
	b1 := blobstore.NewKey("j/b", at)
	b2 := blobstore.NewKey("j/b", at.Add(time.Millisecond))
	lists, heads := listGroups([]string{a1, "j/a/old", a2, a3, b1, b2, "top"})
	if len(lists) != 2 || len(lists[0].keys) != 2 || len(lists[1].keys) != 2 ||
		lists[0].prefix != a1[:len("j/a/")+8] || lists[1].prefix != b1[:len("j/b/")+8] {
		t.Fatalf("listings %+v", lists)
	}
	if len(heads) != 3 {
		t.Fatalf("HEADs %v, want j/a/old, top and the lone key", heads)
	}
}

// opCounts counts a store's calls by operation (a blobstore.Observer).
type opCounts struct {
	mu  sync.Mutex
	ops map[string]int
}

func (c *opCounts) observe(op string, _ int, _ error, _ time.Duration) {
	c.mu.Lock()
	c.ops[op]++
	c.mu.Unlock()
}

func (c *opCounts) get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops[op]
}

func (c *opCounts) reset() {
	c.mu.Lock()
	clear(c.ops)
	c.mu.Unlock()
}

// countedS3 is an S3 store over a cmd/s3server process on loopback with
// its own bucket, and the count of its calls.
func countedS3(t *testing.T, bucket string) (*blobstore.S3, *opCounts) {
	t.Helper()
	cfg := blobtest.Config(blobtest.StartS3Server(t, bucket), bucket, "ms")
	ops := &opCounts{ops: map[string]int{}}
	cfg.Observer = ops.observe
	store, err := blobstore.NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return store, ops
}
