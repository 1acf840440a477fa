package manifests

import (
	"math"
	"testing"
)

// TestBytesDoesNotWrap: Bytes of a manifest whose ranges add up past
// 2^64 (a worker may declare a blob of any size, and CheckRanges bounds
// each range by its blob only) is the largest uint64, not the sum modulo
// 2^64.
func TestBytesDoesNotWrap(t *testing.T) {
	half := uint64(1) << 63
	for _, m := range []Manifest{
		{Segments: []Segment{seg("huge", 0, half, 1, 1), seg("huge", half-1, half, 2, 2)}},
		{Bases: []Base{{Key: "huge", Length: math.MaxUint64}}, Segments: []Segment{seg("log", 0, 1, 1, 1)}},
		{Bases: []Base{{Key: "huge", Length: half}, {Key: "huge", Offset: 1, Length: half}}},
		{Bases: []Base{{Key: "huge", Length: half}, {Key: "huge", Offset: 1, Length: half}}, Segments: []Segment{seg("log", 0, 1, 1, 1), seg("log", 1, 7, 2, 2)}},
	} {
		if got := m.Bytes(); got != math.MaxUint64 {
			t.Errorf("Bytes() of %+v = %d, want %d", m, got, uint64(math.MaxUint64))
		}
	}
	// The first one is reachable: Apply and CheckRanges accept it.
	reach, err := Apply(Manifest{}, Delta{AddSegments: []Segment{seg("huge", 0, half, 1, 1), seg("huge", half-1, half, 2, 2)}})
	if err != nil {
		t.Fatal(err)
	}
	size := func(string) (uint64, error) { return math.MaxUint64, nil }
	if err := (Change{AddSegments: reach.Segments}).CheckRanges(size); err != nil || reach.Bytes() != math.MaxUint64 {
		t.Fatalf("%+v: %v, %d bytes", reach, err, reach.Bytes())
	}
	if got := (Manifest{Bases: []Base{{Key: "b", Length: half}}, Segments: []Segment{seg("s", 0, half-2, 1, 1)}}).Bytes(); got != math.MaxUint64-1 {
		t.Errorf("Bytes() just below the limit = %d", got)
	}
}
