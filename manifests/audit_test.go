package manifests

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Tests written by a mutation audit of manifest.go: each defends a promise
// of the package that a changed comparison or a dropped check broke without
// any earlier test failing.

// TestDeltaRefLimitExact: a delta of exactly MaxDeltaRefs references
// passes, one more fails, and bases of a materialization count as much as
// drops and additions.
func TestDeltaRefLimitExact(t *testing.T) {
	build := func(bases, drops, adds int) Delta {
		d := Delta{Materialize: &Materialization{}}
		for i := 0; i < bases; i++ {
			d.Materialize.Bases = append(d.Materialize.Bases, Base{Key: "base", Offset: uint64(i), Length: 1})
		}
		for i := 0; i < drops; i++ {
			d.DropSegments = append(d.DropSegments, Ref{"old", uint64(i)})
		}
		for i := 0; i < adds; i++ {
			d.AddSegments = append(d.AddSegments, seg("log", uint64(i), 1, 1, 1))
		}
		return d
	}
	third := MaxDeltaRefs / 3
	rest := MaxDeltaRefs - 2*third
	if d := build(third, third, rest); d.Size() != MaxDeltaRefs || d.Validate() != nil {
		t.Fatalf("a delta of exactly %d references (size %d): %v", MaxDeltaRefs, d.Size(), d.Validate())
	}
	for name, d := range map[string]Delta{
		"one base more": build(third+1, third, rest),
		"one drop more": build(third, third+1, rest),
		"one add more":  build(third, third, rest+1),
	} {
		if d.Size() != MaxDeltaRefs+1 || code(d.Validate()) != CodeInvalid {
			t.Errorf("%s: size %d, %v; want %d and invalid", name, d.Size(), d.Validate(), MaxDeltaRefs+1)
		}
	}
	// One base is counted too.
	if d := build(1, 0, MaxDeltaRefs); d.Size() != MaxDeltaRefs+1 || code(d.Validate()) != CodeInvalid {
		t.Errorf("one base and %d additions: size %d, %v; want invalid", MaxDeltaRefs, d.Size(), d.Validate())
	}
}

// TestValidateKeyCharset: every byte of [A-Za-z0-9._-] may appear in a
// key and no other byte may, checked byte by byte (the byte loop of
// checkKeyPath against the charset it writes out).
func TestValidateKeyCharset(t *testing.T) {
	const charset = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"
	for c := 0; c < 256; c++ {
		if c == '/' {
			continue
		}
		key := "k" + string([]byte{byte(c)}) + "k"
		err := ValidateKey(key)
		if want := strings.IndexByte(charset, byte(c)) >= 0; (err == nil) != want {
			t.Errorf("key %q: %v, want accepted %v", key, err, want)
		}
		if err != nil && code(err) != CodeInvalid {
			t.Errorf("key %q: code %q, want %q", key, code(err), CodeInvalid)
		}
	}
	for _, key := range []string{"z", "Z", "0", "9", "a", "A", "_", "-", "..a", "a..", "x/z/9"} {
		if err := ValidateKey(key); err != nil {
			t.Errorf("key %q: %v", key, err)
		}
	}
}

// TestValidCRC32CDigits: each of the 16 lowercase hex digits is accepted in
// every position, the bytes just outside those ranges and upper case are
// not, and the form is exactly 8 digits or empty.
func TestValidCRC32CDigits(t *testing.T) {
	for _, c := range "0123456789abcdef" {
		s := strings.Repeat(string(c), 8)
		if !ValidCRC32C(s) {
			t.Errorf("%q refused", s)
		}
	}
	for _, c := range "/:`gABCDEF G" {
		for pos := 0; pos < 8; pos++ {
			s := []byte("01234567")
			s[pos] = byte(c)
			if ValidCRC32C(string(s)) {
				t.Errorf("%q accepted", s)
			}
		}
	}
	for _, s := range []string{"0", "0123456", "012345678", "0123456789abcdef"} {
		if ValidCRC32C(s) {
			t.Errorf("%q (%d digits) accepted", s, len(s))
		}
	}
	if !ValidCRC32C("") {
		t.Error("the empty checksum (none declared) refused")
	}
	if got := FormatCRC32C(0xa); got != "0000000a" {
		t.Errorf("FormatCRC32C(10) = %q", got)
	}
}

