package fsm

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
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

// TestTypedBlobsHoldEveryField: records with every field set, and with
// every optional field unset, read back from the table as the file would
// hold them (the same encoded bytes), also after a record is written
// again with another checksum and ETag, and after deletes.
func TestTypedBlobsHoldEveryField(t *testing.T) {
	tb := newTypedBlobs()
	at := func(s int64) time.Time { return time.Unix(1_800_000_000+s, s*7919).UTC() }
	ptr := func(t time.Time) *time.Time { return &t }
	full := &blobRecord{Key: "job/task/k1", Job: "job", Task: "task", Generation: 3, State: blobDeleting, Size: 1 << 40,
		Checksum: "crc32c:0a1b2c3d", Observed: &observation{Size: 12, ETag: "9b2cf535f27731c974343645a3985328", Missing: true, At: at(1)},
		AwaitingObservation: true, Flagged: true, Refs: 5, LeaseUntil: ptr(at(2)), CreatedAt: at(3),
		UnreferencedAt: ptr(at(4)), DeletingAt: ptr(at(5)), GoneAt: ptr(at(6)), ModifyIndex: 77}
	bare := &blobRecord{Key: "job/other/k2", Job: "job", State: blobIntent}
	for _, b := range []*blobRecord{full, bare} {
		tb.put(b)
	}
	check := func(step string, want *blobRecord) {
		t.Helper()
		got := tb.get(want.Key)
		if got == nil {
			t.Fatalf("%s: %q missing", step, want.Key)
		}
		g, err := encodeRecord(got)
		if err != nil {
			t.Fatal(err)
		}
		w, err := encodeRecord(want)
		if err != nil {
			t.Fatal(err)
		}
		if string(g) != string(w) {
			t.Fatalf("%s: %q reads back as %+v, want %+v", step, want.Key, got, want)
		}
		// And as the file's record decodes, field for field (times in
		// UTC, as the codec reads them).
		stored, err := decodeBlob([]byte(want.Key), w)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, stored) {
			t.Fatalf("%s: %q reads back as\n%#v\nthe file's record decodes as\n%#v", step, want.Key, got, stored)
		}
	}
	check("put", full)
	check("put", bare)
	full.Checksum, full.Observed.ETag, full.State = "sha256:"+strings.Repeat("ab", 32), "", blobGone
	tb.put(full)
	check("written again", full)
	check("beside it", bare)
	if !tb.del(bare.Key) || tb.has(bare.Key) || tb.get(bare.Key) != nil || tb.del(bare.Key) {
		t.Fatal("a deleted record is still there")
	}
	check("after a delete", full)
	if keys := tb.keys(); len(keys) != 1 || keys[0] != full.Key {
		t.Fatalf("keys %v", keys)
	}
	// What the layout cannot hold is refused, not stored wrong.
	for _, b := range []*blobRecord{
		{Key: "old", State: blobLive, CreatedAt: time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Key: "odd", State: blobState("lost")},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%q (%s, %s) was stored", b.Key, b.State, b.CreatedAt)
				}
			}()
			tb.put(b)
		}()
	}
}

// TestTypedBlobsFootprint: 200,000 blob records as an ack and the
// leader's observation leave them (signed-slot keys of 68 bytes, a
// checksum, an observed ETag) take at most 300 heap bytes each, and the
// collector has no pointer per blob to follow (the heap's objects do
// not grow with the records).
func TestTypedBlobsFootprint(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a table of 200,000 records")
	}
	const n = 200_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tb := newTypedBlobs()
	now := time.Unix(1_800_000_000, 0).UTC()
	for i := range n {
		key := fmt.Sprintf("j%03d/t%02d/%016x%016x%016x", i%1000, i%16, i, i*7, i*13)
		tb.put(&blobRecord{Key: key, Job: fmt.Sprintf("j%03d", i%1000), Task: fmt.Sprintf("t%02d", i%16), Generation: 1,
			State: blobLive, Size: 4096, Checksum: fmt.Sprintf("crc32c:%08x", i), Refs: 1, CreatedAt: now,
			Observed: &observation{Size: 4096, ETag: fmt.Sprintf("%032x", i), At: now}, ModifyIndex: uint64(i)})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	objects := float64(after.HeapObjects-before.HeapObjects) / n
	t.Logf("%d records: %.0f heap bytes and %.3f heap objects each", n, per, objects)
	if per > 300 {
		t.Errorf("%.0f heap bytes per record, want at most 300", per)
	}
	if objects > 0.1 {
		t.Errorf("%.3f heap objects per record: the table holds pointers per record", objects)
	}
	runtime.KeepAlive(tb)
}
