package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/metastore/metastore/manifests"
)

// Releasing references: when an epoch stops being live, or a lineage is
// rolled back, detached or deleted, the records no live epoch holds die and
// drop their blob references.

// liveIn reports whether a live epoch lies in the record's [added, dropped).
func liveIn(epochs []uint64, r *record) bool {
	if r.Dropped == 0 {
		return true
	}
	i, _ := slices.BinarySearch(epochs, r.Added)
	return i < len(epochs) && epochs[i] < r.Dropped
}

func deleteRecord(t *txn, lid uint64, kind byte, ref manifests.Ref, r *record, now time.Time) error {
	if err := t.delRec(lid, kind, ref); err != nil {
		return err
	}
	if r.Added > 0 {
		if err := t.delChange(lid, r.Added, opAdd, kind, ref); err != nil {
			return err
		}
	}
	if r.Dropped > 0 {
		if err := t.delChange(lid, r.Dropped, opDrop, kind, ref); err != nil {
			return err
		}
	}
	return t.dropRef(ref.Key, now)
}

type change struct {
	epoch uint64
	op    byte
	kind  byte
	ref   manifests.Ref
}

// changesAfter lists the lineage's recorded changes in epochs in (from, to]
// (to 0: no upper bound).
func changesAfter(t *txn, lid, from, to uint64) ([]change, error) {
	var out []change
	c := t.b(bucketRecChanges).Cursor()
	t.ops.Seeks++
	prefix := u64(lid)
	for k, _ := c.Seek(append(u64(lid), u64(from+1)...)); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if len(k) < 18 {
			return nil, &corruptError{"rec_changes key"}
		}
		e := binary.BigEndian.Uint64(k[8:16])
		if to != 0 && e > to {
			break
		}
		ref, ok := parseRefSuffix(k[18:])
		if !ok {
			return nil, &corruptError{"rec_changes key"}
		}
		out = append(out, change{epoch: e, op: k[16], kind: k[17], ref: ref})
	}
	return out, nil
}

// rollback undoes every change the lineage recorded after epoch at: records
// added later die, records dropped later are present again. Nothing live
// depends on those changes: at is the lineage's newest live epoch.
func rollback(t *txn, l *lineageRecord, at uint64, now time.Time) error {
	changes, err := changesAfter(t, l.ID, at, 0)
	if err != nil {
		return err
	}
	for _, ch := range changes {
		r, err := t.record(l.ID, ch.kind, ch.ref)
		if err != nil {
			return err
		}
		if r == nil {
			continue
		}
		if r.Added > at {
			if err := deleteRecord(t, l.ID, ch.kind, ch.ref, r, now); err != nil {
				return err
			}
			continue
		}
		if ch.op == opDrop && r.Dropped > at {
			if err := t.delChange(l.ID, r.Dropped, opDrop, ch.kind, ch.ref); err != nil {
				return err
			}
			r.Dropped = 0
			if err := t.putRec(l.ID, ch.kind, ch.ref, r); err != nil {
				return err
			}
		}
	}
	l.Epochs = slices.DeleteFunc(l.Epochs, func(e uint64) bool { return e > at })
	l.LastEpoch = at
	return nil
}

// detach handles a lineage that is no longer its task's head: it keeps only
// what its live epochs hold, and goes away with the last of them.
func detach(t *txn, l *lineageRecord, now time.Time) error {
	if len(l.Epochs) == 0 {
		return deleteLineage(t, l, now)
	}
	if err := rollback(t, l, l.Epochs[len(l.Epochs)-1], now); err != nil {
		return err
	}
	return t.putLineage(l)
}

