package fsm

import (
	"fmt"
	"slices"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// unobservedIndex keeps in memory the keys of the blobs awaiting the
// leader's observation (blobRecord.AwaitingObservation, observe.go). It is
// derived state, like the jobs' usage (quota.go): built by the same scan
// of the blob table when the file is opened or restored, then moved by
// the changes of each committed transaction (txn.awaiting, collected by
// putBlob from what each record held when it was read). The leader's
// observer lists the keys (Unobserved) without reading the file, and no
// bucket of the file indexes them: an ack's commit of a blob and the
// observation of it each write the blob's record and nothing else (an
// index bucket cost two more writes per blob on every member, and the
// pages of one more bucket in every commit).
type unobservedIndex struct {
	mu   sync.Mutex
	keys map[string]struct{}
	// index is the applied index of the last transaction counted.
	index uint64
}

// apply adds the changes of the transaction committed at index.
func (x *unobservedIndex) apply(d map[string]bool, index uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.index = index
	for k, awaiting := range d {
		if awaiting {
			x.keys[k] = struct{}{}
		} else {
			delete(x.keys, k)
		}
	}
}

// reset replaces the keys with those of a scan at index.
func (x *unobservedIndex) reset(keys map[string]struct{}, index uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.keys, x.index = keys, index
}

// list returns up to max keys awaiting observation, in key order (keys
// of one directory and time window share an object-store listing: gc's
// listGroups): those of the last commit, moved by open, the changes of the
// open write transaction (nil: none) as they stood when it was copied.
func (x *unobservedIndex) list(max int, open map[string]bool) []string {
	x.mu.Lock()
	all := make([]string, 0, len(x.keys)+len(open))
	for k := range x.keys {
		if awaiting, changed := open[k]; !changed || awaiting {
			all = append(all, k)
		}
	}
	for k, awaiting := range open {
		if _, counted := x.keys[k]; awaiting && !counted {
			all = append(all, k)
		}
	}
	x.mu.Unlock()
	slices.Sort(all)
	return all[:min(max, len(all)):min(max, len(all))]
}

// committed is the number of keys awaiting observation as of the last
// committed transaction.
func (x *unobservedIndex) committed() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.keys)
}

// check adds to rep every key the index and a scan of t's blob table
// disagree on, when the index is that of the state t shows (the caller
// holds x.mu). It reports whether it was.
func (x *unobservedIndex) check(t *txn, rep *FsckReport) (bool, error) {
	if x.index != t.index {
		return false, nil
	}
	scanned := map[string]struct{}{}
	err := t.scan(bucketBlobs, nil, func(k, v []byte) (bool, error) {
		b, err := decodeBlob(k, v)
		if err != nil {
			return false, err
		}
		if b.AwaitingObservation {
			scanned[string(k)] = struct{}{}
			if b.State != blobLive {
				rep.Problems = append(rep.Problems, fmt.Sprintf("blob %q is %s and awaits observation; only a live blob does", k, b.State))
			}
		}
		return true, nil
	})
	if err != nil {
		return false, err
	}
	for k := range scanned {
		if _, ok := x.keys[k]; !ok {
			rep.Problems = append(rep.Problems, fmt.Sprintf("blob %q awaits observation and is missing from the index in memory", k))
		}
	}
	for k := range x.keys {
		if _, ok := scanned[k]; !ok {
			rep.Problems = append(rep.Problems, fmt.Sprintf("the index in memory lists blob %q as awaiting observation; its record does not", k))
		}
	}
	return true, nil
}

// rebuildCounts replaces the jobs' usage (quota.go) and the index of the
// blobs awaiting observation with one scan of db's blob table, and the
// filter of blob keys (blob_filter.go) with one of its keys; then it
// drops the pages those scans read from the resident set (dropResident).
func (f *FSM) rebuildCounts(db *bolt.DB) error {
	var jobs map[string]*JobUsage
	awaiting := map[string]struct{}{}
	var index uint64
	var keys *blobFilter
	err := db.View(func(tx *bolt.Tx) error {
		t := &txn{tx: tx}
		index = t.appliedIndex()
		var err error
		if keys, err = buildBlobFilter(t); err != nil {
			return err
		}
		jobs, err = t.scanUsage(nil, false, func(b *blobRecord) {
			if b.AwaitingObservation {
				awaiting[b.Key] = struct{}{}
			}
		})
		return err
	})
	if err != nil {
		return err
	}
	f.usage.reset(jobs, index)
	f.unobserved.reset(awaiting, index)
	f.blobKeys = keys
	f.filterBuilds.Add(1)
	if err := dropResident(db); err != nil {
		f.logger.Warn("could not drop the pages the scan of the blobs read from the resident set", "err", err)
	}
	return nil
}
