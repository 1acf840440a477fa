package gc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// brokenListStore is the test store whose listing fails after `after`
// objects, as a store that drops the connection mid-listing.
type brokenListStore struct {
	*testStore
	after int
}

func (s *brokenListStore) List(ctx context.Context, prefix string, fn func(blobstore.Info) error) error {
	n := 0
	err := s.testStore.List(ctx, prefix, func(info blobstore.Info) error {
		if n == s.after {
			return errors.New("connection reset by peer")
		}
		n++
		return fn(info)
	})
	return err
}

// TestOrphanAgeBoundary: the sweep deletes an unknown object only when it
// is older than OrphanGrace; one exactly OrphanGrace old may still be an
// upload whose intent the sweep cannot see yet.
func TestOrphanAgeBoundary(t *testing.T) {
	e := newEnv(t)
	cfg := baseConfig()
	e.put("orphans/at-grace", 1)
	e.age("orphans/at-grace", t0.Add(-cfg.OrphanGrace))
	e.put("orphans/past-grace", 1)
	e.age("orphans/past-grace", t0.Add(-cfg.OrphanGrace-time.Nanosecond))
	c := e.collector(cfg)
	rep := e.runOnce(c, RunOptions{Orphans: true})
	if rep.OrphansDeleted != 1 || e.has("orphans/past-grace") {
		t.Fatalf("sweep %+v: the orphan older than the grace in the store: %v", rep, e.has("orphans/past-grace"))
	}
	if !e.has("orphans/at-grace") {
		t.Fatal("an object exactly OrphanGrace old was swept")
	}
}

// TestSignedSlotAtTheCutoffIsSwept: the state machine refuses the ack of a
// signed slot whose lease ended at or before the cut-off, so the sweep
// deletes its upload once the lease is at the cut-off, not a grace later.
func TestSignedSlotAtTheCutoffIsSwept(t *testing.T) {
	e := newEnv(t)
	e.startJob("j", 1)
	slotKey := bytes.Repeat([]byte{5}, fsm.SlotKeyLen)
	e.do(fsm.CmdSlotKeyInit, fsm.SlotKeyInit{Key: slotKey})
	cfg := baseConfig()
	e.clock.Advance(3 * time.Hour)
	lease := e.clock.Now().Add(-cfg.OrphanGrace) // the cut-off this sweep proposes
	keys := fsm.NewSlotSigner(slotKey).Keys("j", "t0", 1, lease, 9, 2)
	later := fsm.NewSlotSigner(slotKey).Keys("j", "t0", 1, lease.Add(time.Nanosecond), 9, 1)[0]
	for _, k := range append(slices.Clone(keys), later) {
		e.put(k, logSize)
		e.age(k, t0)
	}
	c := e.collector(cfg)
	rep := e.runOnce(c, RunOptions{Orphans: true})
	if rep.OrphansDeleted != 2 || e.has(keys[0]) || e.has(keys[1]) {
		t.Fatalf("sweep %+v: uploads of slots whose lease is at the cut-off kept: %v %v", rep, e.has(keys[0]), e.has(keys[1]))
	}
	if !e.has(later) {
		t.Fatal("the upload of a slot whose lease ends after the cut-off was swept")
	}
	if cut, err := e.f.SlotCutoff(); err != nil || !cut.Equal(lease) {
		t.Fatalf("cut-off %v %v, want %v", cut, err, lease)
	}
}

// TestOrphanSweepKeepsWhatWasListedBeforeAFailure: a listing that fails
// midway is reported, and the orphans listed before the failure are
// still deleted.
func TestOrphanSweepKeepsWhatWasListedBeforeAFailure(t *testing.T) {
	e := newEnv(t)
	var orphans []string
	for i := range 3 {
		k := fmt.Sprintf("orphans/o%d", i)
		orphans = append(orphans, k)
		e.put(k, 2)
		e.age(k, t0.Add(-2*time.Hour))
	}
	c := e.collectorWith(baseConfig(), &brokenListStore{testStore: e.store, after: 2})
	rep, err := c.RunOnce(context.Background(), RunOptions{Orphans: true})
	if err != nil {
		t.Fatalf("a listing failure ended the cycle: %v", err)
	}
	if rep.OrphansDeleted != 2 || rep.OrphansListed != 2 || rep.Errors != 1 || !strings.Contains(rep.Error, "connection reset") {
		t.Fatalf("report %+v, want the 2 orphans listed deleted and the failure reported", rep)
	}
	if e.has(orphans[0]) || e.has(orphans[1]) || !e.has(orphans[2]) {
		t.Fatalf("in the store after the sweep: %v", e.listStore())
	}
}

