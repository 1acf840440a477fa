// Package keytable is a hash table of string keys to fixed-size values
// whose memory holds no pointers the Go collector must follow, with
// snapshots that share every part the table has not changed since.
//
// It is a building block of the state layer planned in fsm/DESIGN.md ("The
// state layer's next step"). Measured for it (docs/benchmarks.md,
// twenty-second round): a million blobs and their lineage records took 447
// heap bytes per blob in Go maps of string keys, a heap the collector
// walks, and 318 in tables laid out as this one; a keytable of a million
// 72-byte blob values takes 217. The state machine's typed blob table
// (fsm/blob_typed.go) keeps its records in one; only the replay of the
// state machine's entries in memory (its tests and BenchmarkReplayAcks)
// runs it.
//
// Layout: keys are appended to an arena of fixed-size byte chunks (a key
// never spans two); entries (the key's place, the value, the next entry of
// its hash chain) live in chunks of a fixed number of entries; an index
// maps a 64-bit hash of the key to the first entry of its chain. Deleted
// entries go to a free list and are reused; the bytes of deleted keys stay
// in the arena until Compact.
//
// Snapshots: Snapshot returns a View of the table as it is, for a reader
// on another goroutine (a checkpoint writing the state to a file) while the
// table goes on changing. The view shares the table's chunks. Arena chunks
// are never written once a key is in them, except the last one's free
// tail, which the view does not read. An entry chunk that a live view
// shares is copied before the table changes it (copy on write), so a view
// costs a copy of the chunk lists when taken and a copy of each entry chunk
// the table changes while it lives.
//
// The value type must hold no pointers (no strings, slices, maps, pointers
// or interfaces): New refuses one that does. A Table is not safe for
// concurrent use; a View may be read by one goroutine while the table's
// owner changes the table.
package keytable

import (
	"fmt"
	"hash/maphash"
	"reflect"
)

const (
	entryBits  = 10
	entryChunk = 1 << entryBits // entries per chunk
	// ArenaChunk is the size of an arena chunk, and MaxKey the longest key
	// the table holds.
	ArenaChunk = 64 << 10
	MaxKey     = ArenaChunk
)

// entry is one key and its value. keyLen 0 marks a free entry (keys are
// never empty). next is the index+1 of the next entry of the hash chain,
// or of the free list for a free entry; 0 ends it.
type entry[V any] struct {
	arena  uint32 // arena chunk of the key
	off    uint32 // offset of the key in it
	keyLen uint32
	next   uint32
	val    V
}

type entryChunkT[V any] struct {
	entries [entryChunk]entry[V]
	// gen is the table's generation when this chunk was made or last
	// copied: a view taken at a later generation shares it.
	gen uint64
}

// Table maps string keys to values of type V. The zero value is not
// usable; call New.
type Table[V any] struct {
	seed maphash.Seed
	// mask keeps the bits of a key's hash the index uses: all of them,
	// but a test keeps a few so that keys share chains.
	mask   uint64
	index  map[uint64]uint32 // hash -> index+1 of the chain's first entry
	chunks []*entryChunkT[V]
	arena  [][]byte
	used   int    // entries in use
	top    uint32 // entries ever handed out (the next fresh index)
	free   uint32 // index+1 of the first free entry
	// garbage is the arena bytes of deleted keys.
	garbage int
	// gen counts the views taken; views counts those not released.
	gen   uint64
	views int
}

// New returns an empty table. It panics if V holds pointers.
func New[V any]() *Table[V] {
	var zero V
	if t := reflect.TypeOf(&zero).Elem(); hasPointers(t) {
		panic(fmt.Sprintf("keytable: value type %s holds pointers", t))
	}
	return &Table[V]{seed: maphash.MakeSeed(), mask: ^uint64(0), index: map[uint64]uint32{}, gen: 1}
}

// hasPointers reports whether values of t hold anything the collector
// follows.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	}
	return true
}

// Len is the number of keys in the table.
func (t *Table[V]) Len() int { return t.used }

// at is the entry of index+1 i, for reading.
func (t *Table[V]) at(i uint32) *entry[V] {
	i--
	return &t.chunks[i>>entryBits].entries[i&(entryChunk-1)]
}

// writable is the entry of index+1 i, in a chunk no live view shares.
func (t *Table[V]) writable(i uint32) *entry[V] {
	i--
	c := t.chunks[i>>entryBits]
	if t.views > 0 && c.gen < t.gen {
		cp := *c
		cp.gen = t.gen
		c = &cp
		t.chunks[i>>entryBits] = c
	}
	return &c.entries[i&(entryChunk-1)]
}

func (t *Table[V]) key(e *entry[V]) string {
	return string(t.arena[e.arena][e.off : e.off+e.keyLen])
}

// keyIs reports whether e's key is key, without making a string.
func (t *Table[V]) keyIs(e *entry[V], key string) bool {
	return string(t.arena[e.arena][e.off:e.off+e.keyLen]) == key
}

// hash is the index's hash of key.
func (t *Table[V]) hash(key string) uint64 { return maphash.String(t.seed, key) & t.mask }

// find returns the index+1 of key's entry (0: absent) and the index+1 of
// the entry before it in its chain (0: it is the first).
func (t *Table[V]) find(h uint64, key string) (i, prev uint32) {
	for i = t.index[h]; i != 0; prev, i = i, t.at(i).next {
		if t.keyIs(t.at(i), key) {
			return i, prev
		}
	}
	return 0, 0
}

