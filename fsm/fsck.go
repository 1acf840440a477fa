package fsm

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// The report of a consistency check is computed, never stored: it is the
// API's answer (wire.FsckReport) as it is.
type (
	FsckReport  = wire.FsckReport
	RefMismatch = wire.RefMismatch
)

// Fsck recomputes every blob's reference count from the manifest records
// (the reference edges) in one read transaction and reports every
// difference, with other inconsistencies of the blob indexes.
func (f *FSM) Fsck() (*FsckReport, error) {
	rep := &FsckReport{Mismatches: []RefMismatch{}, Problems: []string{}}
	idx, err := f.view(func(t *txn) error { return t.fsck(rep, true) })
	rep.Index = idx
	if err != nil {
		return rep, err
	}
	// The jobs' usage counts (quota.go) and the index of the blobs
	// awaiting observation (unobserved.go) against a scan.
	if err = f.checkDerived(&f.usage.mu, rep, f.usage.check); err == nil {
		err = f.checkDerived(&f.unobserved.mu, rep, f.unobserved.check)
	}
	sort.Strings(rep.Problems)
	return rep, err
}

// checkDerived runs check, a comparison of state kept in memory (guarded
// by mu) with a scan, in a transaction that shows the state it holds:
// tried a few times, since applies go on meanwhile.
func (f *FSM) checkDerived(mu *sync.Mutex, rep *FsckReport, check func(*txn, *FsckReport) (bool, error)) error {
	for range 20 {
		done := false
		mu.Lock()
		_, err := f.view(func(t *txn) error {
			var err error
			done, err = check(t, rep)
			return err
		})
		mu.Unlock()
		if err != nil || done {
			return err
		}
	}
	return nil
}

