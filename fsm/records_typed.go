package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/tidwall/btree"

	"github.com/metastore/metastore/manifests"
)

// typedRecords holds the lineage records and their changes decoded, by
// lineage, in place of the records and rec_changes buckets: the second
// typed structure of the planned state layer (DESIGN.md), after the blobs
// (blob_typed.go). A transaction that has one (txn.recsTyped) reads and
// writes records and changes through it without building, encoding or
// comparing byte keys (lineage.go, lineage_apply.go, lineage_release.go,
// lineage_view.go); the other readers of the two buckets (scans, the
// state hash, dumps) see them as buckets of encoded keys and records in
// key order (typedRecordsBucket, typedChangesBucket). Only ApplyInMemory
// uses it, as the typed blobs.
type typedRecords struct {
	m map[uint64]*lineageRecs
}

// lineageRecs is one lineage's records, in the order of their keys (kind,
// blob key, offset), and its changes (epoch, op, kind, blob key, offset).
type lineageRecs struct {
	recs    *btree.BTreeG[recItem]
	changes *btree.BTreeG[changeItem]
}

type recItem struct {
	kind byte
	ref  manifests.Ref
	r    record
}

type changeItem struct {
	epoch    uint64
	op, kind byte
	ref      manifests.Ref
}

func cmpRef(a, b manifests.Ref) int {
	if c := strings.Compare(a.Key, b.Key); c != 0 {
		return c
	}
	switch {
	case a.Offset < b.Offset:
		return -1
	case a.Offset > b.Offset:
		return 1
	}
	return 0
}

func recLess(a, b recItem) bool {
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return cmpRef(a.ref, b.ref) < 0
}

func changeLess(a, b changeItem) bool {
	switch {
	case a.epoch != b.epoch:
		return a.epoch < b.epoch
	case a.op != b.op:
		return a.op < b.op
	case a.kind != b.kind:
		return a.kind < b.kind
	}
	return cmpRef(a.ref, b.ref) < 0
}

func newTypedRecords() *typedRecords { return &typedRecords{m: map[uint64]*lineageRecs{}} }

// of is lineage lid's records, made when make is set (nil otherwise when
// it has none).
func (tr *typedRecords) of(lid uint64, make bool) *lineageRecs {
	l := tr.m[lid]
	if l == nil && make {
		l = &lineageRecs{
			recs:    btree.NewBTreeGOptions(recLess, btree.Options{NoLocks: true}),
			changes: btree.NewBTreeGOptions(changeLess, btree.Options{NoLocks: true}),
		}
		tr.m[lid] = l
	}
	return l
}

// drop forgets lineage lid when it holds nothing.
func (tr *typedRecords) drop(lid uint64, l *lineageRecs) {
	if l.recs.Len() == 0 && l.changes.Len() == 0 {
		delete(tr.m, lid)
	}
}

func (tr *typedRecords) get(lid uint64, kind byte, ref manifests.Ref) *record {
	l := tr.of(lid, false)
	if l == nil {
		return nil
	}
	it, ok := l.recs.Get(recItem{kind: kind, ref: ref})
	if !ok {
		return nil
	}
	r := it.r
	return &r
}

func (tr *typedRecords) put(lid uint64, kind byte, ref manifests.Ref, r *record) {
	tr.of(lid, true).recs.Set(recItem{kind: kind, ref: ref, r: *r})
}

func (tr *typedRecords) del(lid uint64, kind byte, ref manifests.Ref) {
	if l := tr.of(lid, false); l != nil {
		l.recs.Delete(recItem{kind: kind, ref: ref})
		tr.drop(lid, l)
	}
}

func (tr *typedRecords) putChange(lid uint64, c changeItem) { tr.of(lid, true).changes.Set(c) }

func (tr *typedRecords) delChange(lid uint64, c changeItem) {
	if l := tr.of(lid, false); l != nil {
		l.changes.Delete(c)
		tr.drop(lid, l)
	}
}

