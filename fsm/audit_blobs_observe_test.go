package fsm_test

import (
	"slices"
	"testing"

	"github.com/metastore/metastore/fsm"
)

// Audit of the observations (observe.go, unobserved.go).

// TestAuditObservationOfASmallerObject: an object smaller than its ack
// declared is flagged as a larger one is; the answer gives the declared
// size and the record keeps the observed one; the list of blobs awaiting
// observation holds at most the number asked for.
func TestAuditObservationOfASmallerObject(t *testing.T) {
	h, keys := threeBlobsAwaitingObservation(t)
	for n := 1; n <= 3; n++ {
		got, err := h.f.Unobserved(n)
		if err != nil || !slices.Equal(got, keys[:n]) {
			t.Fatalf("Unobserved(%d) = %v %v, want %v", n, got, err, keys[:n])
		}
	}
	// The ack committed: the observation below is applied but not
	// committed when the list is read, which must leave its keys out.
	if err := h.f.Flush(); err != nil {
		t.Fatal(err)
	}
	res := mustOK(t, h.mustApply(fsm.CmdBlobsObserved, fsm.BlobsObserved{Blobs: []fsm.BlobObservation{
		{Key: "j/t/a", Size: 10, ETag: "ea"}, {Key: "j/t/b", Size: 4, ETag: "eb"}, {Key: "j/t/c", Size: 12, ETag: "ec"},
	}})).(*fsm.ObservedResult)
	if !slices.Equal(res.Observed, keys) || !slices.Equal(res.Flagged, keys[1:]) || !slices.Equal(res.Declared, []uint64{10, 10}) {
		t.Fatalf("observed %+v, want all three, b and c flagged with the declared size 10", res)
	}
	if got, _ := h.f.Unobserved(10); len(got) != 0 {
		t.Fatalf("unobserved after the observation: %v", got)
	}
	b, _, err := h.f.Blob("j/t/b")
	if err != nil || !b.Flagged || b.Size != 10 || b.Observed == nil || b.Observed.Size != 4 || b.Observed.ETag != "eb" {
		t.Fatalf("blob of a smaller object: %+v %v", b, err)
	}
	h.fsck()
}