// TestOrphanDeletesAreRateLimited: the sweep's deletes are paced by Rate
// like the collector's others.
func TestOrphanDeletesAreRateLimited(t *testing.T) {
	e := newEnv(t)
	for i := range 5 {
		k := fmt.Sprintf("orphans/o%d", i)
		e.put(k, 1)
		e.age(k, t0.Add(-2*time.Hour))
	}
	cfg := baseConfig()
	cfg.Rate = 2
	c := e.collector(cfg)
	start := time.Now()
	rep := e.runOnce(c, RunOptions{Orphans: true})
	if rep.OrphansDeleted != 5 {
		t.Fatalf("report %+v", rep)
	}
	// 2 at once, 2 a second later, the last half a second after.
	if d := time.Since(start); d < time.Second {
		t.Fatalf("5 orphan deletes at 2 per second took %v", d)
	}
	for _, call := range e.store.deleteCalls() {
		if len(call) > 2 {
			t.Fatalf("a Delete call carried %d keys at 2 per second", len(call))
		}
	}
}

// TestDryRunReportsDeletingAndSchedule: a dry run counts the blobs left
// deleting (resumed, deleted, their bytes and keys), follows the sweep's
// schedule, needs leadership, and does not count as a sweep for the
// schedule or the status.
func TestDryRunReportsDeletingAndSchedule(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e)
	deleting := unreferenced[:2]
	if marked := e.do(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: deleting}).([]string); len(marked) != 2 {
		t.Fatalf("marked %v", marked)
	}
	e.put("orphans/o", 3)
	e.age("orphans/o", t0.Add(-2*time.Hour))
	cfg := baseConfig()
	cfg.OrphanEvery = time.Hour
	c := e.collector(cfg)

	// Without leadership a dry run reports nothing (here no sweep is due
	// whose own check would catch it).
	e.setVerifyErr(errors.New("not the leader"))
	if rep, err := e.collector(baseConfig()).RunOnce(context.Background(), RunOptions{DryRun: true}); err == nil || rep.Deleted != 0 {
		t.Fatalf("a dry run without leadership: %+v %v", rep, err)
	}
	e.setVerifyErr(nil)

	// Within the grace: only the deleting blobs would go.
	rep := e.runOnce(c, RunOptions{DryRun: true})
	if rep.Resumed != 2 || rep.Deleted != 2 || rep.BytesFreed != sizeOf(deleting) ||
		!slices.Equal(slices.Sorted(slices.Values(rep.Candidates)), slices.Sorted(slices.Values(deleting))) {
		t.Fatalf("dry run %+v, want the 2 deleting blobs", rep)
	}
	if !rep.OrphanSweep || rep.OrphansDeleted != 1 {
		t.Fatalf("dry run with the sweep due: %+v", rep)
	}
	if st := c.Status(); st.LastOrphanSweep != nil {
		t.Fatalf("a dry run recorded as the last sweep: %v", st.LastOrphanSweep)
	}
	// The dry run did not move the schedule: the real cycle sweeps.
	if rep := e.runOnce(c, RunOptions{}); !rep.OrphanSweep || rep.OrphansDeleted != 1 || rep.Resumed != 2 {
		t.Fatalf("the cycle after a dry run: %+v", rep)
	}
	// Now the sweep is not due, and a dry run says so.
	if rep := e.runOnce(c, RunOptions{DryRun: true}); rep.OrphanSweep {
		t.Fatalf("a dry run swept before the sweep was due: %+v", rep)
	}
}

// TestSweepHonoursTheReplicatedCutoff: when the state machine's slot
// cut-off is ahead of the one this sweep proposes (set by an earlier
// leader whose clock was ahead), no ack can commit a slot whose lease is
// behind it, and the sweep deletes its upload.
func TestSweepHonoursTheReplicatedCutoff(t *testing.T) {
	e := newEnv(t)
	e.startJob("j", 1)
	slotKey := bytes.Repeat([]byte{6}, fsm.SlotKeyLen)
	e.do(fsm.CmdSlotKeyInit, fsm.SlotKeyInit{Key: slotKey})
	cfg := baseConfig()
	e.clock.Advance(3 * time.Hour)
	now := e.clock.Now()
	e.do(fsm.CmdSlotCutoff, fsm.SlotCutoff{Until: now.Add(30 * time.Minute)})
	// The lease ended after this sweep's own cut-off (now - OrphanGrace)
	// but before the replicated one.
	k := fsm.NewSlotSigner(slotKey).Keys("j", "t0", 1, now, 9, 1)[0]
	e.put(k, logSize)
	e.age(k, t0)
	if b := e.blob(k); b.State != wire.BlobExpired {
		t.Fatalf("scenario: the slot reads %s, want expired behind the cut-off", b.State)
	}
	c := e.collector(cfg)
	if rep := e.runOnce(c, RunOptions{Orphans: true}); rep.OrphansDeleted != 1 || e.has(k) {
		t.Fatalf("sweep %+v: the upload of a slot behind the replicated cut-off kept: %v", rep, e.has(k))
	}
}

