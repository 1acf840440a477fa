package fsm

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/metastore/metastore/manifests"
)

// Applying a planned manifest: the lineage's records change, and each
// record added holds one reference to its blob.

// applyManifest writes a planned manifest change for the ack of task in
// epoch and returns the lineage it extended.
func applyManifest(t *txn, j *jobRecord, gen, epoch uint64, task string, p *manifestPlan, now time.Time) (uint64, error) {
	for _, bc := range p.commit {
		if err := commitBlob(t, bc, now, p.strict); err != nil {
			return 0, err
		}
	}
	var target *lineageRecord
	var err error
	switch p.mode {
	case "continue":
		target = p.head
	case "rollback":
		target = p.head
		if err := rollback(t, target, p.at, now); err != nil {
			return 0, err
		}
		target.Generation = gen
		target.Released = false
	case "fork", "fresh":
		if target, err = newLineage(t, j.ID, task, gen); err != nil {
			return 0, err
		}
		if p.mode == "fork" {
			if err := copyManifest(t, p.source, p.at, target); err != nil {
				return 0, err
			}
		}
		if p.head != nil {
			if err := detach(t, p.head, now); err != nil {
				return 0, err
			}
		}
		if err := t.put(bucketHeads, headKey(j.ID, task), u64(target.ID)); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("fsm: unknown manifest mode %q", p.mode)
	}
	c := p.change
	for _, b := range c.DropBases {
		if err := dropRecord(t, target, kindBase, b.ID(), epoch, now); err != nil {
			return 0, err
		}
	}
	for _, ref := range c.DropSegments {
		if err := dropRecord(t, target, kindSegment, ref, epoch, now); err != nil {
			return 0, err
		}
	}
	for _, b := range c.AddBases {
		if err := addRecord(t, target.ID, kindBase, b.ID(), &record{Length: b.Length, Added: epoch, CRC32C: b.CRC32C}, epoch); err != nil {
			return 0, err
		}
	}
	for _, s := range c.AddSegments {
		if err := addRecord(t, target.ID, kindSegment, s.ID(), &record{Length: s.Length, FirstSeq: s.FirstSeq, LastSeq: s.LastSeq, Added: epoch, CRC32C: s.CRC32C}, epoch); err != nil {
			return 0, err
		}
	}
	target.LastEpoch = epoch
	target.Epochs = append(target.Epochs, epoch)
	return target.ID, t.putLineage(target)
}

// commitBlob turns an intent into a live blob; strict (task-ack version 2)
// queues it for the leader's observation of the object store.
func commitBlob(t *txn, bc BlobCommit, now time.Time, strict bool) error {
	b, err := t.blob(bc.Key)
	if err != nil {
		return err
	}
	if b == nil {
		return &corruptError{fmt.Sprintf("blob %q passed the commit check but has no record", bc.Key)}
	}
	if b.State == blobLive {
		return nil
	}
	switch {
	case b.batch != "":
		// A key of an upload batch: its bit in the batch, so it is never
		// an intent again (upload_batches.go).
		if err := t.useBatchKey(b.batch, b.batchIndex); err != nil {
			return err
		}
		b.batch = ""
	case b.signed:
		// A signed slot (upload_slots.go): no record or lease entry
		// until now.
		b.signed = false
		b.CreatedAt = now
	case b.LeaseUntil == nil:
		return &corruptError{fmt.Sprintf("blob %q is an upload intent without a lease", bc.Key)}
	default:
		if err := t.del(bucketBlobLeases, timeKey(*b.LeaseUntil, b.Key)); err != nil {
			return err
		}
	}
	b.State = blobLive
	b.Size = bc.Size
	b.Checksum = bc.Checksum
	b.LeaseUntil = nil
	if err := t.unreference(b, now); err != nil {
		return err
	}
	// The leader looks at the object next (observe.go).
	b.AwaitingObservation = strict
	return t.putBlob(b)
}

func newLineage(t *txn, job, task string, gen uint64) (*lineageRecord, error) {
	meta := t.b(bucketMeta)
	var id uint64 = 1
	if raw := meta.Get(metaNextLineage); len(raw) == 8 {
		id = binary.BigEndian.Uint64(raw)
	}
	if err := meta.Put(metaNextLineage, u64(id+1)); err != nil {
		return nil, err
	}
	return &lineageRecord{ID: id, Job: job, Task: task, Generation: gen, Epochs: []uint64{}}, nil
}

func addRecord(t *txn, lid uint64, kind byte, ref manifests.Ref, r *record, epoch uint64) error {
	if err := t.putRec(lid, kind, ref, r); err != nil {
		return err
	}
	if epoch > 0 {
		if err := t.putChange(lid, epoch, opAdd, kind, ref); err != nil {
			return err
		}
	}
	return t.addRef(ref.Key)
}

// dropRecord drops a present record at epoch; it dies at once unless a live
// epoch of the lineage still holds it.
func dropRecord(t *txn, l *lineageRecord, kind byte, ref manifests.Ref, epoch uint64, now time.Time) error {
	r, err := t.record(l.ID, kind, ref)
	if err != nil {
		return err
	}
	if r == nil || r.Dropped != 0 {
		return &corruptError{fmt.Sprintf("lineage %d drops %s, which is not present", l.ID, ref)}
	}
	r.Dropped = epoch
	if !liveIn(l.Epochs, r) {
		return deleteRecord(t, l.ID, kind, ref, r, now)
	}
	if err := t.putRec(l.ID, kind, ref, r); err != nil {
		return err
	}
	return t.putChange(l.ID, epoch, opDrop, kind, ref)
}

// copyManifest copies the manifest of src at epoch at into dst, as present
// records added before dst's first epoch.
func copyManifest(t *txn, src *lineageRecord, at uint64, dst *lineageRecord) error {
	type item struct {
		kind byte
		ref  manifests.Ref
		r    record
	}
	var items []item
	err := t.scan(bucketRecords, u64(src.ID), func(k, v []byte) (bool, error) {
		var r record
		if err := decodeRecord(v, &r); err != nil {
			return false, err
		}
		if !r.presentAt(at) {
			return true, nil
		}
		ref, ok := parseRecordKey(k)
		if !ok {
			return false, &corruptError{"record key"}
		}
		items = append(items, item{k[8], ref, record{Length: r.Length, FirstSeq: r.FirstSeq, LastSeq: r.LastSeq, CRC32C: r.CRC32C}})
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, it := range items {
		if err := addRecord(t, dst.ID, it.kind, it.ref, &it.r, 0); err != nil {
			return err
		}
	}
	return nil
}