// Get returns the value of key, and whether the table holds it.
func (t *Table[V]) Get(key string) (V, bool) {
	if i, _ := t.find(t.hash(key), key); i != 0 {
		return t.at(i).val, true
	}
	var zero V
	return zero, false
}

// Has reports whether the table holds key.
func (t *Table[V]) Has(key string) bool {
	i, _ := t.find(t.hash(key), key)
	return i != 0
}

// Put sets the value of key. It panics on an empty key or one longer than
// MaxKey.
func (t *Table[V]) Put(key string, v V) {
	if len(key) == 0 || len(key) > MaxKey {
		panic(fmt.Sprintf("keytable: key of %d bytes", len(key)))
	}
	h := t.hash(key)
	if i, _ := t.find(h, key); i != 0 {
		t.writable(i).val = v
		return
	}
	i := t.alloc()
	e := t.writable(i)
	e.arena, e.off = t.store(key)
	e.keyLen = uint32(len(key))
	e.val = v
	e.next = t.index[h]
	t.index[h] = i
	t.used++
}

// alloc returns the index+1 of an entry to fill: a free one, or a fresh
// one (a new chunk when the last is full).
func (t *Table[V]) alloc() uint32 {
	if i := t.free; i != 0 {
		t.free = t.at(i).next
		return i
	}
	if t.top&(entryChunk-1) == 0 {
		t.chunks = append(t.chunks, &entryChunkT[V]{gen: t.gen})
	}
	t.top++
	return t.top
}

// store appends key to the arena and returns where.
func (t *Table[V]) store(key string) (chunk, off uint32) {
	n := len(t.arena)
	if n == 0 || len(t.arena[n-1])+len(key) > ArenaChunk {
		t.arena = append(t.arena, make([]byte, 0, ArenaChunk))
		n++
	}
	a := t.arena[n-1]
	off = uint32(len(a))
	t.arena[n-1] = append(a, key...)
	return uint32(n - 1), off
}

// Delete removes key; it reports whether the table held it.
func (t *Table[V]) Delete(key string) bool {
	h := t.hash(key)
	i, prev := t.find(h, key)
	if i == 0 {
		return false
	}
	next := t.at(i).next
	if prev == 0 {
		if next == 0 {
			delete(t.index, h)
		} else {
			t.index[h] = next
		}
	} else {
		t.writable(prev).next = next
	}
	e := t.writable(i)
	t.garbage += int(e.keyLen)
	*e = entry[V]{next: t.free}
	t.free = i
	t.used--
	return true
}

// Garbage is the arena bytes of deleted keys, which Compact gives back.
func (t *Table[V]) Garbage() int { return t.garbage }

// Compact rewrites the table without the arena bytes of deleted keys and
// without free entries. Views taken before it keep what they share.
func (t *Table[V]) Compact() {
	n := New[V]()
	n.seed, n.mask = t.seed, t.mask
	n.gen = t.gen + 1
	for _, c := range t.chunks {
		for j := range c.entries {
			if e := &c.entries[j]; e.keyLen != 0 {
				n.Put(t.key(e), e.val)
			}
		}
	}
	n.views = t.views
	*t = *n
}

// Each calls fn for every key and value of the table, in no set order,
// until fn returns false. fn must not change the table.
func (t *Table[V]) Each(fn func(key string, v V) bool) {
	eachOf(t.chunks, t.arena, t.top, fn)
}

func eachOf[V any](chunks []*entryChunkT[V], arena [][]byte, top uint32, fn func(string, V) bool) {
	for ci, c := range chunks {
		for j := range c.entries {
			if uint32(ci*entryChunk+j) >= top {
				return
			}
			e := &c.entries[j]
			if e.keyLen == 0 {
				continue
			}
			if !fn(string(arena[e.arena][e.off:e.off+e.keyLen]), e.val) {
				return
			}
		}
	}
}

// View is the table as it was when Snapshot took it. Release it when done:
// until then the table copies each entry chunk it changes.
type View[V any] struct {
	t        *Table[V]
	chunks   []*entryChunkT[V]
	arena    [][]byte
	top      uint32
	len      int
	released bool
}

// Snapshot returns a view of the table as it is now.
func (t *Table[V]) Snapshot() *View[V] {
	v := &View[V]{t: t, top: t.top, len: t.used}
	v.chunks = append([]*entryChunkT[V](nil), t.chunks...)
	v.arena = make([][]byte, len(t.arena))
	for i, a := range t.arena {
		v.arena[i] = a[:len(a):len(a)] // its keys only, whatever follows
	}
	t.gen++
	t.views++
	return v
}

// Len is the number of keys the view holds.
func (v *View[V]) Len() int { return v.len }

// Each calls fn for every key and value of the view, in no set order,
// until fn returns false.
func (v *View[V]) Each(fn func(key string, val V) bool) {
	eachOf(v.chunks, v.arena, v.top, fn)
}

// Release ends the view; the table's owner calls it (the table counts its
// live views without a lock). Releasing twice does nothing.
func (v *View[V]) Release() {
	if v.released {
		return
	}
	v.released = true
	v.t.views--
	v.chunks, v.arena = nil, nil
}
