// Package manifests is the pure logic of incremental checkpoint manifests:
// what a task's state in an epoch is made of (materialized base blobs plus
// changelog segments), the delta a task acknowledges an epoch with, and the
// rules a delta must follow against the manifest it changes. It does no I/O:
// the state machine stores manifests structurally and asks this package
// whether a delta is valid and what it changes, through the View interface.
package manifests

import (
	"cmp"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"slices"
	"strings"
)

// Limits of one delta, so that the Raft entry of an ack stays small.
const (
	// MaxDeltaRefs bounds the references (segments, bases, drops) one ack
	// may carry; a whole manifest larger than this is sent over several
	// epochs or as a materialization.
	MaxDeltaRefs = 10000
	// MaxKeyLen bounds blob keys.
	MaxKeyLen = 512
)

// Error is a violation of the manifest rules. Ref names the offending
// reference (a segment as key@offset, or a blob key).
type Error struct {
	Code    string `json:"code"`
	Ref     string `json:"ref,omitempty"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	if e.Ref != "" {
		return fmt.Sprintf("%s: %s: %s", e.Code, e.Ref, e.Message)
	}
	return e.Code + ": " + e.Message
}

// Error codes.
const (
	CodeInvalid        = "invalid_manifest"
	CodeDuplicate      = "duplicate_reference"
	CodeNotInManifest  = "not_in_manifest"
	CodeAlreadyPresent = "already_in_manifest"
	CodeOutOfRange     = "out_of_range"
)

func errf(code, ref, format string, args ...any) *Error {
	return &Error{Code: code, Ref: ref, Message: fmt.Sprintf(format, args...)}
}

// ValidateKey checks a blob key: a relative path of segments made of
// [A-Za-z0-9._-], no "." or ".." segment, at most MaxKeyLen bytes.
func ValidateKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return errf(CodeInvalid, key, "a blob key must be 1 to %d bytes", MaxKeyLen)
	}
	switch verdict, seg := checkKeyPath(key); verdict {
	case keyBad:
		return errf(CodeInvalid, key, "a blob key is a relative path of segments of [A-Za-z0-9._-]")
	case keyDotSegment:
		return errf(CodeInvalid, key, "a blob key cannot contain a %q segment", seg)
	}
	return nil
}

// keyVerdict is checkKeyPath's judgement of a key.
type keyVerdict int

const (
	keyOK keyVerdict = iota
	keyBad
	keyDotSegment
)

// checkKeyPath judges key as a path: bad when a byte is outside
// [A-Za-z0-9._-] and "/" or a segment is empty (the regular expression
// ^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$, written out: every member checks
// every key an ack carries, and the expression cost 5% of applying an
// ack), else a dot segment when a segment is "." or "..", the first one
// returned.
func checkKeyPath(key string) (keyVerdict, string) {
	dot := ""
	start := 0
	for i := 0; i <= len(key); i++ {
		if i < len(key) && key[i] != '/' {
			if !keyChar(key[i]) {
				return keyBad, ""
			}
			continue
		}
		switch seg := key[start:i]; seg {
		case "":
			return keyBad, ""
		case ".", "..":
			if dot == "" {
				dot = seg
			}
		}
		start = i + 1
	}
	if dot != "" {
		return keyDotSegment, dot
	}
	return keyOK, ""
}

// keyChar reports whether c may appear in a segment of a blob key.
func keyChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}

// Segment is a range of a changelog blob holding the state changes with
// sequence numbers FirstSeq..LastSeq. A segment is identified by its blob
// key and offset: several segments (of one task or several) may share a blob.
type Segment struct {
	Key      string `json:"key"`
	Offset   uint64 `json:"offset"`
	Length   uint64 `json:"length"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// CRC32C is the worker's CRC32C (Castagnoli) of the segment's Length
	// bytes, as 8 lowercase hex digits (see CRC32C); empty if the worker
	// declared none. A restore verifies the bytes it reads against it.
	CRC32C string `json:"crc32c,omitempty"`
}

