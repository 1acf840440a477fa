package manifests

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

// fuzzKeys are the blob keys the fuzz generator picks from: a few valid
// ones, so references collide, and invalid ones.
var fuzzKeys = []string{"a", "b", "j/t/log-1", "j/t/base-1", "", "../x", "a/./b", "/abs", `a\b`, "a\x00b", "ａ"}

// gen turns fuzz bytes into manifests and deltas.
type gen struct{ b []byte }

func (g *gen) byte() byte {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return c
}

func (g *gen) small() uint64 { return uint64(g.byte() % 8) }

// num is small most of the time, and sometimes near the uint64 edges.
func (g *gen) num() uint64 {
	switch c := g.byte(); {
	case c < 0xf0:
		return uint64(c % 16)
	case c < 0xf8:
		return ^uint64(0) - uint64(c%8)
	default:
		return 1 << 63
	}
}

func (g *gen) key() string { return fuzzKeys[int(g.byte())%len(fuzzKeys)] }

func (g *gen) segment() Segment {
	s := Segment{Key: g.key(), Offset: g.small() * 10, Length: g.num(), FirstSeq: g.num()}
	s.LastSeq = s.FirstSeq + g.small()
	if g.byte()%16 == 0 {
		s.LastSeq = g.num()
	}
	return s
}

func (g *gen) base() Base { return Base{Key: g.key(), Offset: g.small() * 10, Length: g.num()} }

func (g *gen) manifest() Manifest {
	var m Manifest
	for n := g.small(); n > 0; n-- {
		m.Bases = append(m.Bases, g.base())
	}
	for n := g.byte() % 12; n > 0; n-- {
		m.Segments = append(m.Segments, g.segment())
	}
	return m
}

func (g *gen) delta() Delta {
	var d Delta
	if g.byte()%3 == 0 {
		d.Materialize = &Materialization{TruncateBefore: g.num()}
		for n := g.small(); n > 0; n-- {
			d.Materialize.Bases = append(d.Materialize.Bases, g.base())
		}
	}
	for n := g.small(); n > 0; n-- {
		d.DropSegments = append(d.DropSegments, Ref{Key: g.key(), Offset: g.small() * 10})
	}
	for n := g.small(); n > 0; n-- {
		d.AddSegments = append(d.AddSegments, g.segment())
	}
	return d
}

// wellFormed reports whether m is a manifest a worker can send whole
// (Validate(Full(m)) holds): every reference valid and listed once, bases
// and segments together.
func wellFormed(m Manifest) bool {
	seen := map[Ref]bool{}
	for _, b := range m.Bases {
		if ValidateKey(b.Key) != nil || b.Length == 0 || seen[b.ID()] {
			return false
		}
		seen[b.ID()] = true
	}
	for _, s := range m.Segments {
		if ValidateKey(s.Key) != nil || s.Length == 0 || s.FirstSeq > s.LastSeq || seen[s.ID()] {
			return false
		}
		seen[s.ID()] = true
	}
	return true
}

func uniqueSegments(m Manifest) bool {
	seen := map[Ref]bool{}
	for _, s := range m.Segments {
		if seen[s.ID()] {
			return false
		}
		seen[s.ID()] = true
	}
	return true
}

// FuzzDelta applies arbitrary deltas to arbitrary manifests. Nothing
// panics; a refusal is a coded *Error; an accepted delta to a well-formed
// manifest yields a well-formed manifest (no reference twice, a base and a
// segment included) holding every added segment and
// no dropped one that was not added back, through Plan exactly as through
// Apply; and Diff of two well-formed manifests is a valid delta that Apply
// turns the first into the second.
func FuzzDelta(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 1, 3, 2, 5, 1, 0, 0, 1, 1, 0, 1, 2, 3, 0, 0, 1, 2, 1, 0, 2, 0, 3, 1, 4, 1, 1, 1, 2, 0})
	f.Add([]byte{2, 3, 2, 1, 5, 0, 0, 3, 0, 1, 2, 0, 4, 2, 2, 3, 1, 1, 0, 9, 1, 1, 2, 0, 1, 2, 0, 0, 1, 3, 2, 1, 0xf3, 0xff})
	f.Add([]byte("\x03\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &gen{b: data}
		prev, next := g.manifest(), g.manifest()
		d := g.delta()

		// An arbitrary delta against an arbitrary manifest.
		verr := d.Validate()
		out, err := Apply(prev, d)
		if err != nil {
			var e *Error
			if !IsError(err) || !errorsAs(err, &e) || e.Code == "" {
				t.Fatalf("refusal %T %v is not a coded manifest error", err, err)
			}
		} else {
			if verr != nil {
				t.Fatalf("Apply accepted a delta Validate refuses: %v", verr)
			}
			if wellFormed(prev) {
				if !wellFormed(out) {
					t.Fatalf("accepted delta made a malformed manifest:\nprev %+v\ndelta %+v\nout %+v", prev, d, out)
				}
				for _, s := range d.AddSegments {
					if !slices.Contains(out.Segments, s) {
						t.Fatalf("added segment %v missing from %+v", s.ID(), out)
					}
				}
				for _, r := range d.DropSegments {
					if slices.ContainsFunc(out.Segments, func(s Segment) bool { return s.ID() == r }) &&
						!slices.ContainsFunc(d.AddSegments, func(s Segment) bool { return s.ID() == r }) {
						t.Fatalf("dropped segment %v still in %+v", r, out)
					}
				}
				if d.Materialize != nil && !reflect.DeepEqual(sortedBases(out.Bases), sortedBases(d.Materialize.Bases)) {
					t.Fatalf("materialized bases %+v, want %+v", out.Bases, d.Materialize.Bases)
				}
			}
			if !uniqueSegments(out) && uniqueSegments(prev) {
				t.Fatalf("accepted delta duplicated a segment: %+v", out)
			}
		}
		// Through JSON, as a delta travels in a request and a log entry.
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back Delta
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		if (back.Validate() == nil) != (verr == nil) {
			t.Fatalf("a delta validates differently after a JSON round trip: %v vs %v", back.Validate(), verr)
		}

		// The reference model: Diff then Apply gives the target.
		if wellFormed(prev) && wellFormed(next) {
			diff := Diff(prev, next)
			if err := diff.Validate(); err != nil {
				if diff.Size() > MaxDeltaRefs {
					return
				}
				t.Fatalf("Diff made an invalid delta: %v\nprev %+v\nnext %+v\ndiff %+v", err, prev, next, diff)
			}
			got, err := Apply(prev, diff)
			if err != nil {
				t.Fatalf("Apply(prev, Diff(prev, next)): %v\nprev %+v\nnext %+v\ndiff %+v", err, prev, next, diff)
			}
			want := next
			want.Sort()
			if !reflect.DeepEqual(norm(got), norm(want)) {
				t.Fatalf("Apply(prev, Diff(prev, next)) != next:\nprev %+v\nnext %+v\ndiff %+v\ngot  %+v", prev, next, diff, got)
			}
		}
	})
}

func errorsAs(err error, target **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*target = e
	}
	return ok
}