// TestBlobsAndSort: Blobs lists each blob key once, sorted, whether bases
// or segments (or both) use it; Sort orders bases and segments by key, then
// offset as a number.
func TestBlobsAndSort(t *testing.T) {
	m := Manifest{
		Bases:    []Base{{Key: "z", Offset: 100, Length: 1}, {Key: "shared", Offset: 9, Length: 1}, {Key: "z", Offset: 20, Length: 1}, {Key: "shared", Offset: 0, Length: 1}},
		Segments: []Segment{seg("log", 100, 1, 1, 1), seg("shared", 50, 1, 1, 1), seg("log", 20, 1, 1, 1), seg("a", 3, 1, 1, 1), seg("log", 3, 1, 1, 1)},
	}
	if got, want := m.Blobs(), []string{"a", "log", "shared", "z"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Blobs() = %v, want %v", got, want)
	}
	m.Sort()
	var bases, segs []string
	for _, b := range m.Bases {
		bases = append(bases, b.ID().String())
	}
	for _, s := range m.Segments {
		segs = append(segs, s.ID().String())
	}
	if want := []string{"shared@0", "shared@9", "z@20", "z@100"}; !reflect.DeepEqual(bases, want) {
		t.Errorf("sorted bases %v, want %v", bases, want)
	}
	if want := []string{"a@3", "log@3", "log@20", "log@100", "shared@50"}; !reflect.DeepEqual(segs, want) {
		t.Errorf("sorted segments %v, want %v", segs, want)
	}
	if got := m.Bytes(); got != 9 {
		t.Errorf("Bytes() = %d, want 9", got)
	}
}

// TestValidateSeqOrder: a segment's first_seq may equal its last_seq but
// not exceed it, even by one.
func TestValidateSeqOrder(t *testing.T) {
	if err := (Delta{AddSegments: []Segment{seg("a", 0, 1, 7, 7)}}).Validate(); err != nil {
		t.Errorf("first_seq == last_seq: %v", err)
	}
	for _, s := range []Segment{seg("a", 0, 1, 8, 7), seg("a", 0, 1, 1, 0), seg("a", 0, 1, ^uint64(0), ^uint64(0)-1)} {
		if err := (Delta{AddSegments: []Segment{s}}).Validate(); code(err) != CodeInvalid {
			t.Errorf("first_seq %d, last_seq %d: %v, want invalid", s.FirstSeq, s.LastSeq, err)
		}
	}
}

// TestValidateEveryReference: a bad key is refused wherever it appears: in
// a base, a drop or an addition.
func TestValidateEveryReference(t *testing.T) {
	for name, d := range map[string]Delta{
		"base":     {Materialize: &Materialization{Bases: []Base{{Key: "a/../b", Length: 1}}}},
		"drop":     {DropSegments: []Ref{{"a//b", 0}}},
		"addition": {AddSegments: []Segment{seg("/abs", 0, 1, 1, 1)}},
	} {
		if err := d.Validate(); code(err) != CodeInvalid {
			t.Errorf("bad key in a %s: %v, want %s", name, err, CodeInvalid)
		}
		if _, err := Apply(Manifest{Segments: []Segment{seg("a", 0, 1, 1, 1)}}, d); code(err) != CodeInvalid {
			t.Errorf("Apply of a bad key in a %s: %v, want %s", name, err, CodeInvalid)
		}
	}
}

// TestErrorForm: an *Error reads "code: ref: message" (ref as key@offset),
// or "code: message" without a reference; IsError finds one through
// wrapping and nothing else.
func TestErrorForm(t *testing.T) {
	_, err := Apply(Manifest{}, Delta{DropSegments: []Ref{{"log", 42}}})
	var e *Error
	if !errors.As(err, &e) || e.Ref != "log@42" || e.Code != CodeNotInManifest {
		t.Fatalf("drop of an unknown segment: %#v", err)
	}
	if got, want := err.Error(), "not_in_manifest: log@42: "+e.Message; got != want || e.Message == "" {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := (&Error{Code: "c", Message: "m"}).Error(); got != "c: m" {
		t.Errorf("Error() without a reference = %q, want %q", got, "c: m")
	}
	if !IsError(fmt.Errorf("ack: %w", err)) {
		t.Error("IsError does not see a wrapped *Error")
	}
	if IsError(errors.New("disk on fire")) || IsError(nil) {
		t.Error("IsError of an error that is no *Error")
	}
	if got := (Ref{"a/b", 7}).String(); got != "a/b@7" {
		t.Errorf("Ref.String() = %q", got)
	}
}

// TestMaterializeTruncationBoundary: a materialization drops exactly the
// segments whose LastSeq is below TruncateBefore; one ending at it, or
// straddling it, stays.
func TestMaterializeTruncationBoundary(t *testing.T) {
	const tb = 100
	m := Manifest{Bases: []Base{{Key: "base1", Length: 10}}, Segments: []Segment{
		seg("log", 0, 1, 1, tb-1),     // below: truncated
		seg("log", 1, 1, tb-1, tb-1),  // below: truncated
		seg("log", 2, 1, tb-5, tb),    // ends at TruncateBefore: stays
		seg("log", 3, 1, tb-5, tb+5),  // straddles: stays
		seg("log", 4, 1, tb, tb),      // at: stays
		seg("log", 5, 1, tb+1, tb+10), // above: stays
	}}
	got, err := Apply(m, Delta{Materialize: &Materialization{Bases: []Base{{Key: "base2", Length: 20}}, TruncateBefore: tb}})
	if err != nil {
		t.Fatal(err)
	}
	want := Manifest{Bases: []Base{{Key: "base2", Length: 20}}, Segments: m.Segments[2:]}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("materialized at %d:\n got %+v\nwant %+v", tb, got, want)
	}
	// TruncateBefore 0 truncates nothing, whatever the sequence numbers.
	got, err = Apply(Manifest{Segments: []Segment{seg("log", 0, 1, 0, 0)}}, Delta{Materialize: &Materialization{}})
	if err != nil || len(got.Segments) != 1 {
		t.Fatalf("materialization at 0: %+v, %v", got, err)
	}
}

