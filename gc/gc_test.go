package gc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

const grace = 10 * time.Minute

func baseConfig() Config {
	return Config{Interval: time.Hour, Grace: grace, BatchSize: 1000, TombstoneTTL: 24 * time.Hour, OrphanGrace: time.Hour}
}

// fill runs a job with retention 1 for nine epochs: it leaves the blobs of
// epoch 9 referenced and ten blobs unreferenced, all at t0.
func fill(e *env) (all, referenced, unreferenced []string) {
	e.t.Helper()
	w := e.startJob("j", 1)
	all = e.run(w, 1, 9)
	referenced, unreferenced = e.split(all)
	if len(referenced) == 0 || len(unreferenced) < 5 {
		e.t.Fatalf("degenerate scenario: %d referenced, %d unreferenced", len(referenced), len(unreferenced))
	}
	return all, referenced, unreferenced
}

func sizeOf(keys []string) uint64 {
	var n uint64
	for _, k := range keys {
		if strings.Contains(k, "/base-") {
			n += baseSize
		} else {
			n += logSize
		}
	}
	return n
}

func TestCollectsOnlyAfterGraceAndNeverReferenced(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 1)
	all := e.run(w, 1, 9)
	// Pin epoch 9 through later epochs: its blobs stay referenced.
	e.do(fsm.CmdEpochPin, fsm.EpochPin{Job: "j", Epoch: 9, Name: "sp"})
	all = append(all, e.run(w, 10, 14)...)
	// A live intent with its object uploaded, not yet committed.
	e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 1, Task: "t0", Keys: []string{"j/t0/inflight"}, LeaseUntil: e.clock.Now().Add(time.Hour)})
	e.put("j/t0/inflight", 7)
	referenced, unreferenced := e.split(all)
	if len(unreferenced) < 5 || len(referenced) < 3 {
		t.Fatalf("degenerate scenario: %d referenced, %d unreferenced", len(referenced), len(unreferenced))
	}
	c := e.collector(baseConfig())

	e.clock.Advance(grace - time.Nanosecond)
	rep := e.runOnce(c, RunOptions{})
	if rep.Marked != 0 || rep.Deleted != 0 || rep.Errors != 0 {
		t.Fatalf("before the grace period: %+v", rep)
	}
	for _, k := range all {
		if !e.has(k) || e.blob(k).State != wire.BlobLive {
			t.Fatalf("blob %s touched before its grace period", k)
		}
	}

	e.clock.Advance(time.Nanosecond)
	rep = e.runOnce(c, RunOptions{})
	if rep.Marked != len(unreferenced) || rep.Deleted != len(unreferenced) || rep.Errors != 0 || rep.Resumed != 0 {
		t.Fatalf("after the grace period: %+v, want %d marked and deleted", rep, len(unreferenced))
	}
	if rep.BytesFreed != sizeOf(unreferenced) {
		t.Fatalf("bytes freed %d, want %d", rep.BytesFreed, sizeOf(unreferenced))
	}
	for _, k := range unreferenced {
		if e.has(k) {
			t.Errorf("unreferenced blob %s still in the store", k)
		}
		if b := e.blob(k); b.State != wire.BlobGone {
			t.Errorf("unreferenced blob %s is %s, want gone", k, b.State)
		}
	}
	for _, k := range referenced {
		if !e.has(k) {
			t.Errorf("referenced blob %s deleted", k)
		}
	}
	e.checkReferencedPresent("j")
	if !e.has("j/t0/inflight") || e.blob("j/t0/inflight").State != wire.BlobIntent {
		t.Fatal("the object of a live intent was collected")
	}
	e.fsck()

	// Much later, with no change, nothing else goes (the intent expired
	// meanwhile and goes, as it should).
	e.clock.Advance(23 * time.Hour)
	rep = e.runOnce(c, RunOptions{})
	if rep.Deleted != 1 || rep.ExpiredIntents != 1 {
		t.Fatalf("a day later: %+v", rep)
	}
	e.checkReferencedPresent("j")
	// Tombstones are purged after their TTL.
	e.clock.Advance(24 * time.Hour)
	rep = e.runOnce(c, RunOptions{})
	if rep.Purged != len(unreferenced)+1 {
		t.Fatalf("purged %d, want %d", rep.Purged, len(unreferenced)+1)
	}
	if known, _ := e.f.Known(unreferenced); known[unreferenced[0]] {
		t.Fatal("purged tombstone still known")
	}
	e.checkReferencedPresent("j")
	e.fsck()
}

