package manifests

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func seg(key string, off, n, first, last uint64) Segment {
	return Segment{Key: key, Offset: off, Length: n, FirstSeq: first, LastSeq: last}
}

func code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func TestValidateKey(t *testing.T) {
	good := []string{"a", "jobs/j1/t1/0001", "a.b-c_d/E.F", strings.Repeat("k", MaxKeyLen)}
	for _, k := range good {
		if err := ValidateKey(k); err != nil {
			t.Errorf("%q: %v", k, err)
		}
	}
	bad := []string{"", "/abs", "a/", "a//b", "../x", "a/../../b", "./a", "a/.", `a\b`, "a b", "tásk", "a\x00b", "%2e%2e/x", strings.Repeat("k", MaxKeyLen+1)}
	for _, k := range bad {
		if err := ValidateKey(k); code(err) != CodeInvalid {
			t.Errorf("%q: %v, want invalid", k, err)
		}
	}
}

func TestValidateDelta(t *testing.T) {
	cases := []struct {
		name string
		d    Delta
		code string
	}{
		{"ok", Delta{AddSegments: []Segment{seg("a", 0, 10, 1, 5), seg("a", 10, 10, 6, 9)}}, ""},
		{"duplicate add", Delta{AddSegments: []Segment{seg("a", 0, 10, 1, 5), seg("a", 0, 10, 1, 5)}}, CodeDuplicate},
		{"duplicate drop", Delta{DropSegments: []Ref{{"a", 0}, {"a", 0}}}, CodeDuplicate},
		{"zero length", Delta{AddSegments: []Segment{seg("a", 0, 0, 1, 1)}}, CodeInvalid},
		{"seq reversed", Delta{AddSegments: []Segment{seg("a", 0, 1, 5, 1)}}, CodeInvalid},
		{"bad key", Delta{AddSegments: []Segment{seg("../a", 0, 1, 1, 1)}}, CodeInvalid},
		{"crc32c", Delta{AddSegments: []Segment{{Key: "a", Length: 1, CRC32C: "e3069283"}}}, ""},
		{"crc32c upper case", Delta{AddSegments: []Segment{{Key: "a", Length: 1, CRC32C: "E3069283"}}}, CodeInvalid},
		{"crc32c short", Delta{AddSegments: []Segment{{Key: "a", Length: 1, CRC32C: "e306928"}}}, CodeInvalid},
		{"base crc32c not hex", Delta{Materialize: &Materialization{Bases: []Base{{Key: "b", Length: 1, CRC32C: "e306928g"}}}}, CodeInvalid},
		{"base of zero length", Delta{Materialize: &Materialization{Bases: []Base{{Key: "b", Length: 0}}}}, CodeInvalid},
		{"base twice", Delta{Materialize: &Materialization{Bases: []Base{{Key: "b", Length: 1}, {Key: "b", Length: 1}}}}, CodeDuplicate},
		{"segment at a new base", Delta{Materialize: &Materialization{Bases: []Base{{Key: "b", Length: 1}}}, AddSegments: []Segment{seg("b", 0, 1, 1, 1)}}, CodeDuplicate},
	}
	for _, tc := range cases {
		if got := code(tc.d.Validate()); got != tc.code {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.code)
		}
	}
	big := Delta{}
	for i := 0; i <= MaxDeltaRefs; i++ {
		big.AddSegments = append(big.AddSegments, seg("a", uint64(i), 1, 1, 1))
	}
	if code(big.Validate()) != CodeInvalid {
		t.Error("a delta over the limit passed")
	}
}

