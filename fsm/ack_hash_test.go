package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/metastore/metastore/manifests"
)

// legacyContentHash is contentHash as it was written with fmt and
// json.Marshal: the value stored in the acks of earlier builds.
func legacyContentHash(p *TaskAck) string {
	h := sha256.New()
	for _, k := range sortedKinds(p.Payloads) {
		fmt.Fprintf(h, "%s:%d:", k, len(p.Payloads[k]))
		h.Write(p.Payloads[k])
	}
	if p.Manifest != nil {
		raw, _ := json.Marshal(p.Manifest)
		fmt.Fprintf(h, "manifest:%d:", len(raw))
		h.Write(raw)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// hashStrings are the strings random manifests are made of: plain keys,
// and every kind of character json.Marshal escapes or replaces.
var hashStrings = []string{
	"", "j/t/0001", "a", "job-1/task_2/x.y", "<", "a>b", "x&y", `q"uote`, `back\slash`,
	"tab\t", "nl\n", "\x00\x1f", "\x7f", "é", "日本", "\u2028\u2029", "\xff\xfe", "a\xc3", "\U0001F600",
}

// randomFill sets v (addressable) to a random value of its type: pointers
// and slices nil, empty or filled, strings from hashStrings, integers
// small or large.
func randomFill(t *testing.T, r *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if r.IntN(3) == 0 {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		randomFill(t, r, v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				randomFill(t, r, v.Field(i))
			}
		}
	case reflect.Slice:
		switch r.IntN(4) {
		case 0: // nil
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			n := 1 + r.IntN(4)
			s := reflect.MakeSlice(v.Type(), n, n)
			for i := range n {
				randomFill(t, r, s.Index(i))
			}
			v.Set(s)
		}
	case reflect.String:
		v.SetString(hashStrings[r.IntN(len(hashStrings))] + hashStrings[r.IntN(len(hashStrings))])
	case reflect.Uint64:
		v.SetUint([]uint64{0, 1, uint64(r.IntN(1 << 20)), r.Uint64(), math.MaxUint64}[r.IntN(5)])
	default:
		t.Fatalf("a %s field in a manifest: teach randomFill and appendManifestJSON", v.Type())
	}
}

// TestManifestJSONMatchesMarshal: appendManifestJSON writes what
// json.Marshal writes, byte for byte, for a manifest with every field set
// and for 3,000 random ones (nil, empty and filled lists, strings that
// need escaping), and contentHash is the value earlier builds stored.
func TestManifestJSONMatchesMarshal(t *testing.T) {
	full := &ManifestAck{}
	fillRecord(t, reflect.ValueOf(full).Elem(), "ManifestAck")
	cases := []*ManifestAck{full, {}}
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		m := &ManifestAck{}
		randomFill(t, r, reflect.ValueOf(m).Elem())
		cases = append(cases, m)
	}
	for i, m := range cases {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendManifestJSON(nil, m); string(got) != string(want) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
		p := &TaskAck{Manifest: m}
		if i%2 == 0 {
			p.Payloads = map[Kind][]byte{"state": []byte("s"), "input": {}, "output": []byte(hashStrings[i%len(hashStrings)])}
		}
		if got, want := p.contentHash(), legacyContentHash(p); got != want {
			t.Fatalf("case %d: content hash %s, earlier builds stored %s", i, got, want)
		}
	}
	p := &TaskAck{Payloads: map[Kind][]byte{"state": []byte("x")}}
	if got, want := p.contentHash(), legacyContentHash(p); got != want {
		t.Fatalf("ack without a manifest: content hash %s, earlier builds stored %s", got, want)
	}
}

// BenchmarkContentHash: an ack as the benchmark's workers send it (three
// segments, one blob committed).
func BenchmarkContentHash(b *testing.B) {
	d := &manifests.Delta{}
	for i := range 3 {
		d.AddSegments = append(d.AddSegments, manifests.Segment{Key: "tput-w64-j3/t2/0000018b2f5c3e7a9d41f0c2a8b3e5d7", Offset: uint64(i) << 20, Length: 1 << 20, FirstSeq: uint64(100 + i), LastSeq: uint64(100 + i)})
	}
	p := &TaskAck{Manifest: &ManifestAck{Delta: d, Blobs: []BlobCommit{{Key: d.AddSegments[0].Key, Size: 3 << 20}}}}
	b.Run("fields", func(b *testing.B) {
		for b.Loop() {
			p.contentHash()
		}
	})
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			legacyContentHash(p)
		}
	})
}

// TestHashesAllocateLittle: an ack's content hash, once its parts are
// written, makes two allocations (the sum, which escapes through the
// hash.Hash interface, and the string; three before), and a signed slot's
// MAC, checked for every signed key an ack commits on every member, none
// once its signer has been used (two or three before).
func TestHashesAllocateLittle(t *testing.T) {
	h := sha256.New()
	h.Write([]byte("an ack's parts"))
	if n := testing.AllocsPerRun(100, func() { _ = hexSum(h) }); n > 2 {
		t.Errorf("hexSum: %v allocations, want at most 2 (the sum and the string)", n)
	}
	want := hex.EncodeToString(h.Sum(nil))
	if got := hexSum(h); got != want {
		t.Errorf("hexSum = %s, want %s", got, want)
	}

	s := NewSlotSigner([]byte("0123456789abcdef0123456789abcdef"))
	fields := []byte("0123456789abcdef0123456789abcdef01234567")
	first := append([]byte(nil), s.sum("job", "task", fields)...)
	if n := testing.AllocsPerRun(100, func() { _ = s.sum("job", "task", fields) }); n != 0 {
		t.Errorf("SlotSigner.sum: %v allocations, want none", n)
	}
	if again := s.sum("job", "task", fields); !bytes.Equal(again, first) {
		t.Errorf("the MAC changed between calls: %x, then %x", first, again)
	}
}