// A blob referenced again between the collector's read and its mark is left
// alone: only the keys the mark returns are deleted.
func TestReferencedSinceLookedIsKept(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 1)
	_, unref := e.split(e.run(w, 1, 9))
	victim := unref[0]
	c := e.collector(baseConfig())
	e.clock.Advance(grace)
	e.beforeFirst(fsm.CmdBlobsDeleting, func() {
		// A worker's ack lands first and references the victim again.
		e.epoch(w, 10, false, manifests.Segment{Key: victim, Offset: 0, Length: 10})
	})
	rep := e.runOnce(c, RunOptions{})
	if rep.MarksProposed != len(unref) || rep.Marked != len(unref)-1 || rep.Deleted != len(unref)-1 {
		t.Fatalf("report %+v, want %d proposed, %d marked", rep, len(unref), len(unref)-1)
	}
	if !e.has(victim) {
		t.Fatal("a blob referenced again before its mark was deleted")
	}
	if b := e.blob(victim); b.State != wire.BlobLive || b.Refs == 0 {
		t.Fatalf("victim %+v", b)
	}
	e.checkReferencedPresent("j")
	e.fsck()
}

func TestFailedDeletesStayDeletingAndAreRetried(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e)
	// The healthy calls get the default DeleteTimeout: a short one made the
	// partial failure time out on a loaded machine (under -race) before the
	// store had deleted the good keys. Only the hang needs it short.
	c := e.collector(baseConfig())
	short := baseConfig()
	short.DeleteTimeout = 20 * time.Millisecond
	hung := e.collector(short)
	e.clock.Advance(grace)
	bad := unreferenced[:2]
	e.store.set(func(s *testStore) {
		for _, k := range bad {
			s.failKeys[k] = errors.New("SlowDown")
		}
	})
	rep := e.runOnce(c, RunOptions{})
	if rep.Marked != len(unreferenced) || rep.Deleted != len(unreferenced)-2 || rep.DeleteErrors != 2 || rep.Errors == 0 || !strings.Contains(rep.Error, "SlowDown") {
		t.Fatalf("partial failure: %+v", rep)
	}
	checkDeleting := func(what string) {
		t.Helper()
		for _, k := range bad {
			if !e.has(k) {
				t.Fatalf("%s: %s not in the store", what, k)
			}
			if b := e.blob(k); b.State != wire.BlobDeleting {
				t.Fatalf("%s: %s is %s, want deleting", what, k, b.State)
			}
		}
	}
	checkDeleting("partial failure")

	// The store fails every call: nothing is recorded gone.
	e.store.set(func(s *testStore) { s.failKeys = map[string]error{}; s.failAll = errors.New("503 Service Unavailable") })
	rep = e.runOnce(c, RunOptions{})
	if rep.Deleted != 0 || rep.DeleteErrors != 2 {
		t.Fatalf("store down: %+v", rep)
	}
	checkDeleting("store down")

	// The store hangs: each call gives up after DeleteTimeout.
	e.store.set(func(s *testStore) { s.failAll = nil; s.block = true })
	rep = e.runOnce(hung, RunOptions{})
	if rep.Deleted != 0 || rep.DeleteErrors != 2 || !strings.Contains(rep.Error, "deadline") {
		t.Fatalf("store hangs: %+v", rep)
	}
	checkDeleting("store hangs")

	// Healthy again: the next cycle finishes them.
	e.store.set(func(s *testStore) { s.block = false })
	rep = e.runOnce(c, RunOptions{})
	if rep.Deleted != 2 || rep.Resumed != 2 || rep.Errors != 0 {
		t.Fatalf("recovered: %+v", rep)
	}
	for _, k := range bad {
		if e.has(k) || e.blob(k).State != wire.BlobGone {
			t.Fatalf("%s not collected after recovery", k)
		}
	}
	e.checkReferencedPresent("j")
	e.fsck()
}

// A store down for a whole call stops the cycle from marking more: the
// deleting set does not grow while the store cannot delete.
func TestStoreDownStopsMarking(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e)
	cfg := baseConfig()
	cfg.BatchSize = 2
	c := e.collector(cfg)
	e.clock.Advance(grace)
	e.store.set(func(s *testStore) { s.failAll = errors.New("connection refused") })
	rep := e.runOnce(c, RunOptions{})
	if rep.Marked != 2 || rep.Deleted != 0 {
		t.Fatalf("store down: %+v, want one batch of 2 marked and none deleted", rep)
	}
	// The next cycle tries the deleting ones first, and marks nothing new.
	rep = e.runOnce(c, RunOptions{})
	if rep.Marked != 0 || rep.DeleteErrors != 2 {
		t.Fatalf("store still down: %+v", rep)
	}
	e.store.set(func(s *testStore) { s.failAll = nil })
	rep = e.runOnce(c, RunOptions{})
	if rep.Deleted != len(unreferenced) || rep.Resumed != 2 {
		t.Fatalf("store back: %+v", rep)
	}
}

