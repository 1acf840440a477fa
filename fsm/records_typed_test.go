package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/metastore/metastore/manifests"
)

// TestTypedRecordsAgainstBuckets applies the same random writes of lineage
// records and changes through the txn's accessors to a state whose
// records are typed (records_typed.go) and to one whose records are in
// the buckets, and compares every read the lineage code makes (a record,
// a kind's present records at an epoch, the changes in a range of
// epochs), prefix scans of both buckets as the cold readers make them,
// and at the end both buckets whole.
func TestTypedRecordsAgainstBuckets(t *testing.T) {
	plain := &txn{mem: newMemState()}
	typed := &txn{mem: newMemState(), recsTyped: newTypedRecords()}
	r := rand.New(rand.NewPCG(21, 22))
	keys := []string{"j/a/1", "j/a/10", "j/a/2", "j/b", "j/b/x", "k/0"}
	kinds := []byte{kindBase, kindSegment}
	both := func(fn func(t *txn) error) {
		t.Helper()
		for _, x := range []*txn{plain, typed} {
			if err := fn(x); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 20_000 {
		lid := uint64(1 + r.IntN(4))
		kind := kinds[r.IntN(2)]
		ref := manifests.Ref{Key: keys[r.IntN(len(keys))], Offset: uint64(r.IntN(3)) * 100}
		epoch := uint64(1 + r.IntN(12))
		where := fmt.Sprintf("step %d (lineage %d, %c %s, epoch %d)", i, lid, kind, ref, epoch)
		switch op := r.IntN(10); op {
		case 0, 1:
			rec := record{Length: uint64(r.IntN(1000)), FirstSeq: uint64(r.IntN(50)), LastSeq: uint64(50 + r.IntN(50)), Added: epoch}
			if r.IntN(3) == 0 {
				rec.Dropped = epoch + uint64(1+r.IntN(4))
			}
			if r.IntN(2) == 0 {
				rec.CRC32C = fmt.Sprintf("%08x", r.Uint32())
			}
			both(func(t *txn) error { return t.putRec(lid, kind, ref, &rec) })
		case 2:
			both(func(t *txn) error { return t.delRec(lid, kind, ref) })
		case 3:
			o := []byte{opAdd, opDrop}[r.IntN(2)]
			both(func(t *txn) error { return t.putChange(lid, epoch, o, kind, ref) })
		case 4:
			o := []byte{opAdd, opDrop}[r.IntN(2)]
			both(func(t *txn) error { return t.delChange(lid, epoch, o, kind, ref) })
		case 5:
			a, err := plain.record(lid, kind, ref)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := typed.record(lid, kind, ref)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%s: record %+v in the buckets, %+v typed", where, a, b)
			}
		case 6:
			at := uint64(r.IntN(14))
			var got [2][]string
			for j, x := range []*txn{plain, typed} {
				err := lineageView{t: x, lid: lid, at: at}.each(kind, func(ref manifests.Ref, rec *record) error {
					got[j] = append(got[j], fmt.Sprintf("%s=%+v", ref, *rec))
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(got[0], got[1]) {
				t.Fatalf("%s: the %c records present at %d: %v in the buckets, %v typed", where, kind, at, got[0], got[1])
			}
		case 7:
			from, to := uint64(r.IntN(12)), uint64(r.IntN(14))
			a, err := changesAfter(plain, lid, from, to)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := changesAfter(typed, lid, from, to)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%s: changes in (%d, %d]: %v in the buckets, %v typed", where, from, to, a, b)
			}
		default:
			name := []bucket{bucketRecords, bucketRecChanges}[r.IntN(2)]
			prefixes := [][]byte{nil, u64(lid), append(u64(lid), kind), append(append(append(u64(lid), kind), ref.Key...), 0), append(u64(lid), u64(epoch)...)}
			prefix := prefixes[r.IntN(len(prefixes))]
			if got, want := scanAll(t, typed, name, prefix), scanAll(t, plain, name, prefix); !slices.EqualFunc(got, want, bytes.Equal) {
				t.Fatalf("%s: scan of %s from %x: %q typed, %q in the bucket", where, name, prefix, got, want)
			}
		}
	}
	for _, name := range []bucket{bucketRecords, bucketRecChanges} {
		got, want := scanAll(t, typed, name, nil), scanAll(t, plain, name, nil)
		if !slices.EqualFunc(got, want, bytes.Equal) || len(want) < 20 {
			t.Fatalf("%s: %d keys and values typed, %d in the bucket, or they differ", name, len(got)/2, len(want)/2)
		}
		if a, b := typed.b(name).KeyN(), plain.b(name).KeyN(); a != b {
			t.Fatalf("%s: %d keys typed, %d in the bucket", name, a, b)
		}
	}
}

func scanAll(t *testing.T, x *txn, name bucket, prefix []byte) [][]byte {
	t.Helper()
	var out [][]byte
	if err := x.scan(name, prefix, func(k, v []byte) (bool, error) {
		out = append(out, bytes.Clone(k), bytes.Clone(v))
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