// fsck fills rep with the check of the state visible in t, its findings
// sorted. leases adds the check of the intents' lease index (fsckLeases),
// whose faults leave an upload uncollected but stop nothing: a backup's
// check (checkBackupContent) leaves it out.
func (t *txn) fsck(rep *FsckReport, leases bool) error {
	defer func() {
		sort.Slice(rep.Mismatches, func(i, j int) bool { return rep.Mismatches[i].Key < rep.Mismatches[j].Key })
		sort.Strings(rep.Problems)
	}()
	counts := map[string]uint64{}
	err := t.scan(bucketRecords, nil, func(k, _ []byte) (bool, error) {
		ref, ok := parseRecordKey(k)
		if !ok {
			rep.Problems = append(rep.Problems, fmt.Sprintf("record key %q is malformed", k))
			return true, nil
		}
		rep.Records++
		counts[ref.Key]++
		return true, nil
	})
	if err != nil {
		return err
	}
	if err := t.scan(bucketLineages, nil, func(_, _ []byte) (bool, error) { rep.Lineages++; return true, nil }); err != nil {
		return err
	}
	candidates := map[string]bool{}
	if err := t.scan(bucketGCCandidates, nil, func(k, _ []byte) (bool, error) {
		if len(k) < 8 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("gc candidate key %q is too short", k))
			return true, nil
		}
		candidates[string(k[8:])] = true
		return true, nil
	}); err != nil {
		return err
	}
	err = t.scan(bucketBlobs, nil, func(k, v []byte) (bool, error) {
		b, err := decodeBlob(k, v)
		if err != nil {
			return false, err
		}
		rep.Blobs++
		n := counts[b.Key]
		delete(counts, b.Key)
		if n != b.Refs {
			rep.Mismatches = append(rep.Mismatches, RefMismatch{Key: b.Key, State: wire.BlobState(b.State), Stored: b.Refs, Recounted: n})
		}
		if n > 0 && b.State != blobLive {
			rep.Problems = append(rep.Problems, fmt.Sprintf("blob %s is %s but %d records reference it", b.Key, b.State, n))
		}
		wantCandidate := (b.State == blobLive || b.State == blobExpired) && b.Refs == 0
		switch {
		case b.State == blobIntent && b.LeaseUntil == nil:
			rep.Problems = append(rep.Problems, fmt.Sprintf("blob %s is an upload intent without a lease", b.Key))
		case leases && b.State == blobIntent && !t.has(bucketBlobLeases, timeKey(*b.LeaseUntil, b.Key)):
			rep.Problems = append(rep.Problems, fmt.Sprintf("blob %s is an upload intent without its lease entry (the collector would never expire it)", b.Key))
		case b.State == blobGone && b.GoneAt == nil:
			rep.Problems = append(rep.Problems, fmt.Sprintf("blob %s is gone without the time it went", b.Key))
		case wantCandidate && b.UnreferencedAt == nil:
			rep.Problems = append(rep.Problems, fmt.Sprintf("blob %s is unreferenced without the time it became so", b.Key))
		}
		if wantCandidate != candidates[b.Key] {
			rep.Problems = append(rep.Problems, fmt.Sprintf("blob %s (%s, %d refs): candidate index says %v", b.Key, b.State, b.Refs, candidates[b.Key]))
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	for key, n := range counts {
		rep.Mismatches = append(rep.Mismatches, RefMismatch{Key: key, Recounted: n})
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d records reference blob %s, which has no record", n, key))
	}
	if err := t.fsckBatches(rep); err != nil {
		return err
	}
	if leases {
		if err := t.fsckLeases(rep); err != nil {
			return err
		}
	}
	if err := t.fsckEncoding(rep); err != nil {
		return err
	}
	return t.fsckJobs(rep)
}

// fsckEncoding checks that the binary buckets hold no JSON record: Open
// rewrites those of earlier schema versions (migrateRecords), and a
// member that kept one would hash its state differently from the others.
func (t *txn) fsckEncoding(rep *FsckReport) error {
	for _, b := range binaryBuckets {
		n := 0
		if err := t.scan(b.name, nil, func(_, v []byte) (bool, error) {
			if len(v) > 0 && v[0] == '{' {
				n++
			}
			return true, nil
		}); err != nil {
			return err
		}
		if n > 0 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s holds %d JSON records, which schema version %d stores as MessagePack", b.name, n, b.since))
		}
	}
	return nil
}

// fsckBatches checks that every upload batch has its lease entry and that
// none of its unused keys has a blob record (an unused key is an intent
// only through its batch).
func (t *txn) fsckBatches(rep *FsckReport) error {
	return t.scanBatches(func(ub *uploadBatch) error {
		if !t.has(bucketBlobLeases, ub.leaseKey()) {
			rep.Problems = append(rep.Problems, fmt.Sprintf("upload batch %s of job %s has no lease entry", ub.ID, ub.Job))
		}
		for i := range ub.Count {
			if ub.used(i) {
				continue
			}
			if b, err := t.storedBlob(ub.key(i)); err != nil {
				return err
			} else if b != nil {
				rep.Problems = append(rep.Problems, fmt.Sprintf("blob %s is %s but an unused key of upload batch %s", b.Key, b.State, ub.ID))
			}
		}
		return nil
	})
}

// fsckLeases checks that every lease entry names what the collector's
// expiry ends: an upload intent's record of that lease, or an upload
// batch whose lease entry it is. An entry naming nothing is listed by
// every expiry and never ended.
func (t *txn) fsckLeases(rep *FsckReport) error {
	return t.scan(bucketBlobLeases, nil, func(k, _ []byte) (bool, error) {
		if len(k) < 8 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("lease entry %q is too short", k))
			return true, nil
		}
		key := string(k[8:])
		if id, i, ok := parseBatchKey(key); ok && i == 0 {
			ub, err := t.uploadBatch(id)
			if err != nil {
				return false, err
			}
			if ub != nil && string(ub.leaseKey()) == string(k) {
				return true, nil
			}
		}
		b, err := t.storedBlob(key)
		if err != nil {
			return false, err
		}
		if b == nil || b.State != blobIntent || b.LeaseUntil == nil || string(timeKey(*b.LeaseUntil, key)) != string(k) {
			rep.Problems = append(rep.Problems, fmt.Sprintf("lease entry of %s names no upload intent or batch of that lease", key))
		}
		return true, nil
	})
}

