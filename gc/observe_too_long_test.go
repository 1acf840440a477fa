package gc

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
)

// TestObserveTooLongListingFallsBackToHead: a directory's time window that
// holds far more objects than the new blobs a pass observes there (a
// burst of uploads nobody acked) is not listed to the end (errListTooLong);
// the new blobs are then read with a HEAD each, as observe.go promises,
// rather than listed again, and failed again, by every later pass. The
// store is a cmd/s3server process on loopback (a NameLister).
func TestObserveTooLongListingFallsBackToHead(t *testing.T) {
	e := newEnv(t)
	store, ops := countedS3(t, "long")
	ctx := context.Background()
	at := time.Unix(1_800_000_000, 0)
	acked := []string{blobstore.NewKey("j/t0", at), blobstore.NewKey("j/t0", at.Add(time.Millisecond))}
	// The listing of the two keys' window stops after 10*2+1000 objects;
	// the window holds more, uploads no ack committed.
	const burst = 10*2 + 1000 + 5
	keys := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for k := range keys {
				if err := store.Put(ctx, k, bytes.NewReader(nil), 0); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range burst {
		keys <- blobstore.NewKey("j/t0", at.Add(time.Duration(2+i)*time.Microsecond))
	}
	close(keys)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, k := range acked {
		if err := store.Put(ctx, k, bytes.NewReader(make([]byte, 100)), 100); err != nil {
			t.Fatal(err)
		}
	}
	w := e.startJob("j", 100)
	e.do(fsm.CmdEpochBegin, fsm.EpochBegin{Job: w.job, Generation: w.gen, Epoch: 1})
	e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: w.job, Generation: w.gen, Task: w.task, Keys: acked, LeaseUntil: e.clock.Now().Add(time.Hour)})
	var blobs []fsm.BlobCommit
	d := &manifests.Delta{}
	for i, k := range acked {
		blobs = append(blobs, fsm.BlobCommit{Key: k, Size: 100})
		d.AddSegments = append(d.AddSegments, manifests.Segment{Key: k, Length: 100, FirstSeq: uint64(i + 1), LastSeq: uint64(i + 1)})
	}
	e.do(fsm.CmdTaskAck, fsm.TaskAck{Job: w.job, Generation: w.gen, Epoch: 1, Task: w.task, Manifest: &fsm.ManifestAck{Blobs: blobs, Delta: d}})

	c := e.collectorWith(baseConfig(), store)
	// The pass whose listing is too long may give up on the two blobs
	// (they stay queued); the next pass must observe them.
	var observed int
	for pass := 0; pass < 2 && observed < len(acked); pass++ {
		rep, err := c.Observe(ctx)
		if rep.Flagged != 0 {
			t.Fatalf("pass %d flagged %d blobs whose objects are as declared: %+v %v", pass, rep.Flagged, rep, err)
		}
		observed += rep.Observed
	}
	if observed != len(acked) {
		t.Fatalf("after two passes %d of %d new blobs observed (%d listings, %d HEADs): a window too long to list is listed again by every pass",
			observed, len(acked), ops.get(blobstore.OpList), ops.get(blobstore.OpHead))
	}
	for _, k := range acked {
		if b := e.blob(k); b.Observed == nil || b.Observed.Missing || b.Observed.Size != 100 || b.Flagged {
			t.Fatalf("%s: %+v", k, b)
		}
	}
	// They were HEADed: the listing stopped at its bound rather than read
	// the whole window.
	if heads := ops.get(blobstore.OpHead); heads != len(acked) {
		t.Fatalf("%d HEADs (%d listings), want one per blob of the window too long to list", heads, ops.get(blobstore.OpList))
	}
}
