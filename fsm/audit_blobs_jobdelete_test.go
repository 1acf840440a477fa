package fsm_test

import (
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// Audit of job-delete (jobdelete.go): every reference the job held is
// released, whichever of its records names the lineage holding it.

// checkReleased fails unless no lineage of job remains and every blob
// of keys has no reference left.
func checkReleased(t *testing.T, h *harness, job string, keys []string) {
	t.Helper()
	h.fsck()
	for k, n := range h.refsOf(keys) {
		if n != 0 {
			t.Errorf("blob %s of the deleted job: %d references, want 0", k, n)
		}
	}
	for k, v := range h.dump()["lineages"] {
		if strings.Contains(v, `"`+job+`"`) {
			t.Errorf("lineage %x of the deleted job remains: %s", k, v)
		}
	}
}

// TestAuditJobDeleteReleasesRetainedFork: a retained checkpoint of an
// earlier attempt whose lineage is no task's head any more (the new
// attempt forked from an older checkpoint) loses its references too.
func TestAuditJobDeleteReleasesRetainedFork(t *testing.T) {
	h := newHarness(t)
	h.putJob("d", wire.JobConfig{Retained: 2})
	tk := task(t, "w", "state", "incremental")
	h.start("d", "a1", tk)
	w := &worker{job: "d", task: "w", gen: 1, acked: map[uint64]manifests.Manifest{}}
	for e := uint64(1); e <= 2; e++ {
		h.begin("d", 1, e)
		w.step(h, e, false)
	}
	h.start("d", "a2", tk)
	w2 := &worker{job: "d", task: "w", gen: 2, acked: map[uint64]manifests.Manifest{}, m: w.acked[1], seq: 100,
		base: &fsm.BaseRef{Job: "d", Task: "w", Epoch: 1}}
	h.begin("d", 2, 3)
	w2.step(h, 3, false)
	if j := h.job("d"); len(j.Retained) != 2 || j.Retained[0] != 2 {
		t.Fatalf("retained %v, want epochs 2 and 3", j.Retained)
	}
	keys := append(w.acked[2].Blobs(), w2.acked[3].Blobs()...)
	mustOK(t, h.mustApply(fsm.CmdJobDelete, fsm.JobDelete{Job: "d"}))
	checkReleased(t, h, "d", keys)
}

// TestAuditJobDeleteReleasesAbortedHead: a task's head keeps the manifest
// of its last ack when that epoch was aborted (no live epoch names its
// lineage); the delete releases it too.
func TestAuditJobDeleteReleasesAbortedHead(t *testing.T) {
	h := newHarness(t)
	h.putJob("d", wire.JobConfig{Retained: 1})
	h.start("d", "a1", task(t, "w", "state", "incremental"), task(t, "x", "state"))
	w := &worker{job: "d", task: "w", gen: 1, acked: map[uint64]manifests.Manifest{}}
	h.begin("d", 1, 1)
	w.step(h, 1, false)
	h.abort("d", 1, 1, "test")
	keys := w.acked[1].Blobs()
	if n := h.refsOf(keys)[keys[0]]; n < 1 {
		t.Fatalf("%s: %d references after the abort, want the head's", keys[0], n)
	}
	mustOK(t, h.mustApply(fsm.CmdJobDelete, fsm.JobDelete{Job: "d"}))
	checkReleased(t, h, "d", keys)
}

// TestAuditJobDeleteLeavesNoIndexEntry: after a delete, neither the
// deadline of its pending epoch nor the lease entry of its expired
// intent remains for the leader's loops to find.
func TestAuditJobDeleteLeavesNoIndexEntry(t *testing.T) {
	h := newHarness(t)
	h.putJob("d", wire.JobConfig{Retained: 1})
	h.start("d", "a1", task(t, "w", "state"))
	h.begin("d", 1, 1)
	h.intents("d", 1, "d/w/open")
	mustOK(t, h.mustApply(fsm.CmdJobDelete, fsm.JobDelete{Job: "d"}))
	d := h.dump()
	for _, b := range []string{"deadlines", "blob_leases"} {
		for k := range d[b] {
			if strings.Contains(k, "d\x00") || strings.Contains(k, "d/w/") {
				t.Errorf("%s/%q of the deleted job remains", b, k)
			}
		}
	}
	if due, err := h.f.ExpiredIntents(h.now.Add(48*time.Hour), 10); err != nil || len(due) != 0 {
		t.Fatalf("expired intents after the delete: %v %v", due, err)
	}
}

// TestAuditJobDeleteLeavesOtherJobsIntents: another job's intents stay
// intents when a job is deleted, counted in that job's usage: its upload
// batches, and an intent of job v whose key lies under job d's prefix
// (an intent's keys are whatever its entry names).
func TestAuditJobDeleteLeavesOtherJobsIntents(t *testing.T) {
	h := newHarness(t)
	for _, j := range []string{"d", "v"} {
		h.putJob(j, wire.JobConfig{Retained: 1})
		h.start(j, "a1", task(t, "w", "state"))
	}
	h.intents("v", 1, "d/w/planted")
	vkeys := h.batch("v", 1, "w", testBatch, 2)
	h.intents("d", 1, "d/w/own")
	ts := mustOK(t, h.mustApply(fsm.CmdJobDelete, fsm.JobDelete{Job: "d"})).(*wire.JobDeletion)
	if ts.IntentsExpired != 1 {
		t.Fatalf("the delete expired %d intents, want d's one", ts.IntentsExpired)
	}
	for _, k := range append(vkeys, "d/w/planted") {
		if s := blobState(h, k); s != wire.BlobIntent {
			t.Fatalf("v's intent %s is %q after d was deleted, want intent", k, s)
		}
	}
	if u := h.f.JobUsage("v"); u.Intents != 3 {
		t.Fatalf("v's usage %+v, want its intent", u)
	}
	h.fsck()
}