// Base is a materialized base: a range of a blob holding a full copy of the
// state as of a materialization.
type Base struct {
	Key    string `json:"key"`
	Offset uint64 `json:"offset"`
	Length uint64 `json:"length"`
	// CRC32C is as for Segment.
	CRC32C string `json:"crc32c,omitempty"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the CRC32C (Castagnoli) of b in the form of
// Segment.CRC32C: 8 lowercase hex digits.
func CRC32C(b []byte) string { return FormatCRC32C(crc32.Checksum(b, castagnoli)) }

// FormatCRC32C formats a CRC32C value as Segment.CRC32C does.
func FormatCRC32C(sum uint32) string { return fmt.Sprintf("%08x", sum) }

// ValidCRC32C reports whether s has the form of Segment.CRC32C: empty (no
// checksum declared) or 8 lowercase hex digits.
func ValidCRC32C(s string) bool {
	if s == "" {
		return true
	}
	if len(s) != 8 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Ref identifies a segment or base: its blob key and offset.
type Ref struct {
	Key    string `json:"key"`
	Offset uint64 `json:"offset"`
}

func (r Ref) String() string { return fmt.Sprintf("%s@%d", r.Key, r.Offset) }

// ID returns the reference of a segment.
func (s Segment) ID() Ref { return Ref{s.Key, s.Offset} }

// ID returns the reference of a base.
func (b Base) ID() Ref { return Ref{b.Key, b.Offset} }

// Manifest is a task's whole state in one epoch.
type Manifest struct {
	Bases    []Base    `json:"bases"`
	Segments []Segment `json:"segments"`
}

// Bytes is the number of bytes a restore of the manifest reads, or the
// largest uint64 when that does not fit.
func (m Manifest) Bytes() uint64 {
	var n uint64
	add := func(length uint64) {
		if sum, carry := bits.Add64(n, length, 0); carry != 0 {
			n = math.MaxUint64
		} else {
			n = sum
		}
	}
	for _, b := range m.Bases {
		add(b.Length)
	}
	for _, s := range m.Segments {
		add(s.Length)
	}
	return n
}

// Blobs lists the distinct blob keys of the manifest, sorted.
func (m Manifest) Blobs() []string {
	var keys []string
	for _, b := range m.Bases {
		keys = append(keys, b.Key)
	}
	for _, s := range m.Segments {
		keys = append(keys, s.Key)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// Sort orders bases and segments by key and offset, the canonical order.
func (m *Manifest) Sort() {
	slices.SortFunc(m.Bases, func(a, b Base) int { return cmpRef(a.ID(), b.ID()) })
	slices.SortFunc(m.Segments, func(a, b Segment) int { return cmpRef(a.ID(), b.ID()) })
}

func cmpRef(a, b Ref) int {
	if c := strings.Compare(a.Key, b.Key); c != 0 {
		return c
	}
	return cmp.Compare(a.Offset, b.Offset)
}

// Materialization replaces the bases and truncates the changelog: every
// segment whose LastSeq is below TruncateBefore is dropped with the old
// bases, and Bases become the new bases.
type Materialization struct {
	Bases          []Base `json:"bases"`
	TruncateBefore uint64 `json:"truncate_before"`
}

// Delta is what a task acknowledges an epoch with: the change from its
// previous manifest. A materialization is applied first, then the drops,
// then the additions.
type Delta struct {
	Materialize  *Materialization `json:"materialize,omitempty"`
	DropSegments []Ref            `json:"drop_segments,omitempty"`
	AddSegments  []Segment        `json:"add_segments,omitempty"`
}

// Size is the number of references the delta carries.
func (d Delta) Size() int {
	n := len(d.DropSegments) + len(d.AddSegments)
	if d.Materialize != nil {
		n += len(d.Materialize.Bases)
	}
	return n
}

// Validate checks the delta on its own: keys, ranges, duplicates, limits.
func (d Delta) Validate() error {
	if d.Size() > MaxDeltaRefs {
		return errf(CodeInvalid, "", "a delta carries at most %d references, this one %d", MaxDeltaRefs, d.Size())
	}
	seen := map[Ref]bool{}
	if m := d.Materialize; m != nil {
		for _, b := range m.Bases {
			if err := ValidateKey(b.Key); err != nil {
				return err
			}
			if b.Length == 0 {
				return errf(CodeInvalid, b.ID().String(), "a base has a positive length")
			}
			if !ValidCRC32C(b.CRC32C) {
				return errf(CodeInvalid, b.ID().String(), "crc32c %q is not 8 lowercase hex digits", b.CRC32C)
			}
			if seen[b.ID()] {
				return errf(CodeDuplicate, b.ID().String(), "base listed twice")
			}
			seen[b.ID()] = true
		}
	}
	drops := map[Ref]bool{}
	for _, r := range d.DropSegments {
		if err := ValidateKey(r.Key); err != nil {
			return err
		}
		if drops[r] {
			return errf(CodeDuplicate, r.String(), "segment dropped twice")
		}
		drops[r] = true
	}
	for _, s := range d.AddSegments {
		if err := ValidateKey(s.Key); err != nil {
			return err
		}
		if s.Length == 0 {
			return errf(CodeInvalid, s.ID().String(), "a segment has a positive length")
		}
		if s.FirstSeq > s.LastSeq {
			return errf(CodeInvalid, s.ID().String(), "first_seq %d is above last_seq %d", s.FirstSeq, s.LastSeq)
		}
		if !ValidCRC32C(s.CRC32C) {
			return errf(CodeInvalid, s.ID().String(), "crc32c %q is not 8 lowercase hex digits", s.CRC32C)
		}
		if seen[s.ID()] {
			return errf(CodeDuplicate, s.ID().String(), "segment added twice, or at the offset of a new base")
		}
		seen[s.ID()] = true
	}
	return nil
}

// Full is the delta that turns an empty manifest into m: a task without the
// incremental flag sends its whole manifest, which is this.
func Full(m Manifest) Delta {
	d := Delta{AddSegments: slices.Clone(m.Segments)}
	if len(m.Bases) > 0 {
		d.Materialize = &Materialization{Bases: slices.Clone(m.Bases)}
	}
	return d
}

// Diff returns the delta that turns prev into next, for a worker that keeps
// its manifest whole: bases that change make a materialization (with
// TruncateBefore 0: segments no longer in next are dropped explicitly).
func Diff(prev, next Manifest) Delta {
	var d Delta
	if !slices.Equal(sortedBases(prev.Bases), sortedBases(next.Bases)) {
		d.Materialize = &Materialization{Bases: slices.Clone(next.Bases)}
	}
	in := map[Ref]Segment{}
	for _, s := range next.Segments {
		in[s.ID()] = s
	}
	was := map[Ref]Segment{}
	for _, s := range prev.Segments {
		was[s.ID()] = s
		if n, ok := in[s.ID()]; !ok || n != s {
			d.DropSegments = append(d.DropSegments, s.ID())
		}
	}
	for _, s := range next.Segments {
		if p, ok := was[s.ID()]; !ok || p != s {
			d.AddSegments = append(d.AddSegments, s)
		}
	}
	slices.SortFunc(d.DropSegments, cmpRef)
	slices.SortFunc(d.AddSegments, func(a, b Segment) int { return cmpRef(a.ID(), b.ID()) })
	return d
}

func sortedBases(bs []Base) []Base {
	out := slices.Clone(bs)
	slices.SortFunc(out, func(a, b Base) int { return cmpRef(a.ID(), b.ID()) })
	return out
}

// View is read access to the manifest a delta applies to, as the state
// machine stores it.
type View interface {
	// HasSegment reports whether the manifest holds the segment.
	HasSegment(r Ref) (bool, error)
	// HasBase reports whether the manifest holds a base at r.
	HasBase(r Ref) (bool, error)
	// SegmentsBefore calls fn for every segment of the manifest whose
	// LastSeq is below seq.
	SegmentsBefore(seq uint64, fn func(Segment) error) error
	// Bases calls fn for every base of the manifest.
	Bases(fn func(Base) error) error
}

// Change is what a delta does to the stored manifest: references removed
// and added. Its cost is proportional to the delta (and, for a
// materialization, to the changelog it truncates), never to the manifest.
type Change struct {
	DropBases    []Base
	DropSegments []Ref
	AddBases     []Base
	AddSegments  []Segment
}

// Plan checks d against the manifest seen through v and returns the change
// to store. d must have passed Validate. The manifest it leaves holds each
// reference once, as Validate asks of a whole one: an added segment at a
// base the manifest keeps, or a materialization's base at a segment it
// keeps, is refused (already_in_manifest).
func Plan(v View, d Delta) (Change, error) { return plan(v, d, true) }

// PlanSharingRefs is Plan without the rule that keeps a base and a segment
// off one reference: the rules the state machine applied to acks before
// task-ack version 4, kept so that the entries written under them replay
// as they were applied. Nothing else calls it.
func PlanSharingRefs(v View, d Delta) (Change, error) { return plan(v, d, false) }

func plan(v View, d Delta, distinct bool) (Change, error) {
	var c Change
	truncated := map[Ref]bool{}
	if m := d.Materialize; m != nil {
		if err := v.Bases(func(b Base) error { c.DropBases = append(c.DropBases, b); return nil }); err != nil {
			return Change{}, err
		}
		err := v.SegmentsBefore(m.TruncateBefore, func(s Segment) error {
			truncated[s.ID()] = true
			c.DropSegments = append(c.DropSegments, s.ID())
			return nil
		})
		if err != nil {
			return Change{}, err
		}
		c.AddBases = slices.Clone(m.Bases)
	}
	for _, r := range d.DropSegments {
		if truncated[r] {
			return Change{}, errf(CodeNotInManifest, r.String(), "segment already truncated by this delta's materialization")
		}
		ok, err := v.HasSegment(r)
		if err != nil {
			return Change{}, err
		}
		if !ok {
			return Change{}, errf(CodeNotInManifest, r.String(), "dropped segment is not in the manifest")
		}
		c.DropSegments = append(c.DropSegments, r)
	}
	dropped := map[Ref]bool{}
	for _, r := range c.DropSegments {
		dropped[r] = true
	}
	for _, s := range d.AddSegments {
		if !dropped[s.ID()] {
			ok, err := v.HasSegment(s.ID())
			if err != nil {
				return Change{}, err
			}
			if ok {
				return Change{}, errf(CodeAlreadyPresent, s.ID().String(), "added segment is already in the manifest")
			}
		}
		c.AddSegments = append(c.AddSegments, s)
	}
	if distinct {
		if err := checkDistinct(v, d, dropped); err != nil {
			return Change{}, err
		}
	}
	return c, nil
}

// checkDistinct refuses a delta that leaves a base and a segment at one
// reference: without a materialization, an added segment at a present
// base; with one, a new base at a present segment the delta keeps (not
// truncated, not dropped). Validate has checked the delta's own
// references against each other. It looks up each reference the delta
// adds, never the whole manifest.
func checkDistinct(v View, d Delta, dropped map[Ref]bool) error {
	if m := d.Materialize; m != nil {
		for _, b := range m.Bases {
			if dropped[b.ID()] {
				continue
			}
			ok, err := v.HasSegment(b.ID())
			if err != nil {
				return err
			}
			if ok {
				return errf(CodeAlreadyPresent, b.ID().String(), "new base is at a segment the manifest keeps")
			}
		}
		return nil
	}
	for _, s := range d.AddSegments {
		ok, err := v.HasBase(s.ID())
		if err != nil {
			return err
		}
		if ok {
			return errf(CodeAlreadyPresent, s.ID().String(), "added segment is at a base of the manifest")
		}
	}
	return nil
}

// CheckRanges checks every added reference against the size of its blob;
// size returns the blob's size or an error for a blob that cannot be
// referenced.
func (c Change) CheckRanges(size func(key string) (uint64, error)) error {
	check := func(ref Ref, length uint64) error {
		n, err := size(ref.Key)
		if err != nil {
			return err
		}
		if ref.Offset > n || length > n-ref.Offset {
			return errf(CodeOutOfRange, ref.String(), "range of %d bytes at offset %d is past the end of the %d-byte blob", length, ref.Offset, n)
		}
		return nil
	}
	for _, b := range c.AddBases {
		if err := check(b.ID(), b.Length); err != nil {
			return err
		}
	}
	for _, s := range c.AddSegments {
		if err := check(s.ID(), s.Length); err != nil {
			return err
		}
	}
	return nil
}

// Apply applies a delta to a whole in-memory manifest, with the same rules
// as Plan: the reference implementation, used by clients that keep their
// manifest and by tests.
func Apply(m Manifest, d Delta) (Manifest, error) {
	if err := d.Validate(); err != nil {
		return Manifest{}, err
	}
	v := memView{m}
	c, err := Plan(v, d)
	if err != nil {
		return Manifest{}, err
	}
	out := Manifest{}
	dropB := map[Ref]bool{}
	for _, b := range c.DropBases {
		dropB[b.ID()] = true
	}
	for _, b := range m.Bases {
		if !dropB[b.ID()] {
			out.Bases = append(out.Bases, b)
		}
	}
	out.Bases = append(out.Bases, c.AddBases...)
	dropS := map[Ref]bool{}
	for _, r := range c.DropSegments {
		dropS[r] = true
	}
	for _, s := range m.Segments {
		if !dropS[s.ID()] {
			out.Segments = append(out.Segments, s)
		}
	}
	out.Segments = append(out.Segments, c.AddSegments...)
	out.Sort()
	return out, nil
}

type memView struct{ m Manifest }

func (v memView) HasSegment(r Ref) (bool, error) {
	return slices.ContainsFunc(v.m.Segments, func(s Segment) bool { return s.ID() == r }), nil
}

func (v memView) HasBase(r Ref) (bool, error) {
	return slices.ContainsFunc(v.m.Bases, func(b Base) bool { return b.ID() == r }), nil
}

func (v memView) SegmentsBefore(seq uint64, fn func(Segment) error) error {
	for _, s := range v.m.Segments {
		if s.LastSeq < seq {
			if err := fn(s); err != nil {
				return err
			}
		}
	}
	return nil
}

func (v memView) Bases(fn func(Base) error) error {
	for _, b := range v.m.Bases {
		if err := fn(b); err != nil {
			return err
		}
	}
	return nil
}

// IsError reports whether err is a manifest rule violation.
func IsError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
