package gc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// intents records n single intents of job j whose lease ends at lease,
// each with its object uploaded, and returns their keys, sorted.
func (e *env) intents(prefix string, n int, lease time.Time) []string {
	e.t.Helper()
	var keys []string
	for i := range n {
		keys = append(keys, fmt.Sprintf("j/t0/%s-%02d", prefix, i))
	}
	e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 1, Task: "t0", Keys: keys, LeaseUntil: lease})
	for _, k := range keys {
		e.put(k, 3)
	}
	return keys
}

// TestRunStartsWithResumeOnly: the pass Run makes when it starts finishes
// the blobs left deleting and nothing else: no intent is expired, no
// candidate marked, no orphan swept until the next cycle.
func TestRunStartsWithResumeOnly(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e)
	if marked := e.do(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: unreferenced[:2]}).([]string); len(marked) != 2 {
		t.Fatalf("marked %v", marked)
	}
	e.intents("lost", 1, t0.Add(time.Minute))
	e.put("orphans/o", 1)
	e.age("orphans/o", t0.Add(-2*time.Hour))
	e.clock.Advance(grace + time.Hour)
	cfg := baseConfig()
	cfg.OrphanEvery = time.Hour // due: never swept
	c := e.collector(cfg)
	reports := make(chan *Report, 10)
	c.hooks.afterCycle = func(r *Report, err error) {
		if err != nil {
			t.Errorf("cycle: %v", err)
		}
		reports <- r
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { c.Run(ctx); close(stopped) }()
	rep := next(t, reports)
	cancel()
	<-stopped
	if !rep.ResumeOnly || rep.Resumed != 2 || rep.Deleted != 2 || rep.MarksProposed != 0 || rep.ExpiredIntents != 0 || rep.OrphanSweep {
		t.Fatalf("the starting pass: %+v, want only the 2 deleting blobs finished", rep)
	}
	for _, typ := range []fsm.CommandType{fsm.CmdIntentsExpire, fsm.CmdBlobsDeleting, fsm.CmdSlotCutoff} {
		if n := len(e.proposals(typ)); n != 0 {
			t.Fatalf("%d %s proposed by the starting pass", n, typ)
		}
	}
	if !e.has("orphans/o") || !e.has(unreferenced[2]) {
		t.Fatal("the starting pass deleted more than the deleting blobs")
	}
}

// TestExpiredUploadBatchCountsEveryKey: an upload batch's lease entry names
// one key, and its expiry turns every unused key into a candidate: the
// report and the metric count the keys expired, not the entries proposed,
// and all of them are collected after the grace.
func TestExpiredUploadBatchCountsEveryKey(t *testing.T) {
	e := newEnv(t)
	e.startJob("j", 1)
	id := blobstore.NewBatchID(t0)
	e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 1, Task: "t0", Batch: id, Count: 3, LeaseUntil: t0.Add(time.Minute)})
	var keys []string
	for i := range 3 {
		k := fsm.UploadKey("j", "t0", id, i)
		keys = append(keys, k)
		e.put(k, 4)
	}
	c := e.collector(baseConfig())
	e.clock.Advance(2 * time.Minute)
	rep := e.runOnce(c, RunOptions{})
	if p := e.proposals(fsm.CmdIntentsExpire); len(p) != 1 || len(p[0].Keys) != 1 {
		t.Fatalf("intents-expire proposals %+v, want one naming the batch's lease entry", p)
	}
	if rep.ExpiredIntents != 3 || counterValue(t, c.m.expiredIntents) != 3 {
		t.Fatalf("expired %d (metric %v), want the batch's 3 keys", rep.ExpiredIntents, counterValue(t, c.m.expiredIntents))
	}
	e.clock.Advance(grace)
	if rep := e.runOnce(c, RunOptions{}); rep.Deleted != 3 {
		t.Fatalf("after the grace: %+v", rep)
	}
	for _, k := range keys {
		if e.has(k) {
			t.Fatalf("%s of the expired batch left in the store", k)
		}
	}
}