// TestReaddTruncatedSegment: a delta may add back, at the same key and
// offset, a segment its own materialization truncated (materialize, then
// drops, then additions), as it may one it drops explicitly.
func TestReaddTruncatedSegment(t *testing.T) {
	m := Manifest{Segments: []Segment{seg("log", 0, 10, 1, 5), seg("log", 10, 10, 6, 9)}}
	again := seg("log", 0, 4, 20, 21)
	got, err := Apply(m, Delta{Materialize: &Materialization{Bases: []Base{{Key: "b", Length: 1}}, TruncateBefore: 6}, AddSegments: []Segment{again}})
	if err != nil {
		t.Fatalf("re-adding a truncated segment: %v", err)
	}
	if want := []Segment{again, seg("log", 10, 10, 6, 9)}; !reflect.DeepEqual(got.Segments, want) {
		t.Fatalf("segments %+v, want %+v", got.Segments, want)
	}
	got, err = Apply(m, Delta{DropSegments: []Ref{{"log", 10}}, AddSegments: []Segment{seg("log", 10, 1, 7, 7)}})
	if err != nil || !reflect.DeepEqual(got.Segments, []Segment{seg("log", 0, 10, 1, 5), seg("log", 10, 1, 7, 7)}) {
		t.Fatalf("replacing a dropped segment: %+v, %v", got, err)
	}
}

// failView is a View whose one method fails, as the state machine's does
// on a read error.
type failView struct {
	memView
	fail string
}

var errView = errors.New("view read failed")

func (v failView) HasSegment(r Ref) (bool, error) {
	if v.fail == "HasSegment" {
		return false, errView
	}
	return v.memView.HasSegment(r)
}

func (v failView) HasBase(r Ref) (bool, error) {
	if v.fail == "HasBase" {
		return false, errView
	}
	return v.memView.HasBase(r)
}

func (v failView) SegmentsBefore(seq uint64, fn func(Segment) error) error {
	if v.fail == "SegmentsBefore" {
		return errView
	}
	return v.memView.SegmentsBefore(seq, fn)
}

func (v failView) Bases(fn func(Base) error) error {
	if v.fail == "Bases" {
		return errView
	}
	return v.memView.Bases(fn)
}

// TestPlanReturnsViewErrors: Plan stops at the first read error of its
// View and returns it (not a rule violation, no change), for each kind
// of read it makes.
func TestPlanReturnsViewErrors(t *testing.T) {
	m := Manifest{Bases: []Base{{Key: "b", Length: 1}}, Segments: []Segment{seg("log", 0, 1, 1, 1)}}
	cases := []struct {
		fail string
		d    Delta
	}{
		{"Bases", Delta{Materialize: &Materialization{TruncateBefore: 5}}},
		{"SegmentsBefore", Delta{Materialize: &Materialization{TruncateBefore: 5}}},
		{"HasSegment", Delta{DropSegments: []Ref{{"log", 0}}}},
		{"HasSegment", Delta{AddSegments: []Segment{seg("log", 1, 1, 2, 2)}}},
		{"HasBase", Delta{AddSegments: []Segment{seg("log", 1, 1, 2, 2)}}},
		{"HasSegment", Delta{Materialize: &Materialization{Bases: []Base{{Key: "c", Length: 1}}}}},
	}
	for _, tc := range cases {
		if _, err := Plan(memView{m}, tc.d); err != nil {
			t.Fatalf("%+v on a working view: %v", tc.d, err)
		}
		c, err := Plan(failView{memView{m}, tc.fail}, tc.d)
		if !errors.Is(err, errView) || !reflect.DeepEqual(c, Change{}) {
			t.Errorf("%s failing, delta %+v: %+v, %v; want the view's error", tc.fail, tc.d, c, err)
		}
	}
}