// A leader that loses leadership between its mark and its delete leaves the
// batch deleting; a new leader's Run finishes it first.
func TestNewLeaderFinishesDeleting(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e)
	e.clock.Advance(grace)
	old := e.collector(baseConfig())
	e.store.set(func(s *testStore) { s.block = true })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := old.RunOnce(ctx, RunOptions{})
		done <- err
	}()
	<-e.store.entered // the old leader is deleting
	cancel()          // and loses leadership
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("old leader: %v, want context.Canceled", err)
	}
	for _, k := range unreferenced {
		if !e.has(k) || e.blob(k).State != wire.BlobDeleting {
			t.Fatalf("%s: left %s (in store: %v), want deleting and present", k, e.blob(k).State, e.has(k))
		}
	}

	e.store.set(func(s *testStore) { s.block = false })
	leader := e.collector(baseConfig())
	reports := make(chan *Report, 10)
	leader.hooks.afterCycle = func(r *Report, err error) {
		if err != nil {
			t.Errorf("new leader: %v", err)
		}
		reports <- r
	}
	ctx, cancel = context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { leader.Run(ctx); close(stopped) }()
	rep := <-reports
	cancel()
	<-stopped
	if !rep.ResumeOnly || rep.Resumed != len(unreferenced) || rep.Deleted != len(unreferenced) || rep.Marked != 0 {
		t.Fatalf("new leader's first pass: %+v", rep)
	}
	for _, k := range unreferenced {
		if e.has(k) || e.blob(k).State != wire.BlobGone {
			t.Fatalf("%s not finished by the new leader", k)
		}
	}
	e.checkReferencedPresent("j")
	e.fsck()
}

func TestExpiredIntentIsCollected(t *testing.T) {
	e := newEnv(t)
	e.startJob("j", 1)
	const key = "j/t0/lost-upload"
	e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 1, Task: "t0", Keys: []string{key}, LeaseUntil: t0.Add(time.Hour)})
	e.put(key, 64)
	c := e.collector(baseConfig())

	e.clock.Advance(30 * time.Minute)
	if rep := e.runOnce(c, RunOptions{}); rep.ExpiredIntents != 0 || rep.Deleted != 0 {
		t.Fatalf("lease running: %+v", rep)
	}
	e.clock.Advance(31 * time.Minute) // lease over, grace not
	if rep := e.runOnce(c, RunOptions{}); rep.ExpiredIntents != 1 || rep.Deleted != 0 {
		t.Fatalf("lease over: %+v", rep)
	}
	if b := e.blob(key); b.State != wire.BlobExpired || !e.has(key) {
		t.Fatalf("after expiry: %s, in store %v", b.State, e.has(key))
	}
	e.clock.Advance(grace)
	if rep := e.runOnce(c, RunOptions{}); rep.Deleted != 1 || rep.Marked != 1 {
		t.Fatalf("grace over: %+v", rep)
	}
	if b := e.blob(key); b.State != wire.BlobGone || e.has(key) {
		t.Fatalf("after collection: %s, in store %v", b.State, e.has(key))
	}
}