// TestEveryBatchInOneCycle: a cycle goes on, BatchSize keys per entry,
// until every expired intent is expired, every candidate past its grace
// deleted and every old tombstone purged; it does not stop at one batch.
func TestEveryBatchInOneCycle(t *testing.T) {
	e := newEnv(t)
	e.startJob("j", 1)
	keys := e.intents("lost", 5, t0.Add(time.Minute))
	cfg := baseConfig()
	cfg.BatchSize = 2
	c := e.collector(cfg)
	e.clock.Advance(2 * time.Minute)
	if rep := e.runOnce(c, RunOptions{}); rep.ExpiredIntents != 5 {
		t.Fatalf("expired %d in a cycle, want 5: %+v", rep.ExpiredIntents, rep)
	}
	if p := e.proposals(fsm.CmdIntentsExpire); len(p) != 3 {
		t.Fatalf("%d intents-expire entries for 5 intents in batches of 2", len(p))
	}
	e.clock.Advance(grace)
	if rep := e.runOnce(c, RunOptions{}); rep.Deleted != 5 {
		t.Fatalf("deleted %d in a cycle, want 5: %+v", rep.Deleted, rep)
	}
	e.clock.Advance(cfg.TombstoneTTL)
	if rep := e.runOnce(c, RunOptions{}); rep.Purged != 5 {
		t.Fatalf("purged %d in a cycle, want 5: %+v", rep.Purged, rep)
	}
	if p := e.proposals(fsm.CmdBlobsPurge); len(p) != 3 {
		t.Fatalf("%d purge entries for 5 tombstones in batches of 2", len(p))
	}
	known, err := e.f.Known(keys)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range known {
		if v {
			t.Fatalf("purged key %s still known", k)
		}
	}
}

// TestResumeSkipsKeysThatFailed: a deleting key whose delete fails is not
// sent again in the same cycle; the scan goes past it, full batches at a
// time, to the others, so one stuck key costs neither a Delete call nor a
// gone entry per batch.
func TestResumeSkipsKeysThatFailed(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e)
	deleting := slices.Sorted(slices.Values(unreferenced[:4]))
	if marked := e.do(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: deleting}).([]string); len(marked) != 4 {
		t.Fatalf("marked %v", marked)
	}
	cfg := baseConfig()
	cfg.BatchSize = 2
	c := e.collector(cfg)
	stuck := deleting[0]
	e.store.set(func(s *testStore) { s.failKeys[stuck] = errors.New("SlowDown") })
	// Grace not over: the cycle only resumes.
	rep := e.runOnce(c, RunOptions{})
	if rep.Resumed != 3 || rep.DeleteErrors != 1 || rep.MarksProposed != 0 {
		t.Fatalf("report %+v, want 3 resumed and the stuck key failing once", rep)
	}
	want := [][]string{deleting[:2], deleting[2:]}
	if calls := e.store.deleteCalls(); !slices.EqualFunc(calls, want, slices.Equal) {
		t.Fatalf("Delete calls %v, want %v", calls, want)
	}
	if p := e.proposals(fsm.CmdBlobsGone); len(p) != 2 {
		t.Fatalf("%d gone entries, want 2 (batches of 2, the stuck key skipped): %+v", len(p), p)
	}
	if b := e.blob(stuck); b.State != wire.BlobDeleting || !e.has(stuck) {
		t.Fatalf("stuck key %+v", b)
	}
}

