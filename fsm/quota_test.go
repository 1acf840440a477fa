package fsm_test

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// checkUsage compares the in-memory usage of each job with a scan of its
// blobs.
func checkUsage(t *testing.T, f *fsm.FSM, when string, jobs ...string) {
	t.Helper()
	for _, job := range jobs {
		scanned, _, err := f.ScanJobUsage(job)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.JobUsage(job); got != scanned {
			t.Fatalf("%s: job %s: usage %+v, the blob table holds %+v", when, job, got, scanned)
		}
	}
}

// TestJobUsageFollowsTheBlobs: the usage counts the quotas read move with
// every blob's state (intent, live, expired, deleting, gone, purged), and
// are rebuilt when the file is opened again and when a snapshot is
// restored.
func TestJobUsageFollowsTheBlobs(t *testing.T) {
	h := newHarness(t)
	h.putJob("u", wire.JobConfig{Retained: 1})
	tk := task(t, "t", "state", "incremental")
	h.start("u", "a1", tk)
	w := &worker{job: "u", task: "t", gen: 1, acked: map[uint64]manifests.Manifest{}}
	for e := uint64(1); e <= 4; e++ {
		h.begin("u", 1, e)
		w.step(h, e, e == 3)
		checkUsage(t, h.f, "after an ack", "u")
	}
	if u := h.f.JobUsage("u"); u.LiveBlobs == 0 || u.LiveBytes == 0 {
		t.Fatalf("usage %+v after acks that committed blobs", u)
	}
	h.intents("u", 1, "u/t/spare-1", "u/t/spare-2")
	checkUsage(t, h.f, "after intents", "u")
	if u := h.f.JobUsage("u"); u.Intents != 2 {
		t.Fatalf("usage %+v, want the 2 open intents", u)
	}
	h.advance(2 * time.Hour)
	mustOK(t, h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: []string{"u/t/spare-1", "u/t/spare-2"}}))
	checkUsage(t, h.f, "after expiry", "u")

	// Collect what the subsumed checkpoints dropped.
	cands, err := h.f.GCCandidates(h.now, 1000)
	if err != nil || len(cands) == 0 {
		t.Fatalf("candidates %v %v", cands, err)
	}
	marked := mustOK(t, h.mustApply(fsm.CmdBlobsDeleting, fsm.BlobKeys{Keys: cands})).([]string)
	checkUsage(t, h.f, "after deleting", "u")
	mustOK(t, h.mustApply(fsm.CmdBlobsGone, fsm.BlobKeys{Keys: marked}))
	checkUsage(t, h.f, "after gone", "u")
	h.advance(48 * time.Hour)
	mustOK(t, h.mustApply(fsm.CmdBlobsPurge, fsm.BlobKeys{Keys: marked}))
	checkUsage(t, h.f, "after purge", "u")
	h.fsck()

	want := h.f.JobUsage("u")
	h.reopen()
	if got := h.f.JobUsage("u"); got != want {
		t.Fatalf("after reopening: usage %+v, want %+v", got, want)
	}

	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	dst := newHarness(t)
	if err := dst.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got := dst.f.JobUsage("u"); got != want {
		t.Fatalf("after a restore: usage %+v, want %+v", got, want)
	}
	dst.fsck()
}

// TestJobUsageCountsAppliedWrites: the quotas read JobUsage between an
// apply and the commit of the state file (group commits, commit.go); the
// intents applied but not yet committed count, or one request too many
// is admitted (api: TestUploadIntentFlood granted 51,000 of 50,000).
func TestJobUsageCountsAppliedWrites(t *testing.T) {
	h := newHarness(t)
	h.f.SetCommitPolicy(fsm.CommitPolicy{Interval: time.Hour, MaxEntries: 1000})
	h.putJob("u", wire.JobConfig{})
	h.start("u", "a1", task(t, "t", "state"))
	committed := h.f.CommitStats().Commits
	h.intents("u", 1, "u/t/k1", "u/t/k2", "u/t/k3")
	if got := h.f.CommitStats().Commits; got != committed {
		t.Fatalf("the intents were committed (%d commits); the test needs them applied only", got-committed)
	}
	if u := h.f.JobUsage("u"); u.Intents != 3 {
		t.Fatalf("usage %+v with 3 intents applied, not committed: want them counted", u)
	}
	if err := h.f.Flush(); err != nil {
		t.Fatal(err)
	}
	if u := h.f.JobUsage("u"); u.Intents != 3 {
		t.Fatalf("usage %+v after the commit: want the 3 intents counted once", u)
	}
	checkUsage(t, h.f, "after the commit", "u")
}