// fsckJobs checks that every epoch and attempt a job names (its retained,
// pending and latest completed epochs, its current generation) has its
// record.
func (t *txn) fsckJobs(rep *FsckReport) error {
	// A missing record is a problem to report; any other error ends the
	// check.
	problem := func(err error) error {
		var ce *corruptError
		if errors.As(err, &ce) {
			rep.Problems = append(rep.Problems, ce.msg)
			return nil
		}
		return err
	}
	return t.scan(bucketJobs, nil, func(_, v []byte) (bool, error) {
		var j jobRecord
		if err := decodeRecord(v, &j); err != nil {
			return false, err
		}
		names := append(append([]uint64{}, j.Retained...), j.Pending...)
		if j.LatestCompleted != 0 {
			names = append(names, j.LatestCompleted)
		}
		for _, n := range names {
			if _, err := t.epochRef(j.ID, n); problem(err) != nil {
				return false, err
			}
		}
		if j.hasAttempt() {
			if _, err := t.attemptRef(j.ID, j.Generation); problem(err) != nil {
				return false, err
			}
		}
		return true, nil
	})
}

// BlobRef is one reference from a retained checkpoint to a blob.
type BlobRef struct {
	Epoch uint64 `json:"epoch"`
	Task  string `json:"task"`
	Key   string `json:"key"`
	// Pinned marks references of a pinned epoch.
	Pinned bool `json:"pinned,omitempty"`
}

// ReferencedBlobs lists, for every retained or pinned epoch of a job and
// every task, the blobs its manifest references (each blob once per epoch
// and task).
func (f *FSM) ReferencedBlobs(job string) ([]BlobRef, uint64, error) {
	out := []BlobRef{}
	idx, err := f.view(func(t *txn) error {
		j, err := mustJob(t, job)
		if err != nil {
			return err
		}
		for _, n := range j.Retained {
			e, err := t.epochRef(job, n)
			if err != nil {
				return err
			}
			err = t.scan(bucketAcks, jobNumKey(job, n), func(_, v []byte) (bool, error) {
				var a ackRecord
				if err := decodeRecord(v, &a); err != nil {
					return false, err
				}
				if a.Lineage == 0 {
					return true, nil
				}
				m, err := readManifest(t, a.Lineage, n)
				if err != nil {
					return false, err
				}
				for _, key := range m.Blobs() {
					out = append(out, BlobRef{Epoch: n, Task: a.Task, Key: key, Pinned: e.Pinned})
				}
				return true, nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return out, idx, err
}

// Manifest returns the manifest task acknowledged in epoch of job.
func (f *FSM) Manifest(job string, epoch uint64, task string) (*manifests.Manifest, uint64, error) {
	var m *manifests.Manifest
	idx, err := f.view(func(t *txn) error {
		j, err := mustJob(t, job)
		if err != nil {
			return err
		}
		e, err := mustEpoch(t, j, epoch)
		if err != nil {
			return err
		}
		if e.State != epochCompleted && e.State != epochPending {
			return ruleErr(wire.CodeEpochNotCompleted, "epoch", "epoch %d of job %q is %s; its manifests are no longer kept", epoch, job, e.State)
		}
		a, err := t.ack(job, epoch, task)
		if err != nil {
			return err
		}
		if a == nil || a.Lineage == 0 {
			return ruleErr(wire.CodeNotFound, "task", "epoch %d of job %q holds no manifest for task %q", epoch, job, task)
		}
		m, err = readManifest(t, a.Lineage, epoch)
		return err
	})
	return m, idx, err
}