// TestLateUploadOfAbandonedIntent: an upload whose worker gave up (the
// S3 PUT lands after the client saw it fail, as the s3-late-put fault
// makes it) for an intent nothing commits. Landed within the lease, the
// object goes with the expired intent; landed after the intent was
// collected, it waits for its tombstone to be purged and the orphan sweep
// then deletes it. Nothing is left either way.
func TestLateUploadOfAbandonedIntent(t *testing.T) {
	e := newEnv(t)
	e.startJob("j", 1)
	const within, after = "j/t0/late-within-lease", "j/t0/late-after-collection"
	e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 1, Task: "t0", Keys: []string{within, after}, LeaseUntil: t0.Add(time.Hour)})
	c := e.collector(baseConfig())

	e.clock.Advance(10 * time.Minute)
	e.put(within, 64) // the late PUT of a worker that abandoned the slot
	e.clock.Advance(51 * time.Minute)
	if rep := e.runOnce(c, RunOptions{}); rep.ExpiredIntents != 2 {
		t.Fatalf("lease over: %+v", rep)
	}
	e.clock.Advance(grace)
	if rep := e.runOnce(c, RunOptions{}); rep.Deleted != 2 {
		t.Fatalf("grace over: %+v", rep)
	}
	if e.has(within) || e.blob(within).State != wire.BlobGone || e.blob(after).State != wire.BlobGone {
		t.Fatalf("after collection: %s in store %v, %s", e.blob(within).State, e.has(within), e.blob(after).State)
	}

	// The other PUT lands only now: the store still knows the key (a
	// tombstone), so the sweep leaves it until the tombstone is purged.
	e.put(after, 64)
	e.age(after, e.clock.Now().Add(-2*time.Hour))
	if rep := e.runOnce(c, RunOptions{Orphans: true}); rep.OrphansDeleted != 0 || !e.has(after) {
		t.Fatalf("swept while its tombstone lives: %+v", rep)
	}
	e.clock.Advance(baseConfig().TombstoneTTL + time.Minute)
	if rep := e.runOnce(c, RunOptions{}); rep.Purged != 2 {
		t.Fatalf("tombstones: %+v", rep)
	}
	if rep := e.runOnce(c, RunOptions{Orphans: true}); rep.OrphansDeleted != 1 || e.has(after) {
		t.Fatalf("late object after the purge: %+v, in store %v", rep, e.has(after))
	}
	if got := e.listStore(); len(got) != 0 {
		t.Fatalf("left in the store: %v", got)
	}
	e.fsck()
}

func TestOrphanSweep(t *testing.T) {
	e := newEnv(t)
	_, referenced, _ := fill(e)
	now := e.clock.Now()
	old, young := now.Add(-2*time.Hour), now.Add(-time.Minute)
	orphans := []string{"j/t0/orphan-old", "stray/deep/orphan-old"}
	for _, k := range orphans {
		e.put(k, 10)
		e.age(k, old)
	}
	e.put("j/t0/orphan-young", 10)
	e.age("j/t0/orphan-young", young)
	// Known keys are never swept, however old.
	for _, k := range referenced {
		e.age(k, old.Add(-24*time.Hour))
	}
	c := e.collector(baseConfig()) // periodic sweep disabled

	if rep := e.runOnce(c, RunOptions{}); rep.OrphanSweep || rep.OrphansDeleted != 0 {
		t.Fatalf("sweep disabled: %+v", rep)
	}
	rep := e.runOnce(c, RunOptions{Orphans: true})
	if !rep.OrphanSweep || rep.OrphansDeleted != 2 || rep.Errors != 0 || rep.BytesFreed != 20 {
		t.Fatalf("sweep: %+v", rep)
	}
	for _, k := range orphans {
		if e.has(k) {
			t.Errorf("old orphan %s not swept", k)
		}
	}
	if !e.has("j/t0/orphan-young") {
		t.Error("young orphan swept")
	}
	e.checkReferencedPresent("j")
	for _, k := range referenced {
		if !e.has(k) {
			t.Errorf("known blob %s swept", k)
		}
	}
	// Every delete of the sweep came right after a leadership check.
	log := e.events.all()
	for i, ev := range log {
		if strings.HasPrefix(ev, "delete ") && strings.Contains(ev, "orphan") {
			if i == 0 || log[i-1] != "verify" {
				t.Fatalf("orphan delete %q not preceded by a leadership check: %v", ev, log)
			}
		}
	}

	// A member that is no longer the leader sweeps nothing.
	e.age("j/t0/orphan-young", old)
	e.setVerifyErr(errors.New("not the leader"))
	if _, err := c.RunOnce(context.Background(), RunOptions{Orphans: true}); err == nil {
		t.Fatal("a cycle ran without leadership")
	}
	if !e.has("j/t0/orphan-young") {
		t.Fatal("swept without leadership")
	}
	e.setVerifyErr(nil)
	if rep := e.runOnce(c, RunOptions{Orphans: true}); rep.OrphansDeleted != 1 {
		t.Fatalf("aged orphan: %+v", rep)
	}
}

