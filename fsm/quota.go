package fsm

import (
	"bytes"
	"fmt"
	"maps"
	"sync"
)

// JobUsage is what one job holds in the blob table: its open upload
// intents and the blobs that are live, with their bytes. The API's quotas
// (api/quota.go) are checked against it on the leader, on every ack that
// commits blobs and every request for upload slots.
type JobUsage struct {
	Intents   int    `json:"intents"`
	LiveBlobs int    `json:"live_blobs"`
	LiveBytes uint64 `json:"live_bytes"`
}

func (u *JobUsage) add(d JobUsage) {
	u.Intents += d.Intents
	u.LiveBlobs += d.LiveBlobs
	u.LiveBytes += d.LiveBytes // d.LiveBytes wraps around for a decrease
}

func (u JobUsage) zero() bool { return u == JobUsage{} }

// blobUsage is what one blob record counts in its job's usage.
func blobUsage(state blobState, size uint64) JobUsage {
	switch state {
	case blobIntent:
		return JobUsage{Intents: 1}
	case blobLive:
		return JobUsage{LiveBlobs: 1, LiveBytes: size}
	}
	return JobUsage{}
}

// usageDelta is the change of one blob's usage from was to now (bytes
// wrap around unsigned, and add back exactly).
func usageDelta(was, now JobUsage) JobUsage {
	return JobUsage{
		Intents:   now.Intents - was.Intents,
		LiveBlobs: now.LiveBlobs - was.LiveBlobs,
		LiveBytes: now.LiveBytes - was.LiveBytes,
	}
}

// usageCounts keeps every job's usage in memory, so a quota check costs a
// map lookup instead of a scan of the job's blobs. It is derived state, not
// replicated: built by one scan of the blob table when the file is opened
// or restored, then moved by the usage changes of each committed
// transaction (txn.usage, collected by putBlob from the state each record
// had when it was read).
type usageCounts struct {
	mu   sync.Mutex
	jobs map[string]*JobUsage
	// index is the applied index of the last transaction counted.
	index uint64
	// open is the changes of the open write transaction (commit.go):
	// applied, not committed yet. get adds them, so a quota check between
	// an apply and its commit sees the applied writes.
	open map[string]JobUsage
}

func (c *usageCounts) get(job string) JobUsage {
	c.mu.Lock()
	defer c.mu.Unlock()
	var u JobUsage
	if cu := c.jobs[job]; cu != nil {
		u = *cu
	}
	if d, ok := c.open[job]; ok {
		u.add(d)
	}
	return u
}

// setOpen records the changes of the open transaction so far (nil: none
// is open).
func (c *usageCounts) setOpen(d map[string]JobUsage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open = maps.Clone(d)
}

// apply adds the changes of the transaction committed at index.
func (c *usageCounts) apply(d map[string]JobUsage, index uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.index = index
	c.open = nil
	for job, du := range d {
		u := c.jobs[job]
		if u == nil {
			u = &JobUsage{}
			c.jobs[job] = u
		}
		u.add(du)
		if u.zero() {
			delete(c.jobs, job)
		}
	}
}

// reset replaces the counts with those of a scan at index (rebuildCounts,
// unobserved.go). A record that cannot be decoded counts nothing: the file
// was accepted by its checks, and fsck names such a record.
func (c *usageCounts) reset(jobs map[string]*JobUsage, index uint64) {
	c.mu.Lock()
	c.jobs, c.index, c.open = jobs, index, nil
	c.mu.Unlock()
}

// scanUsage counts the usage of every job owning a blob under prefix,
// calling each (when not nil) with every record it decoded. A record that
// cannot be decoded is an error when strict, else it counts nothing.
func (t *txn) scanUsage(prefix []byte, strict bool, each func(*blobRecord)) (map[string]*JobUsage, error) {
	jobs := map[string]*JobUsage{}
	err := t.scan(bucketBlobs, prefix, func(k, v []byte) (bool, error) {
		b, err := decodeBlob(k, v)
		if err != nil {
			if strict {
				return false, err
			}
			return true, nil
		}
		if each != nil {
			each(b)
		}
		if u := blobUsage(b.State, b.Size); !u.zero() {
			if jobs[b.Job] == nil {
				jobs[b.Job] = &JobUsage{}
			}
			jobs[b.Job].add(u)
		}
		return true, nil
	})
	if err != nil {
		return jobs, err
	}
	// The unused keys of upload batches are intents without records.
	err = t.scanBatches(func(ub *uploadBatch) error {
		if n := ub.unused(); n > 0 && bytes.HasPrefix([]byte(ub.key(0)), prefix) {
			if jobs[ub.Job] == nil {
				jobs[ub.Job] = &JobUsage{}
			}
			jobs[ub.Job].add(JobUsage{Intents: n})
		}
		return nil
	})
	return jobs, err
}

// check adds to rep every job whose count differs from a scan of the blob
// table, when the counts are those of the state t shows (the caller holds
// c.mu). It reports whether they were.
func (c *usageCounts) check(t *txn, rep *FsckReport) (bool, error) {
	if c.index != t.index {
		return false, nil
	}
	scanned, err := t.scanUsage(nil, true, nil)
	if err != nil {
		return false, err
	}
	for job, u := range scanned {
		if got := c.jobs[job]; got == nil || *got != *u {
			rep.Problems = append(rep.Problems, fmt.Sprintf("job %q: usage counted in memory %+v, the blob table holds %+v", job, got, *u))
		}
	}
	for job, got := range c.jobs {
		if scanned[job] == nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("job %q: usage counted in memory %+v, the blob table holds none", job, *got))
		}
	}
	return true, nil
}

// JobUsage is the job's usage as of the last committed transaction (Flush
// commits what was applied since). It costs a map lookup: the counts are
// kept in memory (usageCounts).
func (f *FSM) JobUsage(job string) JobUsage { return f.usage.get(job) }

// ScanJobUsage computes the job's usage by scanning the blobs it owns
// (every key the store hands out starts with the job's id and a slash). It
// is what JobUsage must always equal; tests and the consistency check
// compare the two.
func (f *FSM) ScanJobUsage(job string) (JobUsage, uint64, error) {
	var u JobUsage
	idx, err := f.view(func(t *txn) error {
		jobs, err := t.scanUsage([]byte(job+"/"), true, nil)
		if j := jobs[job]; j != nil {
			u = *j
		}
		return err
	})
	return u, idx, err
}

// Committed reports, for each key, whether the store holds a blob under it
// that is no longer an upload intent (committed by an ack: live, or
// further along). An ack that commits such a key again adds no bytes to
// its job's usage. One read transaction for all the keys, of the last
// committed state when latest is false (a key committed since may be
// answered false), of the latest applied state when it is true.
func (f *FSM) Committed(keys []string, latest bool) (map[string]bool, error) {
	out := make(map[string]bool, len(keys))
	view := f.viewCommitted
	if latest {
		view = f.view
	}
	_, err := view(func(t *txn) error {
		for _, k := range keys {
			b, err := t.blob(k)
			if err != nil {
				return err
			}
			out[k] = b != nil && b.State != blobIntent
		}
		return nil
	})
	return out, err
}