// TestCheckRangesEveryReference: new bases are checked as segments are, a
// blob whose size is unknown refuses the reference with size's error, and
// a range near 2^64 does not wrap around.
func TestCheckRangesEveryReference(t *testing.T) {
	errUnknown := errors.New("no such blob")
	size := func(key string) (uint64, error) {
		switch key {
		case "small":
			return 10, nil
		case "huge":
			return ^uint64(0), nil
		}
		return 0, errUnknown
	}
	ok := []Change{
		{AddBases: []Base{{Key: "small", Offset: 0, Length: 10}}},
		{AddBases: []Base{{Key: "small", Offset: 9, Length: 1}}},
		{AddSegments: []Segment{seg("huge", ^uint64(0)-1, 1, 1, 1)}},
	}
	for _, c := range ok {
		if err := c.CheckRanges(size); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	out := []Change{
		{AddBases: []Base{{Key: "small", Offset: 0, Length: 11}}},
		{AddBases: []Base{{Key: "small", Offset: 10, Length: 1}}},
		{AddBases: []Base{{Key: "small", Offset: 1, Length: ^uint64(0)}}},
		{AddSegments: []Segment{seg("small", 5, ^uint64(0)-2, 1, 1)}},
		{AddSegments: []Segment{seg("huge", ^uint64(0), 1, 1, 1)}},
		{AddSegments: []Segment{seg("huge", 2, ^uint64(0)-1, 1, 1)}},
	}
	for _, c := range out {
		if err := c.CheckRanges(size); code(err) != CodeOutOfRange {
			t.Errorf("%+v: %v, want %s", c, err, CodeOutOfRange)
		}
	}
	for _, c := range []Change{{AddBases: []Base{{Key: "gone", Length: 1}}}, {AddSegments: []Segment{seg("gone", 0, 1, 1, 1)}}} {
		if err := c.CheckRanges(size); !errors.Is(err, errUnknown) {
			t.Errorf("%+v: %v, want size's error", c, err)
		}
	}
}

// TestDiffMinimal: Diff of a manifest and itself, or of one whose bases
// and segments are only listed in another order, is the empty delta; a
// changed segment is dropped and added back; the lists come in canonical
// order.
func TestDiffMinimal(t *testing.T) {
	m := Manifest{
		Bases:    []Base{{Key: "b2", Length: 1}, {Key: "b1", Length: 2}},
		Segments: []Segment{seg("log", 20, 1, 3, 3), seg("log", 0, 1, 1, 1), seg("a", 5, 1, 2, 2)},
	}
	shuffled := Manifest{Bases: slices.Clone(m.Bases), Segments: slices.Clone(m.Segments)}
	slices.Reverse(shuffled.Bases)
	slices.Reverse(shuffled.Segments)
	for _, next := range []Manifest{m, shuffled} {
		if d := Diff(m, next); d.Size() != 0 || d.Materialize != nil {
			t.Errorf("Diff of the same manifest: %+v", d)
		}
	}
	next := Manifest{Bases: m.Bases, Segments: []Segment{seg("z", 0, 1, 9, 9), seg("log", 20, 7, 3, 4), seg("b", 0, 1, 8, 8), seg("log", 0, 1, 1, 1)}}
	d := Diff(m, next)
	if d.Materialize != nil {
		t.Errorf("unchanged bases materialized: %+v", d.Materialize)
	}
	if want := []Ref{{"a", 5}, {"log", 20}}; !reflect.DeepEqual(d.DropSegments, want) {
		t.Errorf("drops %v, want %v", d.DropSegments, want)
	}
	if want := []Segment{seg("b", 0, 1, 8, 8), seg("log", 20, 7, 3, 4), seg("z", 0, 1, 9, 9)}; !reflect.DeepEqual(d.AddSegments, want) {
		t.Errorf("additions %+v, want %+v", d.AddSegments, want)
	}
}

// TestFullDelta: Full carries the bases as a materialization only when
// there are bases, and every segment as an addition.
func TestFullDelta(t *testing.T) {
	m := Manifest{Bases: []Base{{Key: "b", Length: 1}, {Key: "b", Offset: 1, Length: 1}}, Segments: []Segment{seg("s", 0, 1, 1, 1)}}
	d := Full(m)
	if d.Materialize == nil || !reflect.DeepEqual(d.Materialize.Bases, m.Bases) || d.Materialize.TruncateBefore != 0 || !reflect.DeepEqual(d.AddSegments, m.Segments) || d.DropSegments != nil {
		t.Fatalf("Full(%+v) = %+v", m, d)
	}
	if d := Full(Manifest{Segments: m.Segments}); d.Materialize != nil {
		t.Fatalf("Full of a manifest without bases materializes: %+v", d.Materialize)
	}
}