// TestStoreDownEndsTheCycle: once a Delete call failed as a whole, or for
// every key it carried, the cycle sends no more Delete calls and proposes
// no more marks, and it does not sweep orphans; a sweep whose Delete fails
// stops there too.
func TestStoreDownEndsTheCycle(t *testing.T) {
	t.Run("every key of a call failed", func(t *testing.T) {
		e := newEnv(t)
		_, _, unreferenced := fill(e)
		cfg := baseConfig()
		cfg.BatchSize = 2
		c := e.collector(cfg)
		e.clock.Advance(grace)
		e.store.set(func(s *testStore) {
			for _, k := range unreferenced {
				s.failKeys[k] = errors.New("AccessDenied")
			}
		})
		rep := e.runOnce(c, RunOptions{})
		if rep.Marked != 2 || rep.Deleted != 0 || len(e.store.deleteCalls()) != 1 {
			t.Fatalf("report %+v after %d Delete calls, want one batch of 2 marked and one call", rep, len(e.store.deleteCalls()))
		}
		// Nothing confirmed, nothing to record: no gone entry.
		if p := e.proposals(fsm.CmdBlobsGone); len(p) != 0 {
			t.Fatalf("gone entries %+v proposed for no confirmed delete", p)
		}
	})
	t.Run("a whole call failed in a batch of chunks", func(t *testing.T) {
		e := newEnv(t)
		fill(e)
		cfg := baseConfig()
		cfg.Rate = 2 // two keys a call: the batch of 10 in 5 calls
		c := e.collector(cfg)
		e.clock.Advance(grace)
		e.store.set(func(s *testStore) { s.failAll = errors.New("503 Service Unavailable") })
		rep := e.runOnce(c, RunOptions{})
		if calls := e.store.deleteCalls(); len(calls) != 1 || rep.DeleteErrors != 2 {
			t.Fatalf("%d Delete calls (%v), %d delete errors; want 1 call to a store that is down", len(calls), calls, rep.DeleteErrors)
		}
	})
	t.Run("no sweep after", func(t *testing.T) {
		e := newEnv(t)
		fill(e)
		e.put("orphans/o", 1)
		e.age("orphans/o", t0.Add(-2*time.Hour))
		s := &listingStore{testStore: e.store}
		c := e.collectorWith(baseConfig(), s)
		e.clock.Advance(grace)
		e.store.set(func(s *testStore) { s.failAll = errors.New("connection refused") })
		rep := e.runOnce(c, RunOptions{Orphans: true})
		if rep.OrphanSweep || s.lists != 0 || len(e.store.deleteCalls()) != 1 || !e.has("orphans/o") {
			t.Fatalf("swept after the store failed: %+v, %d listings, %d Delete calls", rep, s.lists, len(e.store.deleteCalls()))
		}
	})
	t.Run("sweep stops at its failed call", func(t *testing.T) {
		e := newEnv(t)
		for i := range 4 {
			k := fmt.Sprintf("orphans/o%d", i)
			e.put(k, 1)
			e.age(k, t0.Add(-2*time.Hour))
		}
		cfg := baseConfig()
		cfg.BatchSize = 2
		c := e.collector(cfg)
		e.store.set(func(s *testStore) { s.failAll = errors.New("connection refused") })
		rep := e.runOnce(c, RunOptions{Orphans: true})
		if calls := e.store.deleteCalls(); len(calls) != 1 || rep.OrphansDeleted != 0 || rep.DeleteErrors != 2 {
			t.Fatalf("sweep against a store that is down: %+v, Delete calls %v; want one call", rep, calls)
		}
	})
}

// TestRefusedMarksEndTheMarking: candidates the state machine refuses to
// mark (here: the collector's clock is ahead of the stamp of its
// proposals, so by the stamp their grace is not over) end the marking for
// the cycle instead of being proposed again and again.
func TestRefusedMarksEndTheMarking(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e)
	cfg := baseConfig()
	cfg.BatchSize = 2
	c := e.collector(cfg, func(d *Deps) { d.Now = func() time.Time { return e.clock.Now().Add(grace) } })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rep, err := c.RunOnce(ctx, RunOptions{})
	if err != nil {
		t.Fatalf("cycle: %v (%+v)", err, rep)
	}
	if rep.MarksProposed != 2 || rep.Marked != 0 || len(e.proposals(fsm.CmdBlobsDeleting)) != 1 || len(e.store.deleteCalls()) != 0 {
		t.Fatalf("report %+v, %d marks proposed; want one refused batch and no delete", rep, len(e.proposals(fsm.CmdBlobsDeleting)))
	}
	for _, k := range unreferenced {
		if !e.has(k) {
			t.Fatalf("%s deleted although no mark committed", k)
		}
	}
}