// TestDryRunSweepReportsOnlyUnknownObjects: a dry run's sweep, which
// deletes nothing and so never re-checks, reports as orphans only the
// objects the state machine does not know, however old the others are.
func TestDryRunSweepReportsOnlyUnknownObjects(t *testing.T) {
	e := newEnv(t)
	all, _, _ := fill(e)
	for _, k := range all {
		e.age(k, t0.Add(-48*time.Hour))
	}
	e.put("orphans/o", 1)
	e.age("orphans/o", t0.Add(-48*time.Hour))
	cfg := baseConfig()
	cfg.BatchSize = 3 // the listing's keys are checked a few at a time
	c := e.collector(cfg)
	rep := e.runOnce(c, RunOptions{DryRun: true, Orphans: true})
	if rep.OrphansDeleted != 1 || !slices.Equal(rep.Orphans, []string{"orphans/o"}) || rep.OrphansListed != len(all)+1 {
		t.Fatalf("dry run: %d orphans %v of %d listed, want only orphans/o of %d", rep.OrphansDeleted, rep.Orphans, rep.OrphansListed, len(all)+1)
	}
}

// TestOrphanCountsAreOfConfirmedDeletes: the sweep counts (and adds the
// listed sizes of) only the orphans the store confirmed deleted; an empty
// orphan frees 0 bytes.
func TestOrphanCountsAreOfConfirmedDeletes(t *testing.T) {
	e := newEnv(t)
	sizes := map[string]int{"orphans/a": 0, "orphans/b": 5, "orphans/c": 7}
	for k, n := range sizes {
		e.put(k, n)
		e.age(k, t0.Add(-2*time.Hour))
	}
	e.store.set(func(s *testStore) { s.failKeys["orphans/c"] = errors.New("AccessDenied") })
	c := e.collector(baseConfig())
	rep := e.runOnce(c, RunOptions{Orphans: true})
	if rep.OrphansDeleted != 2 || rep.BytesFreed != 5 || rep.DeleteErrors != 1 || !e.has("orphans/c") {
		t.Fatalf("report %+v, want 2 orphans deleted freeing 5 bytes and 1 failure", rep)
	}
	if got := counterValue(t, c.m.orphansDeleted); got != 2 {
		t.Fatalf("orphans deleted metric %v, want 2", got)
	}
}

// syntheticListStore lists n old objects that exist nowhere (for a dry
// run, which deletes nothing) after the store's own.
type syntheticListStore struct {
	*testStore
	n      int
	listed int
}

func (s *syntheticListStore) List(ctx context.Context, prefix string, fn func(blobstore.Info) error) error {
	if err := s.testStore.List(ctx, prefix, fn); err != nil {
		return err
	}
	for i := range s.n {
		s.listed++
		if err := fn(blobstore.Info{Key: fmt.Sprintf("orphans/%07d", i), Size: 1, ModTime: t0.Add(-48 * time.Hour)}); err != nil {
			return err
		}
	}
	return nil
}

// TestOrphanSweepBoundedPerSweep: one sweep takes at most
// MaxOrphansPerSweep orphans, stops listing there and says it was
// truncated; the rest waits for the next sweep. A dry run shows it
// without deleting (the listed objects need not exist).
func TestOrphanSweepBoundedPerSweep(t *testing.T) {
	e := newEnv(t)
	s := &syntheticListStore{testStore: e.store, n: MaxOrphansPerSweep + 5*DefaultBatchSize}
	c := e.collectorWith(baseConfig(), s)
	rep := e.runOnce(c, RunOptions{DryRun: true, Orphans: true})
	if rep.OrphansDeleted != MaxOrphansPerSweep || !rep.Truncated || len(rep.Orphans) != DryRunSample {
		t.Fatalf("dry run: %d orphans (sample %d), truncated %v; want %d and truncated", rep.OrphansDeleted, len(rep.Orphans), rep.Truncated, MaxOrphansPerSweep)
	}
	if s.listed >= s.n {
		t.Fatalf("the listing went on to the end (%d objects) past the bound", s.listed)
	}
}
