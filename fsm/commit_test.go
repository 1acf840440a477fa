package fsm_test

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// TestGroupCommit: batches are applied to one open transaction and
// committed together (commit.go): when the interval passes with no reader
// (the timer), when a reader needs them, before a snapshot, and at close;
// reads always see every applied batch.
func TestGroupCommit(t *testing.T) {
	h := newHarness(t)
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 1000})
	h.putJob("a", wire.JobConfig{})
	h.job("a") // commits it
	start := h.f.CommitStats()
	for i := range 10 {
		h.putJob("j"+string(rune('a'+i)), wire.JobConfig{})
	}
	if got := h.f.CommitStats(); got.Commits != start.Commits {
		t.Fatalf("10 batches committed %d times before any reader, want none", got.Commits-start.Commits)
	}
	if c := h.f.CommittedIndex(); c >= h.f.AppliedIndex() {
		t.Fatalf("committed index %d with applied %d: nothing should be committed yet", c, h.f.AppliedIndex())
	}
	// A read sees them all, committing them in one transaction.
	if h.job("jj") == nil {
		t.Fatal("a read misses an applied batch")
	}
	got := h.f.CommitStats()
	if got.Commits != start.Commits+1 || got.Entries != start.Entries+10 {
		t.Fatalf("stats %+v after the read, from %+v: want one commit of 10 entries", got, start)
	}
	if c := h.f.CommittedIndex(); c != h.f.AppliedIndex() {
		t.Fatalf("committed index %d after a read, applied %d", c, h.f.AppliedIndex())
	}

	// MaxEntries commits without a reader.
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 3})
	before := h.f.CommitStats()
	for i := range 3 {
		h.putJob("m"+string(rune('a'+i)), wire.JobConfig{})
	}
	if got := h.f.CommitStats(); got.Commits != before.Commits+1 {
		t.Fatalf("3 entries with MaxEntries 3: %d commits", got.Commits-before.Commits)
	}

	// The interval commits without a reader.
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: 10 * time.Millisecond, MaxEntries: 1000})
	h.putJob("timer", wire.JobConfig{})
	deadline := time.Now().Add(10 * time.Second)
	for h.f.CommittedIndex() != h.f.AppliedIndex() {
		if time.Now().After(deadline) {
			t.Fatal("the open transaction was not committed after its interval")
		}
		time.Sleep(time.Millisecond)
	}

	// A snapshot holds everything applied.
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 1000})
	h.putJob("snap", wire.JobConfig{})
	want := h.f.AppliedIndex()
	dst := newHarness(t)
	if err := dst.f.Restore(io.NopCloser(bytes.NewReader(snapshotOf(t, h.f)))); err != nil {
		t.Fatal(err)
	}
	if got := dst.f.AppliedIndex(); got != want || dst.job("snap") == nil {
		t.Fatalf("restored snapshot at index %d (want %d), job %v", got, want, dst.job("snap"))
	}

	// Close commits: reopened, the file holds every batch.
	h.putJob("closed", wire.JobConfig{})
	want = h.f.AppliedIndex()
	h.reopen()
	if got := h.f.AppliedIndex(); got != want || h.job("closed") == nil {
		t.Fatalf("reopened at %d, want %d", got, want)
	}
}
