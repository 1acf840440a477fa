package fsm_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// Audit of the collector's commands (blobs.go): each state of a blob is
// in exactly the index that state belongs to, and a purged blob leaves
// nothing behind.

// indexed lists the buckets of the collector's indexes holding an entry
// of key (time-keyed indexes end with the key, gc_deleting is the key).
func indexed(h *harness, key string) []string {
	h.t.Helper()
	var out []string
	d := h.dump()
	for _, b := range []string{"blob_leases", "gc_candidates", "gc_deleting", "gc_gone"} {
		for k := range d[b] {
			if strings.HasSuffix(k, key) {
				out = append(out, b)
			}
		}
	}
	if _, ok := d["blobs"][key]; ok {
		out = append(out, "blobs")
	}
	slices.Sort(out)
	return out
}

// TestAuditBlobLifecycleIndexes: a live blob with no reference is a GC
// candidate; marked, it is in gc_deleting only; gone, in gc_gone only,
// with the time it went; purged, its record and its tombstone entry are
// gone and the orphan sweep no longer knows it.
func TestAuditBlobLifecycleIndexes(t *testing.T) {
	h, _, old := gcScene(t)
	check := func(when string, want ...string) {
		t.Helper()
		if got := indexed(h, old); !slices.Equal(got, want) {
			t.Fatalf("%s: %s is in %v, want %v", when, old, got, want)
		}
	}
	check("unreferenced", "blobs", "gc_candidates")
	if c, _ := h.f.GCCandidates(h.now, 10); !slices.Contains(c, old) {
		t.Fatalf("GC candidates %v lack %s", c, old)
	}
	h.advance(time.Minute)
	marked := h.markKeys(0, old)
	check("marked", "blobs", "gc_deleting")
	if b, _, _ := h.f.Blob(old); b.State != wire.BlobDeleting || b.DeletingAt == nil || !b.DeletingAt.Equal(h.now) {
		t.Fatalf("marked blob %+v, want deleting since %v", b, h.now)
	}
	if c, _ := h.f.GCCandidates(h.now, 10); slices.Contains(c, old) {
		t.Fatalf("a blob marked deleting is still a GC candidate: %v", c)
	}
	h.advance(time.Minute)
	mustOK(t, h.mustApply(fsm.CmdBlobsGone, fsm.BlobKeys{Keys: marked}))
	check("gone", "blobs", "gc_gone")
	if b, _, _ := h.f.Blob(old); b.State != wire.BlobGone || b.GoneAt == nil || !b.GoneAt.Equal(h.now) {
		t.Fatalf("gone blob %+v, want gone at %v", b, h.now)
	}
	if g, _ := h.f.GoneBefore(h.now.Add(-time.Nanosecond), 10); len(g) != 0 {
		t.Fatalf("GoneBefore a nanosecond before it went: %v", g)
	}
	if g, _ := h.f.GoneBefore(h.now, 10); !slices.Equal(g, marked) {
		t.Fatalf("GoneBefore = %v, want %v", g, marked)
	}
	h.advance(time.Hour)
	if p := mustOK(t, h.mustApply(fsm.CmdBlobsPurge, fsm.BlobKeys{Keys: marked})).([]string); !slices.Equal(p, marked) {
		t.Fatalf("purged %v, want %v", p, marked)
	}
	check("purged")
	if g, _ := h.f.GoneBefore(h.now, 10); len(g) != 0 {
		t.Fatalf("GoneBefore after the purge: %v", g)
	}
	if recorded(h, old) || blobState(h, old) != "" {
		t.Fatalf("%s is still known after its purge", old)
	}
	h.fsck()
}

// TestAuditCollectorListsHonourMax: the collector's lists (intents due,
// GC candidates, deletions) return at most the number asked for.
func TestAuditCollectorListsHonourMax(t *testing.T) {
	h := newBatchHarness(t)
	keys := []string{"u/t/a", "u/t/b", "u/t/c"}
	h.intents("u", 1, keys...)
	h.advance(2 * time.Hour)
	for n := 1; n <= 3; n++ {
		if due, err := h.f.ExpiredIntents(h.now, n); err != nil || len(due) != n {
			t.Fatalf("ExpiredIntents(max %d) = %v %v", n, due, err)
		}
	}
	mustOK(t, h.mustApply(fsm.CmdIntentsExpire, fsm.BlobKeys{Keys: keys}))
	for n := 1; n <= 3; n++ {
		if c, err := h.f.GCCandidates(h.now, n); err != nil || len(c) != n {
			t.Fatalf("GCCandidates(max %d) = %v %v", n, c, err)
		}
	}
	if got := h.markKeys(0, keys...); !slices.Equal(got, keys) {
		t.Fatalf("marked %v, want %v", got, keys)
	}
	for n := 1; n <= 3; n++ {
		if d, err := h.f.Deleting(n); err != nil || len(d) != n {
			t.Fatalf("Deleting(max %d) = %v %v", n, d, err)
		}
	}
}

// TestAuditSlotKeyLength: a slot key of any length but 32 bytes is
// refused, a longer one as a shorter one.
func TestAuditSlotKeyLength(t *testing.T) {
	h := newHarness(t)
	for _, n := range []int{fsm.SlotKeyLen - 1, fsm.SlotKeyLen + 1} {
		h.reject(wire.ErrInvalid, fsm.CmdSlotKeyInit, fsm.SlotKeyInit{Key: make([]byte, n)})
	}
}
