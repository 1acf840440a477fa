package gc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
)

// listingStore is the test store whose listing can be bent: it reports the
// objects of unknownAge without a modification time (as a store may), and
// runs afterList when a listing is over.
type listingStore struct {
	*testStore
	unknownAge map[string]bool
	afterList  func()
	lists      int
}

func (s *listingStore) List(ctx context.Context, prefix string, fn func(blobstore.Info) error) error {
	s.lists++
	err := s.testStore.List(ctx, prefix, func(info blobstore.Info) error {
		if s.unknownAge[info.Key] {
			info.ModTime = time.Time{}
		}
		return fn(info)
	})
	if s.afterList != nil {
		s.afterList()
	}
	return err
}

// An object the listing gives no modification time is left alone by the
// orphan sweep, however long it has been unknown: its age cannot be told
// from an upload in flight.
func TestOrphanSweepSparesUnknownAge(t *testing.T) {
	e := newEnv(t)
	fill(e)
	old := e.clock.Now().Add(-2 * time.Hour)
	for _, k := range []string{"j/t0/orphan-dated", "j/t0/orphan-undated"} {
		e.put(k, 10)
		e.age(k, old)
	}
	s := &listingStore{testStore: e.store, unknownAge: map[string]bool{"j/t0/orphan-undated": true}}
	c := e.collectorWith(baseConfig(), s)
	rep := e.runOnce(c, RunOptions{Orphans: true})
	if rep.OrphansDeleted != 1 || e.has("j/t0/orphan-dated") {
		t.Fatalf("sweep: %+v; the dated orphan in the store: %v", rep, e.has("j/t0/orphan-dated"))
	}
	if !e.has("j/t0/orphan-undated") {
		t.Fatal("an object of unknown age was swept")
	}
	e.checkReferencedPresent("j")
}

// Leadership lost while the sweep lists: the check right before the
// Delete stops it, and nothing listed is deleted.
func TestOrphanSweepChecksLeadershipBeforeDelete(t *testing.T) {
	e := newEnv(t)
	fill(e)
	e.put("j/t0/orphan-old", 10)
	e.age("j/t0/orphan-old", e.clock.Now().Add(-2*time.Hour))
	s := &listingStore{testStore: e.store}
	s.afterList = func() { e.setVerifyErr(errors.New("not the leader")) }
	c := e.collectorWith(baseConfig(), s)
	if rep, err := c.RunOnce(context.Background(), RunOptions{Orphans: true}); err == nil {
		t.Fatalf("a sweep deposed while listing ended without error: %+v", rep)
	}
	if s.lists != 1 {
		t.Fatalf("%d listings, want 1", s.lists)
	}
	if !e.has("j/t0/orphan-old") {
		t.Fatal("an orphan was deleted after leadership was lost")
	}
	if calls := e.store.deleteCalls(); len(calls) != 0 {
		t.Fatalf("deletes sent after leadership was lost: %v", calls)
	}
}

// Leadership lost during the cycle, before its sweep: the sweep confirms
// leadership first, so it neither proposes a cut-off nor lists the store.
func TestOrphanSweepChecksLeadershipBeforeListing(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e)
	e.put("j/t0/orphan-old", 10)
	e.age("j/t0/orphan-old", e.clock.Now().Add(-2*time.Hour))
	s := &listingStore{testStore: e.store}
	c := e.collectorWith(baseConfig(), s)
	e.clock.Advance(grace)
	e.mu.Lock()
	e.beforeApply = func(cmd fsm.Command) {
		if cmd.Type == fsm.CmdBlobsGone {
			e.beforeApply = nil
			e.setVerifyErr(errors.New("not the leader"))
		}
	}
	e.mu.Unlock()
	rep, err := c.RunOnce(context.Background(), RunOptions{Orphans: true})
	if err == nil {
		t.Fatalf("a sweep after leadership was lost ended without error: %+v", rep)
	}
	if rep.Deleted != len(unreferenced) {
		t.Fatalf("report %+v, want the %d marked blobs deleted before leadership was lost", rep, len(unreferenced))
	}
	for _, cmd := range e.proposed {
		if cmd.Type == fsm.CmdSlotCutoff {
			t.Fatal("a slot cut-off was proposed after leadership was lost")
		}
	}
	if s.lists != 0 {
		t.Fatalf("the store was listed %d times after leadership was lost", s.lists)
	}
	if !e.has("j/t0/orphan-old") {
		t.Fatal("an orphan was deleted after leadership was lost")
	}
}

// An object whose intent this member applies only after the listing (its
// state machine was behind: the leadership check before the Delete is what
// brings it up to date) is not deleted: the sweep reads which keys are
// known again after that check.
func TestOrphanSweepRechecksKnownBeforeDelete(t *testing.T) {
	e := newEnv(t)
	fill(e)
	old := e.clock.Now().Add(-2 * time.Hour)
	for _, k := range []string{"j/t0/orphan-old", "j/t0/late-intent"} {
		e.put(k, 10)
		e.age(k, old)
	}
	listed, applied := false, false
	s := &listingStore{testStore: e.store}
	s.afterList = func() { listed = true }
	c := e.collectorWith(baseConfig(), s, func(d *Deps) {
		d.VerifyLeader = func(ctx context.Context) error {
			if listed && !applied {
				applied = true
				e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 1, Task: "t0", Keys: []string{"j/t0/late-intent"}, LeaseUntil: e.clock.Now().Add(time.Hour)})
			}
			return e.verifyLeader(ctx)
		}
	})
	rep := e.runOnce(c, RunOptions{Orphans: true})
	if !applied {
		t.Fatal("no leadership check after the listing")
	}
	if rep.OrphansDeleted != 1 || e.has("j/t0/orphan-old") {
		t.Fatalf("sweep: %+v; the orphan in the store: %v", rep, e.has("j/t0/orphan-old"))
	}
	if !e.has("j/t0/late-intent") {
		t.Fatal("an object whose intent was applied after the listing was swept")
	}
	e.checkReferencedPresent("j")
}