// TestRunOnceWithAnEndedContextRunsNothing: a RunOnce whose context has
// already ended (the API request gone, leadership lost) runs no cycle,
// even when none is in progress: nothing is proposed, deleted or recorded.
func TestRunOnceWithAnEndedContextRunsNothing(t *testing.T) {
	e := newEnv(t)
	fill(e)
	e.clock.Advance(grace)
	c := e.collector(baseConfig())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// acquire chooses at random between a free slot and an ended context
	// if it does not look at the context first: try often.
	for range 50 {
		if rep, err := c.RunOnce(ctx, RunOptions{}); !errors.Is(err, context.Canceled) || rep != nil {
			t.Fatalf("RunOnce with an ended context: %+v %v", rep, err)
		}
	}
	if st := c.Status(); st.Totals.Cycles != 0 || st.LastRun != nil || e.proposedCount() != 0 {
		t.Fatalf("cycles ran with an ended context: %+v, %d proposals", st.Totals, e.proposedCount())
	}
}

// TestIntentExpiresWhenItsLeaseEnds: an intent whose lease ends at the
// cycle's clock is expired by that cycle (the state machine expires a
// lease over by the command's time, end included).
func TestIntentExpiresWhenItsLeaseEnds(t *testing.T) {
	e := newEnv(t)
	e.startJob("j", 1)
	e.intents("lost", 1, t0.Add(time.Hour))
	c := e.collector(baseConfig())
	e.clock.Advance(time.Hour - time.Nanosecond)
	if rep := e.runOnce(c, RunOptions{}); rep.ExpiredIntents != 0 {
		t.Fatalf("before the lease's end: %+v", rep)
	}
	e.clock.Advance(time.Nanosecond)
	if rep := e.runOnce(c, RunOptions{}); rep.ExpiredIntents != 1 {
		t.Fatalf("at the lease's end: %+v", rep)
	}
}

// nilFailureStore reports every key of a Delete failed with no error
// value, as a store's batch answer may name a key without a message.
type nilFailureStore struct {
	*testStore
}

func (s nilFailureStore) Delete(ctx context.Context, keys []string) (map[string]error, error) {
	failed := make(map[string]error, len(keys))
	for _, k := range keys {
		failed[k] = nil
	}
	return failed, nil
}

// TestKeyNamedFailedWithoutAnErrorIsNotConfirmed: a key the store's answer
// names as failed, even with no error value, is not recorded gone: it
// stays deleting, in the store, to be deleted again.
func TestKeyNamedFailedWithoutAnErrorIsNotConfirmed(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e)
	c := e.collectorWith(baseConfig(), nilFailureStore{e.store})
	e.clock.Advance(grace)
	rep := e.runOnce(c, RunOptions{})
	if rep.Deleted != 0 || rep.DeleteErrors != len(unreferenced) || len(e.proposals(fsm.CmdBlobsGone)) != 0 {
		t.Fatalf("report %+v, want every key failed and none recorded gone", rep)
	}
	for _, k := range unreferenced {
		if b := e.blob(k); b.State != wire.BlobDeleting {
			t.Fatalf("%s is %s, want deleting", k, b.State)
		}
	}
}

// TestRefusedExpiriesEndTheExpiry: intents the state machine refuses to
// expire (the collector's clock is ahead of its proposals' stamp, by
// which their leases still run) are proposed once each in the cycle, not
// again and again, and the cycle ends.
func TestRefusedExpiriesEndTheExpiry(t *testing.T) {
	e := newEnv(t)
	e.startJob("j", 1)
	keys := e.intents("lost", 3, t0.Add(30*time.Minute))
	cfg := baseConfig()
	cfg.BatchSize = 2
	c := e.collector(cfg, func(d *Deps) { d.Now = func() time.Time { return e.clock.Now().Add(time.Hour) } })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rep, err := c.RunOnce(ctx, RunOptions{})
	if err != nil {
		t.Fatalf("cycle: %v (%+v)", err, rep)
	}
	proposed := map[string]int{}
	for _, p := range e.proposals(fsm.CmdIntentsExpire) {
		for _, k := range p.Keys {
			proposed[k]++
		}
	}
	if rep.ExpiredIntents != 0 || len(proposed) != len(keys) {
		t.Fatalf("report %+v, intents proposed %v; want each of %v once, none expired", rep, proposed, keys)
	}
	for k, n := range proposed {
		if n != 1 {
			t.Fatalf("%s proposed %d times in one cycle", k, n)
		}
	}
	for _, k := range keys {
		if b := e.blob(k); b.State != wire.BlobIntent {
			t.Fatalf("%s is %s, want a live intent", k, b.State)
		}
	}
}
