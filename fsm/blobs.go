package fsm

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// blobState is the lifecycle state of a blob (wire.BlobState shows it).
type blobState string

const (
	// BlobIntent: a key handed to a worker for an upload, held by a lease.
	blobIntent blobState = "intent"
	// BlobLive: committed by an ack; Refs counts the manifests' references.
	blobLive blobState = "live"
	// BlobExpired: an intent whose lease ended before any ack committed it.
	blobExpired blobState = "expired"
	// BlobDeleting: marked for deletion; the object-store delete may be in
	// flight. Never referenced again.
	blobDeleting blobState = "deleting"
	// BlobGone: deleted from the object store; kept as a tombstone for a
	// while so late references are answered clearly.
	blobGone blobState = "gone"
)

// corruptError is an inconsistency in the stored state: fatal.
type corruptError struct{ msg string }

func (e *corruptError) Error() string { return "fsm: corrupt state: " + e.msg }

// IntentCreate records upload intents: keys chosen by the leader, under the
// job's prefix, held by a lease. From version 4 the leader chooses a batch
// id and the number of keys (UploadKeys derives them); before, it named
// every key.
type IntentCreate struct {
	Job        string    `json:"job"`
	Generation uint64    `json:"generation"`
	Task       string    `json:"task,omitempty"`
	Keys       []string  `json:"keys"`
	LeaseUntil time.Time `json:"lease_until"`
	// Batch is the batch id (version 4; upload_batches.go), Count the
	// number of its keys.
	Batch string `json:"batch,omitempty"`
	Count int    `json:"count,omitempty"`
}

func (p *IntentCreate) Validate() error {
	if err := wire.CheckID("job", p.Job); err != nil {
		return err
	}
	if p.Task != "" {
		if err := wire.CheckID("task", p.Task); err != nil {
			return err
		}
	}
	if p.Generation == 0 {
		return ruleErr(wire.CodeInvalid, "generation", "required (the generation of the current attempt)")
	}
	if p.Batch != "" {
		if err := checkBatchID(p.Batch); err != nil {
			return err
		}
		if len(p.Keys) != 0 {
			return ruleErr(wire.CodeInvalid, "keys", "a request of an upload batch names no keys")
		}
		if p.Count < 1 || p.Count > wire.MaxIntents {
			return ruleErr(wire.CodeInvalid, "count", "between 1 and %d uploads per request", wire.MaxIntents)
		}
		for _, k := range []string{UploadKey(p.Job, p.Task, p.Batch, 0), UploadKey(p.Job, p.Task, p.Batch, p.Count-1)} {
			if err := manifests.ValidateKey(k); err != nil {
				return ruleErr(wire.CodeInvalid, "keys", "%v", err)
			}
		}
		return nil
	}
	if p.Count != 0 {
		return ruleErr(wire.CodeInvalid, "count", "a request that names its keys has no count")
	}
	if len(p.Keys) == 0 || len(p.Keys) > wire.MaxIntents {
		return ruleErr(wire.CodeInvalid, "count", "between 1 and %d uploads per request", wire.MaxIntents)
	}
	for _, k := range p.Keys {
		if err := manifests.ValidateKey(k); err != nil {
			return ruleErr(wire.CodeInvalid, "keys", "%v", err)
		}
	}
	return nil
}

func applyIntentCreate(t *txn, c Command, p *IntentCreate) (any, error) {
	j, err := writableJob(t, p.Job)
	if err != nil {
		return nil, err
	}
	if err := checkGeneration(j, p.Generation); err != nil {
		return nil, err
	}
	if p.Batch != "" {
		if c.Version < 4 {
			return nil, ruleErr(wire.CodeInvalid, "batch", "intent-create version %d has no upload batches (from version 4)", c.Version)
		}
		return createBatch(t, c, p)
	}
	for _, k := range p.Keys {
		if b, err := t.blob(k); err != nil {
			return nil, err
		} else if b != nil {
			if b.State == blobIntent && b.Job == p.Job && b.LeaseUntil != nil && b.LeaseUntil.Equal(p.LeaseUntil) {
				continue // a retried request
			}
			return nil, ruleErr(wire.CodeConflict, "keys", "blob key %q is already in use", k)
		}
	}
	out := make([]*blobRecord, 0, len(p.Keys))
	for _, k := range p.Keys {
		lease := p.LeaseUntil
		b := &blobRecord{Key: k, Job: p.Job, Task: p.Task, State: blobIntent, LeaseUntil: &lease, CreatedAt: c.Time}
		if c.Version >= 2 {
			b.Generation = p.Generation
		}
		if old, err := t.blob(k); err != nil {
			return nil, err
		} else if old != nil {
			b = old
		} else {
			if err := t.putBlob(b); err != nil {
				return nil, err
			}
			if err := t.put(bucketBlobLeases, timeKey(lease, k), nil); err != nil {
				return nil, err
			}
		}
		out = append(out, b)
	}
	return out, nil
}

