// Package memkv is an in-memory store of named buckets of ordered byte
// keys, with the operations the state machine makes on bbolt's buckets and
// cursors (Get, Put, Delete, Seek, First, Next, a cursor's Delete, the key
// count), and snapshots that cost a copy of nothing: a Snapshot shares
// every node of every bucket's tree with the store, and the store copies a
// node before it changes one a live snapshot shares (copy on write, the
// trees of github.com/tidwall/btree).
//
// It is a building block of the state layer planned in fsm/DESIGN.md ("The
// state layer's next step"): the state in memory, written to the bbolt file
// at checkpoints from a snapshot by another goroutine, so that no commit of
// the file stands on the apply's path. The state machine applies its
// entries to it only in the replay of its tests and BenchmarkReplayAcks
// (fsm/kv.go): measured in the cluster, a state machine on it spent more
// CPU per ack than on the file (docs/benchmarks.md, twenty-third round).
//
// A Store is not safe for concurrent use: one goroutine changes it. A
// Snapshot, taken by that goroutine, may be read by any number of others
// while the store goes on changing; it cannot be changed.
package memkv

import (
	"bytes"
	"errors"
	"slices"

	"github.com/tidwall/btree"
)

// Errors of Put, as bbolt's for the same input.
var (
	ErrKeyRequired = errors.New("memkv: key required")
	ErrKeyTooLarge = errors.New("memkv: key too large")
	ErrReadOnly    = errors.New("memkv: a snapshot cannot be changed")
)

// MaxKeySize is the longest key Put takes (bbolt's limit, so that the state
// written to a bbolt file takes every key the store holds).
const MaxKeySize = 32768

// degree of the trees: nodes of up to 2*degree-1 items. bbolt's pages of
// 4 KiB hold about a hundred keys of this state; 32 (tidwall's default)
// keeps a node's binary search in a few cache lines.
const degree = 32

// item is one key and its value in one allocation: kv[:klen] is the key,
// kv[klen:] the value (one pointer for the collector to follow, not two).
type item struct {
	kv   []byte
	klen int
}

func (it item) key() []byte { return it.kv[:it.klen:it.klen] }

// value is never nil for an item: a present key with an empty value reads
// as an empty, non-nil slice, as bbolt answers for a committed one.
func (it item) value() []byte { return it.kv[it.klen:len(it.kv):len(it.kv)] }

func less(a, b item) bool { return bytes.Compare(a.key(), b.key()) < 0 }

// probe is an item holding only key, for searches.
func probe(key []byte) item { return item{kv: key, klen: len(key)} }

// Store is a set of named buckets.
type Store struct {
	buckets  map[string]*Bucket
	readOnly bool
}

// New returns an empty store.
func New() *Store { return &Store{buckets: map[string]*Bucket{}} }

// Bucket returns the bucket called name, nil when there is none.
func (s *Store) Bucket(name []byte) *Bucket { return s.buckets[string(name)] }

// CreateBucketIfNotExists returns the bucket called name, made empty if
// there was none.
func (s *Store) CreateBucketIfNotExists(name []byte) (*Bucket, error) {
	if b := s.buckets[string(name)]; b != nil {
		return b, nil
	}
	if s.readOnly {
		return nil, ErrReadOnly
	}
	if len(name) == 0 {
		return nil, ErrKeyRequired
	}
	b := &Bucket{tr: btree.NewBTreeGOptions(less, btree.Options{Degree: degree, NoLocks: true})}
	s.buckets[string(name)] = b
	return b, nil
}

// Names returns the names of the buckets in byte order.
func (s *Store) Names() [][]byte {
	out := make([][]byte, 0, len(s.buckets))
	for n := range s.buckets {
		out = append(out, []byte(n))
	}
	slices.SortFunc(out, bytes.Compare)
	return out
}

