package gc

import (
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestExpiryGoesPastEndedBatchesWhoseKeysWereAllUsed: the lease entry of
// an upload batch whose every key an ack committed ends with the batch,
// but expires no key. A cycle that stopped at a scan expiring nothing
// stopped there while the index still held entries: with the upload
// batches of a busy cluster ending by the hundred ahead of it, an unused
// intent's expiry waited cycle after cycle (a consistency-suite run found
// one still in the bucket after the final cycles).
func TestExpiryGoesPastEndedBatchesWhoseKeysWereAllUsed(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 1)
	cfg := baseConfig()
	cfg.BatchSize = 2
	lease := t0.Add(time.Minute)
	for n := uint64(1); n <= 5; n++ {
		id := blobstore.NewBatchID(t0.Add(time.Duration(n)))
		e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 1, Task: "t0", Batch: id, Count: 1, LeaseUntil: lease})
		key := fsm.UploadKey("j", "t0", id, 0)
		e.put(key, logSize)
		e.do(fsm.CmdEpochBegin, fsm.EpochBegin{Job: w.job, Generation: w.gen, Epoch: n})
		d := manifests.Delta{AddSegments: []manifests.Segment{{Key: key, Offset: 0, Length: logSize, FirstSeq: n, LastSeq: n}}}
		res := e.do(fsm.CmdTaskAck, fsm.TaskAck{Job: w.job, Generation: w.gen, Epoch: n, Task: w.task,
			Manifest: &fsm.ManifestAck{Blobs: []fsm.BlobCommit{{Key: key, Size: logSize}}, Delta: &d}}).(*wire.AckResult)
		if !res.Completed {
			t.Fatalf("epoch %d did not complete", n)
		}
	}
	lost := e.intents("lost", 1, lease.Add(time.Second))
	e.clock.Advance(2 * time.Minute)
	c := e.collector(cfg)
	if rep := e.runOnce(c, RunOptions{}); rep.ExpiredIntents != 1 {
		t.Fatalf("a cycle behind 5 ended batches expired %d intents, want the unused one: %+v", rep.ExpiredIntents, rep)
	}
	if b, _, err := e.f.Blob(lost[0]); err != nil || b.State != wire.BlobExpired {
		t.Fatalf("the unused intent after the cycle: %+v %v", b, err)
	}
	if left, err := e.f.ExpiredIntents(e.clock.Now(), 100); err != nil || len(left) != 0 {
		t.Fatalf("lease entries left after the cycle: %v %v", left, err)
	}
}

// TestExpiryListsPastEntriesItKept: a listing made only of entries the
// state machine kept (refused: proposed under a stamp by which their
// leases still ran) does not end the cycle while the index holds entries
// past them; each entry is still proposed once.
func TestExpiryListsPastEntriesItKept(t *testing.T) {
	e := newEnv(t)
	e.startJob("j", 1)
	early := e.intents("early", 2, t0.Add(30*time.Minute))
	later := e.intents("later", 1, t0.Add(40*time.Minute))
	cfg := baseConfig()
	cfg.BatchSize = 2
	now := t0.Add(time.Hour)
	c := e.collector(cfg, func(d *Deps) { d.Now = func() time.Time { return now } })
	first := true
	e.beforeApply = func(cmd fsm.Command) {
		if cmd.Type == fsm.CmdIntentsExpire && first {
			// This proposal was stamped t0, before every lease's end; the
			// next ones are stamped after.
			first = false
			e.clock.Advance(2 * time.Hour)
		}
	}
	if rep := e.runOnce(c, RunOptions{}); rep.ExpiredIntents != 1 {
		t.Fatalf("expired %d behind a listing of kept entries, want 1: %+v", rep.ExpiredIntents, rep)
	}
	for _, k := range early {
		if b := e.blob(k); b.State != wire.BlobIntent {
			t.Fatalf("%s is %s, want the intent its refused proposal kept", k, b.State)
		}
	}
	if b := e.blob(later[0]); b.State == wire.BlobIntent {
		t.Fatalf("%s is still an intent, want it expired (and collected)", later[0])
	}
	proposed := map[string]int{}
	for _, p := range e.proposals(fsm.CmdIntentsExpire) {
		for _, k := range p.Keys {
			proposed[k]++
		}
	}
	for _, k := range append(early, later...) {
		if proposed[k] != 1 {
			t.Fatalf("%s proposed %d times, want once: %v", k, proposed[k], proposed)
		}
	}
}