// BlobKeys names blobs for the collector's commands.
type BlobKeys struct {
	Keys []string `json:"keys"`
	// Grace, for blobs-deleting, is the time a blob must have been
	// unreferenced before it may be marked.
	Grace Duration `json:"grace,omitempty"`
}

// applyIntentsExpire ends intents whose lease is over (by the proposer's
// clock) and that no ack committed: they become GC candidates.
func applyIntentsExpire(t *txn, c Command, p *BlobKeys) (any, error) {
	expired := []string{}
	for _, k := range p.Keys {
		// A batch's lease entry names its first key (upload_batches.go).
		if ub, err := t.expiredBatch(k); err != nil {
			return nil, err
		} else if ub != nil {
			if c.Time.Before(ub.LeaseUntil) {
				continue
			}
			keys, err := t.expireBatch(ub, ub.LeaseUntil)
			if err != nil {
				return nil, err
			}
			expired = append(expired, keys...)
			continue
		}
		b, err := t.blob(k)
		if err != nil {
			return nil, err
		}
		if b == nil || b.State != blobIntent || b.batch != "" || b.LeaseUntil == nil || c.Time.Before(*b.LeaseUntil) {
			continue
		}
		if err := t.del(bucketBlobLeases, timeKey(*b.LeaseUntil, k)); err != nil {
			return nil, err
		}
		b.State = blobExpired
		if err := t.unreference(b, *b.LeaseUntil); err != nil {
			return nil, err
		}
		if err := t.putBlob(b); err != nil {
			return nil, err
		}
		expired = append(expired, k)
	}
	return expired, nil
}

// deletable reports whether the collector may mark b deleting at now: no
// reference, no live intent, unreferenced for at least grace.
func deletable(b *blobRecord, now time.Time, grace time.Duration) bool {
	if b.State != blobLive && b.State != blobExpired {
		return false
	}
	return b.Refs == 0 && b.UnreferencedAt != nil && !now.Before(b.UnreferencedAt.Add(grace))
}

// applyBlobsDeleting marks blobs deleting, re-checking each against the
// state as of this entry: a blob referenced since the leader looked is left
// alone. It returns the keys marked; only those may be deleted.
func applyBlobsDeleting(t *txn, c Command, p *BlobKeys) (any, error) {
	marked := []string{}
	for _, k := range p.Keys {
		b, err := t.blob(k)
		if err != nil {
			return nil, err
		}
		if b == nil || !deletable(b, c.Time, time.Duration(p.Grace)) {
			continue
		}
		b.State = blobDeleting // it leaves the GC candidates (putBlob)
		b.DeletingAt = &c.Time
		if err := t.putBlob(b); err != nil {
			return nil, err
		}
		if err := t.put(bucketGCDeleting, []byte(k), nil); err != nil {
			return nil, err
		}
		marked = append(marked, k)
	}
	return marked, nil
}

// applyBlobsGone records that the object store confirmed the deletes.
func applyBlobsGone(t *txn, c Command, p *BlobKeys) (any, error) {
	gone := []string{}
	for _, k := range p.Keys {
		b, err := t.blob(k)
		if err != nil {
			return nil, err
		}
		if b == nil || b.State != blobDeleting {
			continue
		}
		b.State = blobGone
		b.GoneAt = &c.Time
		if err := t.putBlob(b); err != nil {
			return nil, err
		}
		if err := t.del(bucketGCDeleting, []byte(k)); err != nil {
			return nil, err
		}
		if err := t.put(bucketGCGone, timeKey(c.Time, k), nil); err != nil {
			return nil, err
		}
		gone = append(gone, k)
	}
	return gone, nil
}

// applyBlobsPurge forgets tombstones.
func applyBlobsPurge(t *txn, c Command, p *BlobKeys) (any, error) {
	purged := []string{}
	for _, k := range p.Keys {
		b, err := t.blob(k)
		if err != nil {
			return nil, err
		}
		if b == nil || b.State != blobGone || !t.purgeable(k) {
			continue
		}
		if b.GoneAt == nil {
			return nil, &corruptError{fmt.Sprintf("blob %q is gone without the time it went", k)}
		}
		if err := t.del(bucketGCGone, timeKey(*b.GoneAt, k)); err != nil {
			return nil, err
		}
		if err := t.deleteBlob(k); err != nil {
			return nil, err
		}
		purged = append(purged, k)
	}
	return purged, nil
}