// Snapshot returns a read-only copy of the store as it is now, which
// shares its trees' nodes with the store. The store's goroutine takes it;
// any goroutine may read it afterwards, while the store changes.
func (s *Store) Snapshot() *Store {
	out := &Store{buckets: make(map[string]*Bucket, len(s.buckets)), readOnly: true}
	for n, b := range s.buckets {
		out.buckets[n] = &Bucket{tr: b.tr.Copy(), readOnly: true}
	}
	return out
}

// Bucket is an ordered map of byte keys to byte values.
type Bucket struct {
	tr *btree.BTreeG[item]
	// ver counts the changes made to the bucket, so that a cursor knows
	// when its position must be found again.
	ver      uint64
	readOnly bool
}

// Get returns the value of key, nil when the bucket does not hold it. The
// value must not be changed; it stays valid after the key changes.
func (b *Bucket) Get(key []byte) []byte {
	it, ok := b.tr.Get(probe(key))
	if !ok {
		return nil
	}
	return it.value()
}

// Put sets key to value. Both are copied.
func (b *Bucket) Put(key, value []byte) error {
	switch {
	case b.readOnly:
		return ErrReadOnly
	case len(key) == 0:
		return ErrKeyRequired
	case len(key) > MaxKeySize:
		return ErrKeyTooLarge
	}
	kv := make([]byte, len(key)+len(value))
	copy(kv, key)
	copy(kv[len(key):], value)
	b.tr.Set(item{kv: kv, klen: len(key)})
	b.ver++
	return nil
}

// Delete removes key; removing an absent key is not an error.
func (b *Bucket) Delete(key []byte) error {
	if b.readOnly {
		return ErrReadOnly
	}
	if _, ok := b.tr.Delete(probe(key)); ok {
		b.ver++
	}
	return nil
}

// KeyN is the number of keys in the bucket.
func (b *Bucket) KeyN() int { return b.tr.Len() }

// ForEach calls fn for every key in order until fn returns an error. fn
// must not change the bucket.
func (b *Bucket) ForEach(fn func(k, v []byte) error) error {
	var err error
	b.tr.Scan(func(it item) bool {
		err = fn(it.key(), it.value())
		return err == nil
	})
	return err
}

// Cursor returns a cursor of the bucket, positioned nowhere.
func (b *Bucket) Cursor() *Cursor { return &Cursor{b: b} }

// Cursor walks a bucket's keys in order. Unlike a tree iterator it stays
// usable while the bucket changes: a move after a change finds its place
// again from the key it was at.
type Cursor struct {
	b    *Bucket
	iter btree.IterG[item]
	// ver is the bucket's version when iter was positioned; at the key at
	// (nil: before the first key, or past the last).
	ver uint64
	at  []byte
	ok  bool
}

// First moves to the first key; nil when the bucket is empty.
func (c *Cursor) First() (key, value []byte) {
	c.reset()
	return c.land(c.iter.First())
}

// Seek moves to the first key at or after key; nil when there is none.
func (c *Cursor) Seek(key []byte) (k, v []byte) {
	c.reset()
	return c.land(c.iter.Seek(probe(key)))
}

// Next moves to the key after the cursor's; nil at the end.
func (c *Cursor) Next() (key, value []byte) {
	if !c.ok {
		return nil, nil
	}
	if c.ver != c.b.ver {
		// The bucket changed: find the first key after the one the
		// cursor was at (which may be gone).
		at := c.at
		c.reset()
		if !c.iter.Seek(probe(at)) {
			return c.land(false)
		}
		if bytes.Equal(c.iter.Item().key(), at) {
			return c.land(c.iter.Next())
		}
		return c.land(true)
	}
	return c.land(c.iter.Next())
}

// Delete removes the key the cursor is at. The next Next moves to the key
// after it.
func (c *Cursor) Delete() error {
	if !c.ok {
		return nil
	}
	return c.b.Delete(c.at)
}

func (c *Cursor) reset() {
	c.iter = c.b.tr.Iter()
	c.ver = c.b.ver
}

func (c *Cursor) land(found bool) (key, value []byte) {
	c.ok = found
	if !found {
		c.at = nil
		return nil, nil
	}
	it := c.iter.Item()
	c.at = it.key()
	return c.at, it.value()
}