func TestOrphanSweepSchedule(t *testing.T) {
	e := newEnv(t)
	cfg := baseConfig()
	cfg.OrphanEvery = time.Hour
	c := e.collector(cfg)
	if rep := e.runOnce(c, RunOptions{}); !rep.OrphanSweep {
		t.Fatal("first cycle did not sweep")
	}
	e.clock.Advance(59 * time.Minute)
	if rep := e.runOnce(c, RunOptions{}); rep.OrphanSweep {
		t.Fatal("swept before OrphanEvery")
	}
	e.clock.Advance(time.Minute)
	if rep := e.runOnce(c, RunOptions{}); !rep.OrphanSweep {
		t.Fatal("no sweep after OrphanEvery")
	}
	if st := c.Status(); st.LastOrphanSweep == nil || !st.LastOrphanSweep.Equal(e.clock.Now()) {
		t.Fatalf("last sweep %v", st.LastOrphanSweep)
	}

	// A new leader keeps the cluster's schedule (the replicated slot
	// cut-off of the last sweep) instead of sweeping as soon as it leads.
	e.clock.Advance(30 * time.Minute)
	next := e.collector(cfg)
	if rep := e.runOnce(next, RunOptions{}); rep.OrphanSweep {
		t.Fatal("a new leader swept 30 minutes after the last sweep")
	}
	e.clock.Advance(30 * time.Minute)
	if rep := e.runOnce(next, RunOptions{}); !rep.OrphanSweep {
		t.Fatal("a new leader did not sweep OrphanEvery after the last sweep")
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e)
	e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 1, Task: "t0", Keys: []string{"j/t0/lost"}, LeaseUntil: t0.Add(time.Minute)})
	e.put("j/t0/lost", 5)
	e.put("orphan", 3)
	e.age("orphan", t0)
	e.clock.Advance(2 * time.Hour)
	c := e.collector(baseConfig())

	hash, objects, proposed := e.hash(), e.listStore(), e.proposedCount()
	rep := e.runOnce(c, RunOptions{DryRun: true, Orphans: true})
	if e.hash() != hash || !slices.Equal(e.listStore(), objects) || e.proposedCount() != proposed || len(e.store.deleteCalls()) != 0 {
		t.Fatal("a dry run changed something")
	}
	want := len(unreferenced) + 1 // and the expired intent
	if !rep.DryRun || rep.ExpiredIntents != 1 || rep.Marked != want || rep.Deleted != want || rep.OrphansDeleted != 1 ||
		len(rep.Candidates) != want || !slices.Equal(rep.Orphans, []string{"orphan"}) || rep.BytesFreed != sizeOf(unreferenced) {
		t.Fatalf("dry run: %+v", rep)
	}
	if st := c.Status(); st.LastRun != nil || st.Totals.Cycles != 0 {
		t.Fatalf("a dry run was recorded as a cycle: %+v", st)
	}
	real := e.runOnce(c, RunOptions{Orphans: true})
	if real.Deleted != rep.Deleted || real.OrphansDeleted != rep.OrphansDeleted || real.ExpiredIntents != rep.ExpiredIntents {
		t.Fatalf("real run %+v differs from its dry run %+v", real, rep)
	}
	got := slices.Sorted(slices.Values(rep.Candidates))
	wantKeys := slices.Sorted(slices.Values(append(slices.Clone(unreferenced), "j/t0/lost")))
	if !slices.Equal(got, wantKeys) {
		t.Fatalf("dry-run candidates %v, want %v", got, wantKeys)
	}
}

func TestBatchSizeRespected(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 1)
	all := e.run(w, 1, 15)
	_, unreferenced := e.split(all)
	for i := range 5 {
		k := fmt.Sprintf("orphans/o%d", i)
		e.put(k, 1)
		e.age(k, t0.Add(-2*time.Hour))
	}
	cfg := baseConfig()
	cfg.BatchSize = 3
	c := e.collector(cfg)
	e.clock.Advance(grace)
	rep := e.runOnce(c, RunOptions{Orphans: true})
	if rep.Deleted != len(unreferenced) || rep.OrphansDeleted != 5 || rep.Errors != 0 {
		t.Fatalf("report %+v, want %d deleted", rep, len(unreferenced))
	}
	calls := e.store.deleteCalls()
	if len(calls) < (len(unreferenced)+5)/3 {
		t.Fatalf("%d delete calls for %d keys", len(calls), len(unreferenced)+5)
	}
	for _, call := range calls {
		if len(call) == 0 || len(call) > 3 {
			t.Fatalf("a Delete call carried %d keys, batch size 3", len(call))
		}
	}
	for _, typ := range []fsm.CommandType{fsm.CmdBlobsDeleting, fsm.CmdBlobsGone} {
		props := e.proposals(typ)
		if len(props) == 0 {
			t.Fatalf("no %s proposed", typ)
		}
		for _, p := range props {
			if len(p.Keys) > 3 {
				t.Fatalf("%s carried %d keys, batch size 3", typ, len(p.Keys))
			}
		}
	}
	e.checkReferencedPresent("j")
	e.fsck()
}

