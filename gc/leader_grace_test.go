package gc

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// A blob referenced again and released again between the collector's read
// and its mark is unreferenced since the release: the mark carries the
// grace, and the state machine judges it by the blob's new time, so the
// blob is kept for a whole grace period from the release.
func TestGraceRestartsWhenReleasedAgain(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 1)
	_, unref := e.split(e.run(w, 1, 9))
	victim := unref[0]
	c := e.collector(baseConfig())
	e.clock.Advance(grace)
	e.beforeFirst(fsm.CmdBlobsDeleting, func() {
		// Epoch 10 references the victim again; epoch 11 materializes
		// and, with one checkpoint retained, releases it at once.
		e.epoch(w, 10, false, manifests.Segment{Key: victim, Offset: 0, Length: 10})
		e.epoch(w, 11, true)
	})
	rep := e.runOnce(c, RunOptions{})
	if rep.MarksProposed != len(unref) || rep.Marked != len(unref)-1 {
		t.Fatalf("report %+v, want %d proposed, %d marked", rep, len(unref), len(unref)-1)
	}
	b := e.blob(victim)
	if !e.has(victim) || b.State != wire.BlobLive || b.Refs != 0 {
		t.Fatalf("a blob released again before its mark was collected inside its new grace period: %+v, in the store %v", b, e.has(victim))
	}
	// It goes once its new grace period is over.
	e.clock.Advance(grace)
	e.runOnce(c, RunOptions{})
	if e.has(victim) || e.blob(victim).State != wire.BlobGone {
		t.Fatalf("%s not collected a grace period after its release: %+v", victim, e.blob(victim))
	}
	e.checkReferencedPresent("j")
	e.fsck()
}

// The collector proposes marks only for blobs unreferenced for Grace by its
// own clock: a blob still in its grace period is not even proposed.
func TestNoMarkProposedWithinGrace(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e)
	c := e.collector(baseConfig())
	e.clock.Advance(grace - time.Nanosecond)
	if rep := e.runOnce(c, RunOptions{}); rep.MarksProposed != 0 || rep.Marked != 0 {
		t.Fatalf("within the grace period: %+v", rep)
	}
	if p := e.proposals(fsm.CmdBlobsDeleting); len(p) != 0 {
		t.Fatalf("marks proposed within the grace period: %+v", p)
	}
	e.clock.Advance(time.Nanosecond)
	if rep := e.runOnce(c, RunOptions{}); rep.MarksProposed != len(unreferenced) || rep.Marked != len(unreferenced) {
		t.Fatalf("after the grace period: %+v, want %d proposed and marked", rep, len(unreferenced))
	}
	p := e.proposals(fsm.CmdBlobsDeleting)
	if len(p) != 1 || time.Duration(p[0].Grace) != grace {
		t.Fatalf("marks proposed %+v, want one with grace %s", p, grace)
	}
	got, want := slices.Sorted(slices.Values(p[0].Keys)), slices.Sorted(slices.Values(unreferenced))
	if !slices.Equal(got, want) {
		t.Fatalf("marks proposed for %v, want %v", got, want)
	}
	e.checkReferencedPresent("j")
}

// A member that cannot confirm its leadership runs no cycle: no intent is
// expired, no blob marked, and no delete sent, not even of blobs already
// marked deleting (which a confirmed leader finishes).
func TestNoCycleWithoutLeadership(t *testing.T) {
	e := newEnv(t)
	_, _, unreferenced := fill(e)
	marked := e.do(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: unreferenced[:2]}).([]string)
	if len(marked) != 2 {
		t.Fatalf("marked %v", marked)
	}
	e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 1, Task: "t0", Keys: []string{"j/t0/abandoned"}, LeaseUntil: e.clock.Now().Add(time.Minute)})
	c := e.collector(baseConfig())
	e.clock.Advance(grace + time.Hour)
	e.setVerifyErr(errors.New("not the leader"))
	before := e.proposedCount()
	if _, err := c.RunOnce(context.Background(), RunOptions{}); err == nil {
		t.Fatal("a cycle ran without leadership")
	}
	if n := e.proposedCount(); n != before {
		t.Fatalf("%d commands proposed without leadership", n-before)
	}
	if calls := e.store.deleteCalls(); len(calls) != 0 {
		t.Fatalf("deletes sent without leadership: %v", calls)
	}
	for _, k := range unreferenced {
		if !e.has(k) {
			t.Fatalf("%s deleted without leadership", k)
		}
	}
	e.setVerifyErr(nil)
	rep := e.runOnce(c, RunOptions{})
	if rep.Deleted != len(unreferenced)+1 || rep.Resumed != 2 || rep.ExpiredIntents != 1 {
		t.Fatalf("once leading: %+v, want %d deleted (the expired intent too), 2 resumed, 1 intent expired", rep, len(unreferenced)+1)
	}
	e.checkReferencedPresent("j")
	e.fsck()
}
