package fsm

import (
	"fmt"

	"github.com/tidwall/btree"
)

// typedObjects holds the records of the job's buckets (jobs, attempts,
// tasks, epochs, acks, lineages) decoded, in trees ordered by their keys,
// in place of those buckets: the third typed structure of the planned
// state layer (DESIGN.md), after the blobs and the lineage records. A
// transaction that has one (txn.objsTyped) reads a record as a copy of
// the decoded one and writes a copy (getRecord, putRecord: record_copy.go
// makes the copies read as the stored bytes would decode); every other
// reader of these buckets sees them as buckets of encoded records
// (typedObjectBucket). Only ApplyInMemory uses it, as the other typed
// structures.
type typedObjects struct {
	trees map[string]*btree.BTreeG[objItem]
}

type objItem struct {
	key string
	o   msgRecord
}

func objLess(a, b objItem) bool { return a.key < b.key }

// typedObjectBuckets are the buckets a typedObjects holds: those whose
// records copyOfRecord copies.
var typedObjectBuckets = []bucket{bucketJobs, bucketAttempts, bucketTasks, bucketEpochs, bucketAcks, bucketLineages}

// binaryZero returns a new zero record of a binary bucket, nil for a
// bucket whose records are JSON.
func binaryZero(name []byte) msgRecord {
	for _, b := range binaryBuckets {
		if string(b.name) == string(name) {
			return b.zero()
		}
	}
	return nil
}

func newTypedObjects() *typedObjects {
	x := &typedObjects{trees: map[string]*btree.BTreeG[objItem]{}}
	for _, name := range typedObjectBuckets {
		x.trees[string(name)] = btree.NewBTreeGOptions(objLess, btree.Options{NoLocks: true})
	}
	return x
}

// of is the tree of bucket name, nil when x is nil or does not hold it.
func (x *typedObjects) of(name bucket) *btree.BTreeG[objItem] {
	if x == nil {
		return nil
	}
	return x.trees[string(name)]
}

// typedObjectBucket shows a tree of decoded records as its bucket.
type typedObjectBucket struct {
	name bucket
	tr   *btree.BTreeG[objItem]
}

func (b typedObjectBucket) Get(key []byte) []byte {
	it, ok := b.tr.Get(objItem{key: string(key)})
	if !ok {
		return nil
	}
	return encodeTyped(it.o)
}

func (b typedObjectBucket) Put(key, value []byte) error {
	if err := checkPut(key, value); err != nil {
		return err
	}
	z := binaryZero(b.name)
	if err := decodeRecord(value, z); err != nil {
		return fmt.Errorf("fsm: decode %s/%q: %w", b.name, key, err)
	}
	b.tr.Set(objItem{key: string(key), o: z})
	return nil
}

func (b typedObjectBucket) Delete(key []byte) error {
	b.tr.Delete(objItem{key: string(key)})
	return nil
}

func (b typedObjectBucket) KeyN() int { return b.tr.Len() }

func (b typedObjectBucket) Cursor() kvCursor { return &typedObjectCursor{tr: b.tr} }

// typedObjectCursor finds each position from the key it was at, so it
// stays usable while the tree changes (a prefix delete deletes as it
// goes).
type typedObjectCursor struct {
	tr *btree.BTreeG[objItem]
	at string
	ok bool
}

func (c *typedObjectCursor) First() (key, value []byte) { return c.Seek(nil) }

func (c *typedObjectCursor) Seek(key []byte) (k, v []byte) {
	return c.land(string(key), true)
}

func (c *typedObjectCursor) Next() (key, value []byte) {
	if !c.ok {
		return nil, nil
	}
	return c.land(c.at, false)
}

// land moves to the first key at or after from (after it, when
// inclusive is false).
func (c *typedObjectCursor) land(from string, inclusive bool) (key, value []byte) {
	c.ok = false
	c.tr.Ascend(objItem{key: from}, func(it objItem) bool {
		if !inclusive && it.key == from {
			return true
		}
		c.at, c.ok = it.key, true
		value = encodeTyped(it.o)
		return false
	})
	if !c.ok {
		return nil, nil
	}
	return []byte(c.at), value
}

func (c *typedObjectCursor) Delete() error {
	if c.ok {
		c.tr.Delete(objItem{key: c.at})
	}
	return nil
}

// getTyped reads key's record of bucket name into v from x's tree:
// handled reports whether x holds the bucket.
func (x *typedObjects) getTyped(name bucket, key []byte, v any) (found, handled bool) {
	tr := x.of(name)
	if tr == nil {
		return false, false
	}
	it, ok := tr.Get(objItem{key: string(key)})
	if !ok {
		return false, true
	}
	if !readRecord(v, it.o) {
		panic(fmt.Sprintf("fsm: a %T read from %s, which holds %T", v, name, it.o))
	}
	return true, true
}

// putTyped writes a copy of v under key into x's tree of bucket name:
// handled reports whether x holds the bucket.
func (x *typedObjects) putTyped(name bucket, key []byte, v any) (handled bool, err error) {
	tr := x.of(name)
	if tr == nil {
		return false, nil
	}
	if err := checkPut(key, nil); err != nil {
		return true, err
	}
	o, ok := copyOfRecord(v)
	if !ok {
		return true, fmt.Errorf("fsm: a %T written to %s, which holds decoded records", v, name)
	}
	tr.Set(objItem{key: string(key), o: o})
	return true, nil
}
