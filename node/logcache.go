package node

import (
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// logCache keeps the newest Raft log entries in memory in front of the
// log store, as hashicorp/raft's LogCache does, bounded by bytes as well
// as entries. The leader reads each entry back to send it to the
// followers right after appending it, and the cache answers those reads.
// raft.LogCache bounds only the number of entries, so its memory follows
// their size: 512 entries of an ack that commits a thousand blobs held
// about 100 MiB on every member. The byte bound keeps the newest entries
// of at most maxBytes; a read of an older one goes to the store.
//
// The cached entries are always a run of consecutive indexes, lo to
// hi-1: a store that does not extend the run (the first one, one after a
// snapshot install) starts a new run, and DeleteRange empties the cache,
// as raft.LogCache does.
type logCache struct {
	store    raft.LogStore
	maxBytes int

	mu     sync.RWMutex
	ring   []*raft.Log // entry i at ring[i%len(ring)], for lo <= i < hi
	lo, hi uint64
	bytes  int // logBytes of the cached entries
}

// logCacheEntryOverhead is what logBytes counts for an entry besides its
// data: the raft.Log itself and its slice headers.
const logCacheEntryOverhead = 128

// newLogCache caches up to entries entries of up to maxBytes in all in
// front of store.
func newLogCache(entries, maxBytes int, store raft.LogStore) (*logCache, error) {
	if entries <= 0 || maxBytes <= 0 {
		return nil, fmt.Errorf("node: log cache of %d entries and %d bytes: both must be positive", entries, maxBytes)
	}
	return &logCache{store: store, maxBytes: maxBytes, ring: make([]*raft.Log, entries)}, nil
}

// logBytes is the memory an entry is counted for.
func logBytes(l *raft.Log) int {
	return len(l.Data) + len(l.Extensions) + logCacheEntryOverhead
}

// IsMonotonic forwards the store's answer, as raft.LogCache does.
func (c *logCache) IsMonotonic() bool {
	m, ok := c.store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (c *logCache) GetLog(idx uint64, log *raft.Log) error {
	c.mu.RLock()
	if c.lo <= idx && idx < c.hi {
		*log = *c.ring[idx%uint64(len(c.ring))]
		c.mu.RUnlock()
		return nil
	}
	c.mu.RUnlock()
	return c.store.GetLog(idx, log)
}

func (c *logCache) StoreLog(log *raft.Log) error {
	return c.StoreLogs([]*raft.Log{log})
}

// StoreLogs stores logs, then caches them: only what the store took.
func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return fmt.Errorf("unable to store logs within log store, err: %q", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		if l.Index != c.hi || c.lo == c.hi {
			c.clearLocked()
			c.lo, c.hi = l.Index, l.Index
		}
		if c.hi-c.lo == uint64(len(c.ring)) {
			c.dropOldestLocked()
		}
		c.ring[l.Index%uint64(len(c.ring))] = l
		c.hi++
		c.bytes += logBytes(l)
		for c.bytes > c.maxBytes && c.lo < c.hi {
			c.dropOldestLocked()
		}
	}
	return nil
}

// dropOldestLocked takes entry lo out of the cache.
func (c *logCache) dropOldestLocked() {
	slot := c.lo % uint64(len(c.ring))
	c.bytes -= logBytes(c.ring[slot])
	c.ring[slot] = nil
	c.lo++
}

// clearLocked empties the cache.
func (c *logCache) clearLocked() {
	clear(c.ring)
	c.lo, c.hi, c.bytes = 0, 0, 0
}

func (c *logCache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }

func (c *logCache) LastIndex() (uint64, error) { return c.store.LastIndex() }

// DeleteRange empties the cache, then deletes from the store.
func (c *logCache) DeleteRange(min, max uint64) error {
	c.mu.Lock()
	c.clearLocked()
	c.mu.Unlock()
	return c.store.DeleteRange(min, max)
}

// cached reports the entries and bytes the cache holds.
func (c *logCache) cached() (entries uint64, bytes int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.hi - c.lo, c.bytes
}
