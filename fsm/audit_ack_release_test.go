package fsm_test

import (
	"testing"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// TestAuditAckDroppedRecordsReleasedWholly: a manifest whose segments
// were dropped and truncated by a materialization, released when its
// task loses its state, leaves no lineage, record, change or head behind,
// and no reference on any of its blobs.
func TestAuditAckDroppedRecordsReleasedWholly(t *testing.T) {
	h := newHarness(t)
	h.putJob("w", wire.JobConfig{Retained: 2})
	h.start("w", "a1", task(t, "t", "state", "incremental"))
	w := &worker{job: "w", task: "t", gen: 1, acked: map[uint64]manifests.Manifest{}}
	var keys []string
	for n := uint64(1); n <= 12; n++ {
		h.begin("w", 1, n)
		ack := w.step(h, n, n%5 == 0)
		for _, b := range ack.Manifest.Blobs {
			keys = append(keys, b.Key)
		}
		h.checkManifest("w", n, "t", w.m)
	}
	if len(h.dump()["rec_changes"]) == 0 {
		t.Fatal("no change recorded")
	}
	h.start("w", "a2", task(t, "t", "input"))
	for n := uint64(13); n <= 14; n++ {
		h.complete("w", 2, n, task(t, "t", "input"))
	}
	d := h.dump()
	for _, bucket := range []string{"lineages", "records", "rec_changes", "heads"} {
		if n := len(d[bucket]); n != 0 {
			t.Errorf("%s keeps %d keys", bucket, n)
		}
	}
	referenced, _ := h.blobKeys(keys)
	if len(referenced) != 0 {
		t.Errorf("blobs still referenced: %v", referenced)
	}
	h.fsck()
}
