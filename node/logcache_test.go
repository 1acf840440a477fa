package node

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// countingStore counts the reads that reach the log store.
type countingStore struct {
	raft.LogStore
	reads int
}

func (s *countingStore) GetLog(idx uint64, l *raft.Log) error {
	s.reads++
	return s.LogStore.GetLog(idx, l)
}

// TestLogCacheAnswersAsTheStore: through random appends of entries of
// random sizes (some larger than the whole byte bound), reads of random
// indexes, truncations of the tail with other entries appended at the same
// indexes, compactions of the head and jumps past a gap (as after a
// snapshot install, with the entries before it deleted or not), every read of the cache answers what the raft-boltdb
// store on disk holds, or the same error; the cache never holds more than
// its entries and bytes, and it answers the reads of the newest entries
// without the store.
func TestLogCacheAnswersAsTheStore(t *testing.T) {
	bs, err := raftboltdb.NewBoltStore(filepath.Join(t.TempDir(), "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	store := &countingStore{LogStore: bs}
	const entries, maxBytes = 16, 4096
	c, err := newLogCache(entries, maxBytes, store)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	var first, last uint64 = 1, 0
	gen := 0
	entry := func(i uint64) *raft.Log {
		n := r.IntN(600)
		if r.IntN(20) == 0 {
			n = maxBytes + 1 // alone over the bound
		}
		data := bytes.Repeat([]byte{byte(gen)}, n)
		return &raft.Log{Index: i, Term: uint64(gen), Type: raft.LogCommand, Data: data}
	}
	check := func(step int) {
		t.Helper()
		n, b := c.cached()
		if n > entries || b > maxBytes {
			t.Fatalf("step %d: the cache holds %d entries of %d bytes, bound %d and %d", step, n, b, entries, maxBytes)
		}
		for range 10 {
			i := first + uint64(r.IntN(int(last-first)+3)) - 1
			var got, want raft.Log
			gerr, werr := c.GetLog(i, &got), bs.GetLog(i, &want)
			if !errors.Is(gerr, werr) && (gerr == nil || werr == nil || gerr.Error() != werr.Error()) {
				t.Fatalf("step %d: entry %d: the cache answers %v, the store %v", step, i, gerr, werr)
			}
			if gerr == nil && (got.Index != want.Index || got.Term != want.Term || !bytes.Equal(got.Data, want.Data)) {
				t.Fatalf("step %d: entry %d: the cache answers term %d with %d bytes, the store term %d with %d bytes",
					step, i, got.Term, len(got.Data), want.Term, len(want.Data))
			}
		}
	}
	hits := 0
	for step := range 2000 {
		switch op := r.IntN(20); {
		case op < 14 || last < first: // append a few
			gen++
			var logs []*raft.Log
			for range 1 + r.IntN(5) {
				last++
				logs = append(logs, entry(last))
			}
			if err := c.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			newest := logs[len(logs)-1]
			if logBytes(newest) <= maxBytes {
				before := store.reads
				var l raft.Log
				if err := c.GetLog(newest.Index, &l); err != nil {
					t.Fatal(err)
				}
				if store.reads != before {
					t.Fatalf("step %d: the newest entry %d (%d bytes) was read from the store", step, newest.Index, len(newest.Data))
				}
				hits++
			}
		case op < 16: // truncate the tail; the next appends reuse its indexes
			from := last - uint64(r.IntN(int(last-first)+1))
			if err := c.DeleteRange(from, last); err != nil {
				t.Fatal(err)
			}
			last = from - 1
		case op < 19: // compact the head
			to := first + uint64(r.IntN(int(last-first)+1))
			if err := c.DeleteRange(first, to); err != nil {
				t.Fatal(err)
			}
			first = to + 1
		default: // a gap: the log starts again further on
			if r.IntN(2) == 0 {
				if err := c.DeleteRange(first, last); err != nil {
					t.Fatal(err)
				}
				first = last + 1 + uint64(r.IntN(50))
				last = first - 1
				break
			}
			// The store keeps the entries before the gap (raft-boltdb
			// takes an append past a gap; Raft compacts them later).
			last += 1 + uint64(r.IntN(50))
			if err := c.StoreLog(entry(last)); err != nil {
				t.Fatal(err)
			}
		}
		if last >= first {
			check(step)
		}
	}
	if hits == 0 {
		t.Fatal("no read answered from the cache")
	}
	t.Logf("%d newest entries read from the cache; the store read %d times", hits, store.reads)
}

// TestLogCacheBounds: a run of entries larger than the byte bound keeps
// only the newest that fit; a run of small ones keeps the newest entries
// up to the count.
func TestLogCacheBounds(t *testing.T) {
	bs, err := raftboltdb.NewBoltStore(filepath.Join(t.TempDir(), "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	c, err := newLogCache(8, 10_000, bs)
	if err != nil {
		t.Fatal(err)
	}
	store := func(from, to uint64, size int) {
		t.Helper()
		for i := from; i <= to; i++ {
			if err := c.StoreLog(&raft.Log{Index: i, Data: make([]byte, size)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := func(entries uint64, bytes int) {
		t.Helper()
		if n, b := c.cached(); n != entries || b != bytes {
			t.Fatalf("the cache holds %d entries of %d bytes, want %d of %d", n, b, entries, bytes)
		}
	}
	store(1, 20, 100)
	want(8, 8*(100+logCacheEntryOverhead))
	store(21, 30, 3000)
	want(3, 3*(3000+logCacheEntryOverhead))
	store(31, 31, 20_000)
	want(0, 0)
	store(32, 33, 10)
	want(2, 2*(10+logCacheEntryOverhead))
	if _, err := newLogCache(0, 1, bs); err == nil {
		t.Fatal("a cache of 0 entries was made")
	}
	if _, err := newLogCache(1, 0, bs); err == nil {
		t.Fatal("a cache of 0 bytes was made")
	}
}