func TestRateLimitSpreadsDeletes(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e) // 10 blobs
	cfg := baseConfig()
	cfg.Rate = 4
	c := e.collector(cfg)
	e.clock.Advance(grace)
	start := time.Now()
	rep := e.runOnce(c, RunOptions{})
	if rep.Deleted != len(unreferenced) {
		t.Fatalf("report %+v", rep)
	}
	for _, call := range e.store.deleteCalls() {
		if len(call) > 4 {
			t.Fatalf("a Delete call carried %d keys at 4 per second", len(call))
		}
	}
	// 4 at once, then 6 more at 4 per second.
	if d := time.Since(start); d < time.Second {
		t.Fatalf("%d deletes at 4/s took %v", len(unreferenced), d)
	}
	if n := len(e.proposals(fsm.CmdBlobsDeleting)); n != 1 {
		t.Fatalf("%d marks, want 1 (the rate shapes deletes, not marks)", n)
	}
}

func TestVerifyReportsMissing(t *testing.T) {
	e := newEnv(t)
	fill(e)
	c := e.collector(baseConfig())
	rep, err := c.Verify(context.Background(), "j")
	if err != nil || !rep.OK() || rep.Blobs == 0 || rep.References < rep.Blobs {
		t.Fatalf("healthy: %+v %v", rep, err)
	}
	refs, _, err := e.f.ReferencedBlobs("j")
	if err != nil {
		t.Fatal(err)
	}
	lost := refs[0].Key
	if _, err := e.local.Delete(context.Background(), []string{lost}); err != nil {
		t.Fatal(err)
	}
	rep, err = c.Verify(context.Background(), "j")
	if err != nil {
		t.Fatal(err)
	}
	var want []MissingBlob
	for _, r := range refs {
		if r.Key == lost {
			want = append(want, MissingBlob{Job: "j", Epoch: r.Epoch, Task: r.Task, Key: r.Key, Pinned: r.Pinned})
		}
	}
	if len(want) == 0 || !slices.Equal(rep.Missing, want) || len(rep.Errors) != 0 {
		t.Fatalf("missing %+v, want %+v", rep.Missing, want)
	}
	if rep.Missing[0].Task != "t0" || rep.Missing[0].Epoch != 9 {
		t.Fatalf("missing %+v", rep.Missing[0])
	}
	if _, err := c.Verify(context.Background(), "nope"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}

func TestRunStopsPromptlyOnCancel(t *testing.T) {
	e := newEnv(t)
	fill(e)
	e.clock.Advance(grace)
	cfg := baseConfig()
	cfg.Interval = time.Millisecond
	cfg.DeleteTimeout = time.Hour
	c := e.collector(cfg)
	e.store.set(func(s *testStore) { s.block = true })
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { c.Run(ctx); close(stopped) }()
	<-e.store.entered // inside a Delete that would hang for an hour
	if !c.Status().Running || !c.Status().Leading {
		t.Fatal("status does not show the running cycle")
	}
	cancel()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if st := c.Status(); st.Leading || st.Running {
		t.Fatalf("status after stop: %+v", st)
	}
	// Idle: Run waits on its ticker and returns as promptly.
	e.store.set(func(s *testStore) { s.block = false })
	idle := e.collector(baseConfig())
	cycles := make(chan struct{}, 1)
	idle.hooks.afterCycle = func(*Report, error) { cycles <- struct{}{} }
	ctx, cancel = context.WithCancel(context.Background())
	stopped = make(chan struct{})
	go func() { idle.Run(ctx); close(stopped) }()
	<-cycles
	cancel()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("idle Run did not return after its context ended")
	}
}

