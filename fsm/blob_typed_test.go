package fsm

import (
	"testing"
	"time"
)

// TestTypedBlobsKeepTheirOwnCopies: a record put in the table and one got
// from it are copies: changing either afterwards leaves the table as it
// was, as a record encoded into the file would be.
func TestTypedBlobsKeepTheirOwnCopies(t *testing.T) {
	tb := newTypedBlobs()
	now := time.Unix(1_800_000_000, 0).UTC()
	b := &blobRecord{Key: "j/t/k", Job: "j", State: blobLive, Size: 10, Refs: 1, CreatedAt: now}
	tb.put(b)
	b.Refs, b.State = 7, blobDeleting
	got := tb.get("j/t/k")
	if got == nil || got.Refs != 1 || got.State != blobLive {
		t.Fatalf("after the caller changed the record it put, the table reads %+v", got)
	}
	if got.counted != blobUsage(blobLive, 10) {
		t.Fatalf("a record read from the table counts %+v, want its usage", got.counted)
	}
	got.Refs, got.UnreferencedAt = 0, &now
	if again := tb.get("j/t/k"); again.Refs != 1 || again.UnreferencedAt != nil {
		t.Fatalf("after the caller changed the record it got, the table reads %+v", again)
	}
	if tb.get("j/t/absent") != nil {
		t.Fatal("an absent key reads a record")
	}
}