func TestApplyRules(t *testing.T) {
	m := Manifest{Bases: []Base{{Key: "base1", Offset: 0, Length: 100}}, Segments: []Segment{seg("log1", 0, 10, 1, 10), seg("log1", 10, 10, 11, 20), seg("log2", 0, 10, 21, 30)}}
	if _, err := Apply(m, Delta{DropSegments: []Ref{{"log9", 0}}}); code(err) != CodeNotInManifest {
		t.Fatalf("drop of an unknown segment: %v", err)
	}
	if _, err := Apply(m, Delta{AddSegments: []Segment{seg("log1", 0, 10, 1, 10)}}); code(err) != CodeAlreadyPresent {
		t.Fatalf("add of a present segment: %v", err)
	}
	// Materialize at seq 21: the first two segments and the old base go.
	got, err := Apply(m, Delta{Materialize: &Materialization{Bases: []Base{{Key: "base2", Offset: 0, Length: 50}}, TruncateBefore: 21}, AddSegments: []Segment{seg("log3", 0, 5, 31, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	want := Manifest{Bases: []Base{{Key: "base2", Offset: 0, Length: 50}}, Segments: []Segment{seg("log2", 0, 10, 21, 30), seg("log3", 0, 5, 31, 32)}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("materialized:\n got %+v\nwant %+v", got, want)
	}
	if got.Bytes() != 65 || !reflect.DeepEqual(got.Blobs(), []string{"base2", "log2", "log3"}) {
		t.Fatalf("bytes %d blobs %v", got.Bytes(), got.Blobs())
	}
	// Dropping a segment the materialization already truncated is an error.
	if _, err := Apply(m, Delta{Materialize: &Materialization{TruncateBefore: 21}, DropSegments: []Ref{{"log1", 0}}}); code(err) != CodeNotInManifest {
		t.Fatalf("drop of a truncated segment: %v", err)
	}
}

func TestCheckRanges(t *testing.T) {
	c := Change{AddSegments: []Segment{seg("a", 90, 10, 1, 1)}, AddBases: []Base{{Key: "b", Offset: 0, Length: 5}}}
	size := func(key string) (uint64, error) {
		if key == "a" {
			return 100, nil
		}
		if key == "b" {
			return 5, nil
		}
		return 0, fmt.Errorf("unknown %s", key)
	}
	if err := c.CheckRanges(size); err != nil {
		t.Fatal(err)
	}
	c.AddSegments[0].Length = 11
	if err := c.CheckRanges(size); code(err) != CodeOutOfRange {
		t.Fatalf("past the end: %v", err)
	}
	c.AddSegments[0] = seg("a", 101, 1, 1, 1)
	if err := c.CheckRanges(size); code(err) != CodeOutOfRange {
		t.Fatalf("offset past the end: %v", err)
	}
}

// TestDiffRoundTrip applies Diff(prev, next) to prev and expects next, over
// random manifests.
func TestDiffRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	random := func() Manifest {
		var m Manifest
		for i := 0; i < r.IntN(3); i++ {
			m.Bases = append(m.Bases, Base{Key: fmt.Sprintf("base%d", r.IntN(4)), Offset: uint64(i * 100), Length: uint64(1 + r.IntN(99))})
		}
		seen := map[Ref]bool{}
		for i := 0; i < r.IntN(30); i++ {
			s := seg(fmt.Sprintf("log%d", r.IntN(5)), uint64(r.IntN(20))*10, uint64(1+r.IntN(9)), uint64(i), uint64(i+r.IntN(3)))
			if !seen[s.ID()] {
				seen[s.ID()] = true
				m.Segments = append(m.Segments, s)
			}
		}
		seenB := map[Ref]bool{}
		var bases []Base
		for _, b := range m.Bases {
			if !seenB[b.ID()] && !seen[b.ID()] {
				seenB[b.ID()] = true
				bases = append(bases, b)
			}
		}
		m.Bases = bases
		m.Sort()
		return m
	}
	for i := 0; i < 500; i++ {
		prev, next := random(), random()
		got, err := Apply(prev, Diff(prev, next))
		if err != nil {
			t.Fatalf("round %d: %v\nprev %+v\nnext %+v", i, err, prev, next)
		}
		if !reflect.DeepEqual(norm(got), norm(next)) {
			t.Fatalf("round %d:\n got %+v\nwant %+v", i, got, next)
		}
	}
	full, err := Apply(Manifest{}, Full(Manifest{Bases: []Base{{Key: "b", Offset: 0, Length: 1}}, Segments: []Segment{seg("s", 0, 1, 1, 1)}}))
	if err != nil || len(full.Bases) != 1 || len(full.Segments) != 1 {
		t.Fatalf("full: %+v %v", full, err)
	}
}

func norm(m Manifest) Manifest {
	if len(m.Bases) == 0 {
		m.Bases = nil
	}
	if len(m.Segments) == 0 {
		m.Segments = nil
	}
	return m
}

// TestCRC32C: the Castagnoli check value, in the wire form.
func TestCRC32C(t *testing.T) {
	if got := CRC32C([]byte("123456789")); got != "e3069283" || !ValidCRC32C(got) {
		t.Fatalf("CRC32C(123456789) = %q, want e3069283", got)
	}
	if got := CRC32C(nil); got != "00000000" {
		t.Fatalf("CRC32C(nil) = %q", got)
	}
}