func TestRunCyclesAndOneCycleAtATime(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e)
	e.clock.Advance(grace)
	cfg := baseConfig()
	cfg.Interval = time.Millisecond
	c := e.collector(cfg)
	gate := make(chan struct{})
	e.store.set(func(s *testStore) { s.gate = gate })
	reports := make(chan *Report, 100)
	c.hooks.afterCycle = func(r *Report, err error) {
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("cycle: %v", err)
		}
		select {
		case reports <- r:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { c.Run(ctx); close(stopped) }()
	<-reports // the resume pass: nothing deleting
	<-e.store.entered
	// A cycle is inside Delete: a RunOnce waits for it, here until its
	// deadline.
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if _, err := c.RunOnce(short, RunOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RunOnce during a cycle: %v, want to wait for it", err)
	}
	cancelShort()
	close(gate)
	for rep := <-reports; rep.Deleted != len(unreferenced); rep = <-reports {
	}
	cancel()
	<-stopped
	e.store.mu.Lock()
	maxInFlight := e.store.maxInFlight
	e.store.mu.Unlock()
	if maxInFlight != 1 {
		t.Fatalf("%d Delete calls at once", maxInFlight)
	}
	st := c.Status()
	if st.Totals.Deleted != int64(len(unreferenced)) || st.Totals.Cycles < 2 || st.LastRun == nil {
		t.Fatalf("status %+v", st)
	}
}

func TestStatusAndMetrics(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e)
	reg := prometheus.NewRegistry()
	c := e.collector(baseConfig(), func(d *Deps) { d.Registerer = reg })
	if _, err := New(baseConfig(), Deps{FSM: e.f, Store: e.store, Propose: e.propose, VerifyLeader: e.verifyLeader, Now: e.clock.Now, Registerer: reg}); err == nil {
		t.Fatal("a second collector registered the same metrics")
	}
	st := c.Status()
	if !st.Enabled || st.LastRun != nil || st.PendingCandidates != len(unreferenced) || st.Deleting != 0 || st.Store != e.local.String() {
		t.Fatalf("status before: %+v", st)
	}
	e.clock.Advance(grace)
	rep := e.runOnce(c, RunOptions{})
	st = c.Status()
	if st.LastRun == nil || st.LastRun.Deleted != rep.Deleted || st.Totals.Deleted != int64(len(unreferenced)) ||
		st.Totals.BytesFreed != sizeOf(unreferenced) || st.PendingCandidates != 0 || st.Totals.Cycles != 1 {
		t.Fatalf("status after: %+v", st)
	}
	if len(st.RecentRuns) != 1 || st.RecentRuns[0].Deleted != rep.Deleted || st.RecentRuns[0].BytesFreed != rep.BytesFreed ||
		st.RecentRuns[0].Outcome != "ok" || st.RecentRuns[0].Candidates != 0 || !st.RecentRuns[0].Finished.Equal(rep.Finished) {
		t.Fatalf("recent runs: %+v", st.RecentRuns)
	}
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"enabled", "running", "last_run", "recent_runs", "totals", "pending_candidates", "deleting", "store"} {
		if _, ok := m[k]; !ok {
			t.Errorf("status JSON lacks %q: %s", k, raw)
		}
	}
	last := m["last_run"].(map[string]any)
	for _, k := range []string{"started", "finished", "duration", "marked", "deleted", "bytes_freed", "orphans_deleted", "expired_intents", "purged", "errors"} {
		if _, ok := last[k]; !ok {
			t.Errorf("last_run JSON lacks %q: %s", k, raw)
		}
	}
	if got := counterValue(t, c.m.deleted); got != float64(len(unreferenced)) {
		t.Fatalf("deleted objects metric %v", got)
	}
	if got := counterValue(t, c.m.bytesFreed); got != float64(sizeOf(unreferenced)) {
		t.Fatalf("bytes freed metric %v", got)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	sort.Strings(names)
	for _, want := range []string{"metastore_gc_cycles_total", "metastore_gc_deleted_objects_total", "metastore_gc_bytes_freed_total",
		"metastore_gc_orphans_deleted_total", "metastore_gc_delete_errors_total", "metastore_gc_marks_proposed_total",
		"metastore_gc_cycle_duration_seconds", "metastore_gc_candidates", "metastore_gc_deleting"} {
		if !slices.Contains(names, want) {
			t.Errorf("metric %s not registered (have %v)", want, names)
		}
	}
	for _, f := range families {
		if f.GetName() == "metastore_gc_cycles_total" {
			if len(f.Metric) != 1 || f.Metric[0].GetCounter().GetValue() != 1 {
				t.Fatalf("cycles %v", f.Metric)
			}
		}
	}
	c.Close()
	if _, err := New(baseConfig(), Deps{FSM: e.f, Store: e.store, Propose: e.propose, VerifyLeader: e.verifyLeader, Now: e.clock.Now, Registerer: reg}); err != nil {
		t.Fatalf("register after Close: %v", err)
	}
}