func deleteLineage(t *txn, l *lineageRecord, now time.Time) error {
	type item struct {
		kind byte
		ref  manifests.Ref
		r    record
	}
	var items []item
	err := t.scan(bucketRecords, u64(l.ID), func(k, v []byte) (bool, error) {
		var r record
		if err := decodeRecord(v, &r); err != nil {
			return false, err
		}
		ref, ok := parseRecordKey(k)
		if !ok {
			return false, &corruptError{"record key"}
		}
		items = append(items, item{k[8], ref, r})
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, it := range items {
		if err := deleteRecord(t, l.ID, it.kind, it.ref, &it.r, now); err != nil {
			return err
		}
	}
	if hid, err := t.head(l.Job, l.Task); err != nil {
		return err
	} else if hid == l.ID {
		if err := t.del(bucketHeads, headKey(l.Job, l.Task)); err != nil {
			return err
		}
	}
	return t.del(bucketLineages, u64(l.ID))
}

// epochLeft is called when an epoch of a job stops being live (aborted or
// subsumed): every lineage that acknowledged it drops it from its live
// epochs, and the records only it held die.
func epochLeft(t *txn, job string, epoch uint64, now time.Time) error {
	var lids []uint64
	err := t.scan(bucketAcks, jobNumKey(job, epoch), func(_, v []byte) (bool, error) {
		var a ackRecord
		if err := decodeRecord(v, &a); err != nil {
			return false, err
		}
		if a.Lineage != 0 {
			lids = append(lids, a.Lineage)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, lid := range lids {
		l, err := t.lineage(lid)
		if err != nil {
			return err
		}
		if l == nil {
			continue // deleted with an earlier epoch
		}
		i, found := slices.BinarySearch(l.Epochs, epoch)
		if !found {
			continue
		}
		var next uint64
		if i+1 < len(l.Epochs) {
			next = l.Epochs[i+1]
		}
		l.Epochs = slices.Delete(l.Epochs, i, i+1)
		// Only records dropped in (epoch, next] can have been held by this
		// epoch alone; each is checked against the remaining live epochs.
		changes, err := changesAfter(t, l.ID, epoch, next)
		if err != nil {
			return err
		}
		for _, ch := range changes {
			if ch.op != opDrop {
				continue
			}
			r, err := t.record(l.ID, ch.kind, ch.ref)
			if err != nil {
				return err
			}
			if r == nil || r.Dropped != ch.epoch {
				return &corruptError{fmt.Sprintf("lineage %d: drop of %s at %d without its record", l.ID, ch.ref, ch.epoch)}
			}
			if !liveIn(l.Epochs, r) {
				if err := deleteRecord(t, l.ID, ch.kind, ch.ref, r, now); err != nil {
					return err
				}
			}
		}
		if l.Released {
			if err := settle(t, l, now); err != nil {
				return err
			}
			continue
		}
		hid, err := t.head(l.Job, l.Task)
		if err != nil {
			return err
		}
		if len(l.Epochs) == 0 && hid != l.ID {
			if err := deleteLineage(t, l, now); err != nil {
				return err
			}
			continue
		}
		if err := t.putLineage(l); err != nil {
			return err
		}
	}
	return nil
}

// settle brings a released lineage to what its live epochs hold: rolled
// back to the newest of them, or deleted (with its head) when none is left.
func settle(t *txn, l *lineageRecord, now time.Time) error {
	if len(l.Epochs) == 0 {
		return deleteLineage(t, l, now)
	}
	if newest := l.Epochs[len(l.Epochs)-1]; l.LastEpoch != newest {
		if err := rollback(t, l, newest, now); err != nil {
			return err
		}
	}
	return t.putLineage(l)
}

// releaseHeads releases the lineage of every task of job as a new attempt
// starts (attempt-start version 3), after the pending epochs were aborted.
// The new attempt extends none of them as it is: its first ack continues a
// task's lineage only from the newest checkpoint the lineage holds
// (rolling back what came after), forks another, or starts afresh. So
// what came after that checkpoint (acks of aborted epochs) dies now; a
// lineage no live epoch holds (its task was removed from the topology, or
// lost its state capability, and its checkpoints were subsumed; or only
// aborted epochs had it) is deleted now; the others go with their last
// live epoch (epochLeft), unless an ack of the new attempt continues them.
// The heads stay, so such a continuation costs no copy.
func releaseHeads(t *txn, job string, now time.Time) error {
	var lids []uint64
	err := t.scan(bucketHeads, jobPrefix(job), func(_, v []byte) (bool, error) {
		if len(v) != 8 {
			return false, &corruptError{"head of job " + job}
		}
		lids = append(lids, binary.BigEndian.Uint64(v))
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, lid := range lids {
		l, err := t.lineage(lid)
		if err != nil {
			return err
		}
		if l == nil {
			return &corruptError{fmt.Sprintf("a head of job %q names lineage %d, which has no record", job, lid)}
		}
		l.Released = true
		if err := settle(t, l, now); err != nil {
			return err
		}
	}
	return nil
}