// Reads for the collector.

// Blob returns a blob's record (or the intent a signed upload slot
// reads as until an ack commits it), reading every applied entry without
// a commit (viewLatest, as the point reads of query.go).
func (f *FSM) Blob(key string) (*wire.Blob, uint64, error) {
	var out *wire.Blob
	idx, err := f.viewLatest(func(t *txn) error {
		b, err := t.blob(key)
		if err == nil && b == nil {
			// A signed upload slot no ack committed yet reads as the
			// intent it is (upload_slots.go).
			b, err = t.signedIntent(key)
		}
		if err == nil && b == nil {
			err = ruleErr(wire.CodeNotFound, "key", "blob %q is not known", key)
		}
		out = wireBlob(b)
		return err
	})
	return out, idx, err
}

// scanTimeIndex lists up to max keys of a time-ordered index whose time is
// at or before until (and, given keep, for which keep is true).
func (f *FSM) scanTimeIndex(name bucket, until time.Time, max int, keep func(t *txn, key string) bool) ([]string, error) {
	var out []string
	_, err := f.viewLatest(func(t *txn) error {
		c := t.b(name).Cursor()
		for k, _ := c.First(); k != nil && len(out) < max; k, _ = c.Next() {
			if len(k) < 8 || int64(binary.BigEndian.Uint64(k[:8])) > until.UnixNano() {
				break
			}
			if keep != nil && !keep(t, string(k[8:])) {
				continue
			}
			out = append(out, string(k[8:]))
		}
		return nil
	})
	return out, err
}

// ExpiredIntents lists intents whose lease ended at or before now.
func (f *FSM) ExpiredIntents(now time.Time, max int) ([]string, error) {
	return f.scanTimeIndex(bucketBlobLeases, now, max, nil)
}

// GCCandidates lists blobs unreferenced since at or before until.
func (f *FSM) GCCandidates(until time.Time, max int) ([]string, error) {
	return f.scanTimeIndex(bucketGCCandidates, until, max, nil)
}

// GoneBefore lists tombstones of blobs gone at or before until that may
// be purged (a signed slot's only once the cut-off passed its lease).
func (f *FSM) GoneBefore(until time.Time, max int) ([]string, error) {
	return f.scanTimeIndex(bucketGCGone, until, max, (*txn).purgeable)
}

// Deleting lists up to max blobs marked deleting.
func (f *FSM) Deleting(max int) ([]string, error) {
	var out []string
	_, err := f.viewLatest(func(t *txn) error {
		return t.scan(bucketGCDeleting, nil, func(k, _ []byte) (bool, error) {
			out = append(out, string(k))
			return len(out) < max, nil
		})
	})
	return out, err
}

// The blob statistics are computed, never stored: they are the API's
// answer (wire.BlobStats) as it is.
type (
	BlobStats = wire.BlobStats
	JobBlobs  = wire.JobBlobs
)

// BlobStats scans every blob record.
func (f *FSM) BlobStats() (*BlobStats, uint64, error) {
	s := &BlobStats{Count: map[wire.BlobState]int{}, Bytes: map[wire.BlobState]uint64{}, LiveByJob: map[string]JobBlobs{}}
	idx, err := f.view(func(t *txn) error {
		if err := t.scan(bucketBlobs, nil, func(k, v []byte) (bool, error) {
			b, err := decodeBlob(k, v)
			if err != nil {
				return false, err
			}
			s.Count[wire.BlobState(b.State)]++
			s.Bytes[wire.BlobState(b.State)] += b.Size
			if b.State == blobLive {
				j := s.LiveByJob[b.Job]
				j.Count++
				j.Bytes += b.Size
				s.LiveByJob[b.Job] = j
			}
			return true, nil
		}); err != nil {
			return err
		}
		if err := t.scanBatches(func(ub *uploadBatch) error {
			if n := ub.unused(); n > 0 {
				s.Count[wire.BlobIntent] += n
			}
			return nil
		}); err != nil {
			return err
		}
		s.Candidates = t.b(bucketGCCandidates).Stats().KeyN
		return nil
	})
	return s, idx, err
}

// Known reports, for each key, whether the store has a record of it (in
// any state): the orphan sweep deletes only objects it does not know.
func (f *FSM) Known(keys []string) (map[string]bool, error) {
	out := make(map[string]bool, len(keys))
	_, err := f.view(func(t *txn) error {
		for _, k := range keys {
			out[k] = t.has(bucketBlobs, []byte(k))
			if !out[k] {
				// An unused key of an upload batch has no record.
				intent, err := t.batchIntent(k)
				if err != nil {
					return err
				}
				out[k] = intent != nil
			}
		}
		return nil
	})
	return out, err
}