// TestRecentRunsBounded: Status keeps the latest RecentRuns cycles, oldest
// first; a dry run is not one of them.
func TestRecentRunsBounded(t *testing.T) {
	e := newEnv(t)
	c := e.collector(baseConfig())
	e.runOnce(c, RunOptions{DryRun: true})
	if st := c.Status(); len(st.RecentRuns) != 0 {
		t.Fatalf("a dry run was recorded: %+v", st.RecentRuns)
	}
	for i := 0; i < RecentRuns+5; i++ {
		e.clock.Advance(time.Second)
		e.runOnce(c, RunOptions{})
	}
	st := c.Status()
	if len(st.RecentRuns) != RecentRuns || !st.RecentRuns[len(st.RecentRuns)-1].Finished.Equal(st.LastRun.Finished) {
		t.Fatalf("%d recent runs, last %+v, last run %+v", len(st.RecentRuns), st.RecentRuns[len(st.RecentRuns)-1], st.LastRun)
	}
	for i := 1; i < len(st.RecentRuns); i++ {
		if !st.RecentRuns[i].Finished.After(st.RecentRuns[i-1].Finished) {
			t.Fatalf("recent runs out of order at %d: %+v", i, st.RecentRuns)
		}
	}
}

func TestConfig(t *testing.T) {
	e := newEnv(t)
	deps := Deps{FSM: e.f, Store: e.store, Propose: e.propose, VerifyLeader: e.verifyLeader, Now: e.clock.Now}
	c, err := New(Config{}, deps)
	if err != nil {
		t.Fatal(err)
	}
	got := c.Config()
	want := DefaultConfig()
	want.OrphanEvery = 0 // zero disables the sweep
	if got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	for _, bad := range []Config{{BatchSize: MaxBatchSize + 1}, {BatchSize: -1}, {Grace: -1}, {Rate: -1}, {Prefix: "no-slash"}, {Prefix: "../x/"}} {
		if _, err := New(bad, deps); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
	for name, d := range map[string]Deps{
		"VerifyLeader": {FSM: e.f, Store: e.store, Propose: e.propose, Now: e.clock.Now},
		"Propose":      {FSM: e.f, Store: e.store, VerifyLeader: e.verifyLeader, Now: e.clock.Now},
		"Now":          {FSM: e.f, Store: e.store, Propose: e.propose, VerifyLeader: e.verifyLeader},
	} {
		if _, err := New(Config{}, d); err == nil {
			t.Errorf("collector without %s accepted", name)
		}
	}
	if _, err := New(Config{Prefix: "jobs/"}, deps); err != nil {
		t.Errorf("prefix jobs/: %v", err)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestObserveThenVerifyReportsChanged: the observer records every new blob
// once, and Verify reports a referenced blob whose object no longer has the
// observed size (rewritten behind the store's back).
func TestObserveThenVerifyReportsChanged(t *testing.T) {
	e := newEnv(t)
	fill(e)
	c := e.collector(baseConfig())
	pending, err := e.f.Unobserved(wire.MaxIntents)
	if err != nil || len(pending) == 0 {
		t.Fatalf("unobserved after the acks: %v %v", pending, err)
	}
	rep, err := c.Observe(context.Background())
	if err != nil || rep.Observed != len(pending) || rep.Flagged != 0 || rep.Errors != 0 {
		t.Fatalf("observe: %+v %v (%d new blobs)", rep, err, len(pending))
	}
	if again, err := c.Observe(context.Background()); err != nil || again.Observed != 0 {
		t.Fatalf("a second pass: %+v %v", again, err)
	}
	refs, _, err := e.f.ReferencedBlobs("j")
	if err != nil {
		t.Fatal(err)
	}
	key := refs[0].Key
	b, _, err := e.f.Blob(key)
	if err != nil || b.Observed == nil || b.Observed.Size != b.Size {
		t.Fatalf("observed record %+v %v", b, err)
	}
	forged := bytes.Repeat([]byte("x"), int(b.Size)+1)
	if err := e.local.Put(context.Background(), key, bytes.NewReader(forged), int64(len(forged))); err != nil {
		t.Fatal(err)
	}
	v, err := c.Verify(context.Background(), "j")
	if err != nil {
		t.Fatal(err)
	}
	if v.OK() || len(v.Changed) == 0 || len(v.Missing) != 0 {
		t.Fatalf("verify after the rewrite: %+v", v)
	}
	for _, ch := range v.Changed {
		if ch.Key != key || ch.DeclaredSize != b.Size || ch.ObservedSize == nil || *ch.ObservedSize != b.Size || ch.Size != int64(len(forged)) {
			t.Fatalf("changed %+v", ch)
		}
	}
}