// lids lists the lineages from lid on, in order.
func (tr *typedRecords) lids(from uint64) []uint64 {
	out := make([]uint64, 0, len(tr.m))
	for id := range tr.m {
		if id >= from {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// The txn's accessors of records and changes, typed or in the buckets.

func (t *txn) putRec(lid uint64, kind byte, ref manifests.Ref, r *record) error {
	if t.recsTyped != nil {
		t.ops.Puts++
		t.recsTyped.put(lid, kind, ref, r)
		return nil
	}
	return t.putRecord(bucketRecords, recKey(lid, kind, ref), r)
}

func (t *txn) delRec(lid uint64, kind byte, ref manifests.Ref) error {
	if t.recsTyped != nil {
		t.ops.Deletes++
		t.recsTyped.del(lid, kind, ref)
		return nil
	}
	return t.del(bucketRecords, recKey(lid, kind, ref))
}

func (t *txn) putChange(lid, epoch uint64, op, kind byte, ref manifests.Ref) error {
	if t.recsTyped != nil {
		t.ops.Puts++
		t.recsTyped.putChange(lid, changeItem{epoch, op, kind, ref})
		return nil
	}
	return t.put(bucketRecChanges, changeKey(lid, epoch, op, kind, ref), nil)
}

func (t *txn) delChange(lid, epoch uint64, op, kind byte, ref manifests.Ref) error {
	if t.recsTyped != nil {
		t.ops.Deletes++
		t.recsTyped.delChange(lid, changeItem{epoch, op, kind, ref})
		return nil
	}
	return t.del(bucketRecChanges, changeKey(lid, epoch, op, kind, ref))
}

// The buckets' view of a typedRecords.

// typedRecordsBucket shows the records as the records bucket.
type typedRecordsBucket struct{ tr *typedRecords }

// typedChangesBucket shows the changes as the rec_changes bucket.
type typedChangesBucket struct{ tr *typedRecords }

// parseRecKey parses a records key: lineage id, kind, reference.
func parseRecKey(k []byte) (lid uint64, kind byte, ref manifests.Ref, ok bool) {
	if len(k) < 9 {
		return 0, 0, ref, false
	}
	ref, ok = parseRefSuffix(k[9:])
	return binary.BigEndian.Uint64(k), k[8], ref, ok
}

// parseChangeKey parses a rec_changes key.
func parseChangeKey(k []byte) (lid uint64, c changeItem, ok bool) {
	if len(k) < 18 {
		return 0, c, false
	}
	ref, ok := parseRefSuffix(k[18:])
	return binary.BigEndian.Uint64(k), changeItem{binary.BigEndian.Uint64(k[8:]), k[16], k[17], ref}, ok
}

func (b typedRecordsBucket) Get(key []byte) []byte {
	lid, kind, ref, ok := parseRecKey(key)
	if !ok {
		return nil
	}
	r := b.tr.get(lid, kind, ref)
	if r == nil {
		return nil
	}
	return encodeTyped(r)
}

func encodeTyped(r msgRecord) []byte {
	raw, err := encodeRecord(r)
	if err != nil {
		panic(fmt.Sprintf("fsm: encoding a typed record: %v", err))
	}
	return raw
}

func (b typedRecordsBucket) Put(key, value []byte) error {
	lid, kind, ref, ok := parseRecKey(key)
	if !ok {
		return &corruptError{fmt.Sprintf("records key %q", key)}
	}
	var r record
	if err := decodeRecord(value, &r); err != nil {
		return fmt.Errorf("fsm: decode %s/%q: %w", bucketRecords, key, err)
	}
	b.tr.put(lid, kind, ref, &r)
	return nil
}

func (b typedRecordsBucket) Delete(key []byte) error {
	if lid, kind, ref, ok := parseRecKey(key); ok {
		b.tr.del(lid, kind, ref)
	}
	return nil
}

func (b typedRecordsBucket) KeyN() int {
	n := 0
	for _, l := range b.tr.m {
		n += l.recs.Len()
	}
	return n
}

func (b typedRecordsBucket) Cursor() kvCursor {
	return &typedCursor{tr: b.tr, del: b.Delete, fill: func(lid uint64, rest []byte, out *[][2][]byte) {
		l := b.tr.of(lid, false)
		if l == nil {
			return
		}
		var pivot recItem
		if len(rest) > 0 {
			pivot.kind = rest[0]
			pivot.ref = partialRef(rest[1:])
		}
		l.recs.Ascend(pivot, func(it recItem) bool {
			k := recKey(lid, it.kind, it.ref)
			*out = append(*out, [2][]byte{k, encodeTyped(&it.r)})
			return true
		})
	}}
}

func (b typedChangesBucket) Get(key []byte) []byte {
	lid, c, ok := parseChangeKey(key)
	if !ok {
		return nil
	}
	if l := b.tr.of(lid, false); l != nil {
		if _, ok := l.changes.Get(c); ok {
			return []byte{}
		}
	}
	return nil
}

func (b typedChangesBucket) Put(key, value []byte) error {
	lid, c, ok := parseChangeKey(key)
	if !ok || len(value) != 0 {
		return &corruptError{fmt.Sprintf("rec_changes key %q", key)}
	}
	b.tr.putChange(lid, c)
	return nil
}

func (b typedChangesBucket) Delete(key []byte) error {
	if lid, c, ok := parseChangeKey(key); ok {
		b.tr.delChange(lid, c)
	}
	return nil
}

func (b typedChangesBucket) KeyN() int {
	n := 0
	for _, l := range b.tr.m {
		n += l.changes.Len()
	}
	return n
}

func (b typedChangesBucket) Cursor() kvCursor {
	return &typedCursor{tr: b.tr, del: b.Delete, fill: func(lid uint64, rest []byte, out *[][2][]byte) {
		l := b.tr.of(lid, false)
		if l == nil {
			return
		}
		var pivot changeItem
		if len(rest) >= 8 {
			pivot.epoch = binary.BigEndian.Uint64(rest)
			if len(rest) > 8 {
				pivot.op = rest[8]
			}
			if len(rest) > 9 {
				pivot.kind = rest[9]
				pivot.ref = partialRef(rest[10:])
			}
		} else if len(rest) > 0 {
			var e [8]byte
			copy(e[:], rest)
			pivot.epoch = binary.BigEndian.Uint64(e[:])
		}
		l.changes.Ascend(pivot, func(c changeItem) bool {
			*out = append(*out, [2][]byte{changeKey(lid, c.epoch, c.op, c.kind, c.ref), {}})
			return true
		})
	}}
}

// partialRef is the least reference whose suffix (key, zero byte, offset)
// is at or after b, a prefix of one.
func partialRef(b []byte) manifests.Ref {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return manifests.Ref{Key: string(b)}
	}
	var off [8]byte
	copy(off[:], b[i+1:])
	return manifests.Ref{Key: string(b[:i]), Offset: binary.BigEndian.Uint64(off[:])}
}

// typedCursor walks a typed bucket in key order, one lineage at a time:
// fill appends the lineage's keys and values from a position (the key's
// bytes after the lineage id; nil: its first).
type typedCursor struct {
	tr   *typedRecords
	fill func(lid uint64, rest []byte, out *[][2][]byte)
	del  func(key []byte) error
	lids []uint64
	buf  [][2][]byte
	at   []byte
}

func (c *typedCursor) First() (key, value []byte) { return c.Seek(nil) }

func (c *typedCursor) Seek(key []byte) (k, v []byte) {
	var lid uint64
	var rest []byte
	if len(key) >= 8 {
		lid, rest = binary.BigEndian.Uint64(key), key[8:]
	} else if len(key) > 0 {
		var b [8]byte
		copy(b[:], key)
		lid = binary.BigEndian.Uint64(b[:])
	}
	c.lids, c.buf = c.tr.lids(lid), c.buf[:0]
	if len(c.lids) > 0 && c.lids[0] == lid {
		c.fill(lid, rest, &c.buf)
		c.lids = c.lids[1:]
	}
	return c.next()
}

func (c *typedCursor) Next() (key, value []byte) {
	if len(c.buf) > 0 {
		c.buf = c.buf[1:]
	}
	return c.next()
}

// next lands on the first buffered pair, filling from the next lineages
// while the buffer is empty.
func (c *typedCursor) next() (key, value []byte) {
	for len(c.buf) == 0 && len(c.lids) > 0 {
		c.fill(c.lids[0], nil, &c.buf)
		c.lids = c.lids[1:]
	}
	if len(c.buf) == 0 {
		c.at = nil
		return nil, nil
	}
	c.at = c.buf[0][0]
	return c.buf[0][0], c.buf[0][1]
}

func (c *typedCursor) Delete() error {
	if c.at == nil {
		return nil
	}
	return c.del(c.at)
}
